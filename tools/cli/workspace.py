"""The learner's work copy: ``notebooks/`` copied into the git-ignored ``work/`` folder.

    python -m tools.cli.workspace            # `make workspace`: copy what is missing, report what is newer
    python -m tools.cli.workspace --notice   # after `make release`: only say which copies are older
    python -m tools.cli.workspace --update nb01_group_advantages   # take the new version (old copy kept)

``make lab`` (the learner role) opens ``work/``, so autosave writes there and never into a tracked
file: ``git pull`` and ``make release`` only ever change ``notebooks/``. Every copy is recorded in
``work/.workspace.json`` with the release stamp it came from (``metadata.course.stamp`` of the
learner notebook, see ``tools.chain.cells.release_stamp``); when ``notebooks/`` later holds a
version with another stamp the learner is told so, and ``--update`` keeps the old copy beside the new
one as ``<assignment>.<date>-<time>.ipynb``. A copy is never overwritten.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from tools.project_runtime import resolve_project_root

ROOT = resolve_project_root(Path(__file__))  # the checkout this module belongs to
WORK_DIR = "work"
RECORD = ".workspace.json"


def _stamp(path: Path) -> str | None:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("course", {}).get("stamp")
    except (OSError, ValueError):
        return None


def _released(root: Path) -> dict[str, Path]:
    return {
        path.parent.name: path
        for path in sorted((root / "notebooks").glob("*/*.ipynb"))
        if path.stem == path.parent.name
    }


def _load_record(work: Path) -> dict:
    try:
        return json.loads((work / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"copies": {}}


def _save_record(work: Path, record: dict) -> None:
    tmp = work / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, work / RECORD)


def _copy_folder(source: Path, target: Path) -> None:
    """Copy an assignment folder (the notebook and any data beside it), skipping checkpoints."""
    shutil.copytree(
        source, target, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"), dirs_exist_ok=True
    )


def status(root: Path = ROOT) -> dict[str, str]:
    """``{assignment: "missing" | "current" | "older"}`` for every released notebook."""
    work = root / WORK_DIR
    copies = _load_record(work).get("copies", {})
    result = {}
    for name, path in _released(root).items():
        mine = work / name / f"{name}.ipynb"
        if not mine.is_file():
            result[name] = "missing"
            continue
        recorded = copies.get(name, {}).get("stamp") or _stamp(mine)
        result[name] = "current" if recorded == _stamp(path) else "older"
    return result


def sync(root: Path = ROOT, quiet: bool = False) -> dict[str, str]:
    """Copy every released notebook that ``work/`` lacks; return :func:`status` (after copying)."""
    work = root / WORK_DIR
    work.mkdir(exist_ok=True)
    record = _load_record(work)
    copies = record.setdefault("copies", {})
    copied = []
    for name, path in _released(root).items():
        if (work / name / f"{name}.ipynb").is_file():
            continue
        _copy_folder(path.parent, work / name)
        copies[name] = {"stamp": _stamp(path), "copied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        copied.append(name)
    _save_record(work, record)
    if copied and not quiet:
        print(f"已把 {len(copied)} 个笔记本复制到 {work}（你的工作副本，git 不跟踪）：{', '.join(copied)}")
    return status(root)


def update(names: list[str], root: Path = ROOT) -> list[Path]:
    """Take the released version of ``names``; the learner's old copy is renamed, never deleted."""
    work = root / WORK_DIR
    released = _released(root)
    unknown = sorted(set(names) - set(released))
    if unknown:
        raise SystemExit(f"没有这些笔记本：{', '.join(unknown)}；可选：{', '.join(released)}")
    record = _load_record(work)
    kept = []
    for name in names:
        mine = work / name / f"{name}.ipynb"
        if mine.is_file():
            backup = mine.with_name(f"{name}.{time.strftime('%Y%m%d-%H%M%S')}.ipynb")
            os.replace(mine, backup)
            kept.append(backup)
        _copy_folder(released[name].parent, work / name)
        record.setdefault("copies", {})[name] = {
            "stamp": _stamp(released[name]),
            "copied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    _save_record(work, record)
    return kept


def notice(root: Path = ROOT, stream=None) -> list[str]:
    """Print (Chinese) which work copies are older than ``notebooks/``; return their names."""
    stream = stream or sys.stdout
    if not (root / WORK_DIR).is_dir():
        return []
    older = [name for name, state in status(root).items() if state == "older"]
    if older:
        print(
            f"提示：notebooks/ 里有新版本，而你在 {WORK_DIR}/ 中的副本较旧：{', '.join(older)}。\n"
            f'  你的副本不会被覆盖。需要新版本时运行：make workspace UPDATE="{" ".join(older)}"\n'
            "  （旧副本会改名保留为 <作业名>.<日期>-<时间>.ipynb，可对照着把答案抄过去）",
            file=stream,
        )
    return older


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cli.workspace", description=__doc__.split("\n")[0])
    parser.add_argument("--notice", action="store_true", help="only report copies older than notebooks/")
    parser.add_argument(
        "--update",
        nargs="*",
        default=None,
        metavar="ASSIGNMENT",
        help="take the released version of these assignments (the old copy is kept)",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.notice:
        notice(root)
        return 0
    if args.update:
        for backup in update(args.update, root):
            print(f"旧副本已保留为 {backup.relative_to(root)}")
        print(f"已更新：{', '.join(args.update)}")
        return 0
    states = sync(root)
    current = sum(state == "current" for state in states.values())
    print(f"工作副本 {root / WORK_DIR}：{current}/{len(states)} 个与 notebooks/ 一致。")
    notice(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
