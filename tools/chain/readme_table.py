"""The notebook table of README.md (notebook, what it teaches, profile, launch badges).

    python -m tools.chain.readme_table           # rewrite the block in README.md (one line says what changed)
    python -m tools.chain.readme_table --print   # ... and print the block
    python -m tools.chain.readme_table --check   # exit 1 when the block is stale

The block lies between ``<!-- notebooks:begin -->`` and ``<!-- notebooks:end -->``. Its rows are the
assignments of ``solutions/`` plus the rows already in the block (planned notebooks keep their row);
the "内容" / "环境" prose of an existing row is kept as written, a new assignment starts from its
source (first heading, header profile). The Colab badges and the copy-paste ``git clone`` line under the
table (ModelScope and other platforms: no documented ModelScope link form was found, see
``tools.chain.cells``) are restamped from ``course.toml`` every time, so a fork edits ``repository`` /
``branch`` there and runs ``make release``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tools.chain.cells import COLAB_BADGE, clone_command, colab_url, load_settings
from tools.project_runtime import resolve_project_root

ROOT = resolve_project_root(Path(__file__))  # the checkout this chain belongs to (build-time root)
BEGIN, END = "<!-- notebooks:begin -->", "<!-- notebooks:end -->"
HEADER = ("笔记本", "内容", "环境", "在线运行")
_NAME = re.compile(r"nb\d{2}[a-z]?_[a-z0-9_]+")
COLAB_SMALL = COLAB_BADGE


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row (``\\|`` inside a cell is kept)."""
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")):
        return []
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", body[1:-1])]


def existing_rows(readme: str) -> dict[str, tuple[str, str]]:
    """``{assignment: (what it teaches, profile)}`` from the current block."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README.md has no {BEGIN} ... {END} block")
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = {}
    for line in block.splitlines():
        cells = _cells(line)
        if len(cells) < 3:
            continue
        name = _NAME.search(cells[0])
        if name:
            rows[name.group(0)] = (cells[1], cells[2])
    return rows


def source_summary(path: Path) -> tuple[str, str]:
    """(first heading, profile) of a jupytext source, for an assignment the README does not list yet."""
    text = path.read_text(encoding="utf-8")
    profile = re.search(r"profile:\s*([A-Z-]+)", text)
    heading = re.search(r"^# #+ (.+)$", text, re.MULTILINE)
    return (heading.group(1).strip() if heading else path.stem), (profile.group(1) if profile else "?")


def render(root: Path = ROOT, readme: str | None = None) -> str:
    """The block (markers included) for the current sources, README prose and course.toml."""
    readme = (root / "README.md").read_text(encoding="utf-8") if readme is None else readme
    settings = load_settings(root)
    # a lesson whose source is gone (renamed or split) leaves the table
    rows = {name: row for name, row in existing_rows(readme).items() if (root / "solutions" / f"{name}.py").is_file()}
    for source in sorted((root / "solutions").glob("nb*.py")):
        rows.setdefault(source.stem, source_summary(source))
    lines = [BEGIN, "| " + " | ".join(HEADER) + " |", "| " + " | ".join("---" for _ in HEADER) + " |"]
    for name in sorted(rows):
        teaches, profile = rows[name]
        path = f"notebooks/{name}/{name}.ipynb"
        if (root / path).is_file():
            cell = f"[`{name}`]({path})"
            badges = f"[![Colab]({COLAB_SMALL})]({colab_url(name, settings)})"
        else:
            cell, badges = f"`{name}`", "（尚未发布）"
        lines.append(f"| {cell} | {teaches} | {profile} | {badges} |")
    lines += [
        "",
        "魔搭（ModelScope）Notebook 或其他 Jupyter 平台：在实例的终端里克隆课程，再打开 "
        "`notebooks/` 里的笔记本、运行第一个代码单元格：",
        "",
        "```bash",
        clone_command(settings, "/mnt/workspace"),
        "```",
        END,
    ]
    return "\n".join(lines)


def update(root: Path = ROOT) -> tuple[str, bool]:
    """Rewrite the block in README.md; return (block, changed)."""
    path = root / "README.md"
    readme = path.read_text(encoding="utf-8")
    block = render(root, readme)
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    new = readme[:start] + block + readme[end:]
    if new != readme:
        path.write_text(new, encoding="utf-8")
    return block, new != readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chain.readme_table", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when README.md's block is stale")
    parser.add_argument("--print", action="store_true", help="print the block too (make release does not)")
    args = parser.parse_args(argv)
    if args.check:
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        current = readme[readme.index(BEGIN) : readme.index(END) + len(END)]
        if current != render(ROOT, readme):
            print("README.md: the notebook table is stale - run `python -m tools.chain.readme_table`", file=sys.stderr)
            return 1
        print("README.md: notebook table up to date")
        return 0
    block, changed = update(ROOT)
    if args.print:
        print(block)
    rows = sum(1 for line in block.splitlines() if line.startswith("| [`"))
    print(f"README.md: notebook table {'updated' if changed else 'unchanged'} ({rows} notebooks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
