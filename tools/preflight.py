"""Environment preflight: does this machine have what a course profile needs?

    python -m tools.preflight --profile PT-CPU [--quiet-ok]

prints one row per requirement - Python, every package of the profile (the version the profile's
requirement file asks for against the installed one), CUDA, the GPU against the profile's reference
card, free disk - each marked ``ok`` / ``missing`` / ``too old`` / ``not needed`` (or ``warn`` for an
advisory row), and exits non-zero with the command that fixes it when a required row fails.

The required versions are read from ``environments/*.txt`` (the files ``pip install -r`` uses; ``-r``
includes are followed), so the pins live in one place. A pin ``name==X`` is read as "X or newer".
torch is the exception: an installed torch >= 2.4 is accepted whatever the pin, because hosted
platforms (Colab, ModelScope) ship their own CUDA build and the course never replaces it.
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.notebook_runtime import package_version  # (standard library only: runs before the profile is installed)

__all__ = [
    "PROFILES",
    "Requirement",
    "parse_requirements",
    "profile_requirements",
    "collect_rows",
    "format_table",
    "run_preflight",
    "main",
]

GIB = 1024**3
TORCH_PLATFORM_MINIMUM = "2.4"
TORCH_RULE = f"any installed torch >= {TORCH_PLATFORM_MINIMUM} is accepted (a platform torch is never replaced)"

PROFILES = {
    "BASE-CPU": {
        "file": "base-cpu.txt",
        "cuda": False,
        "gpu_reference_gib": None,
        "disk_gib": 1,
        "about": "the exercises of notebooks 1-5 on CPU",
    },
    "PT-CPU": {
        "file": "pt-cpu.txt",
        "cuda": False,
        "gpu_reference_gib": None,
        "disk_gib": 1,
        "about": "BASE-CPU + transformers, peft, tokenizers, accelerate, trl (tiny real model on CPU)",
    },
    "PT-RL-CUDA": {
        "file": "pt-rl-cuda.txt",
        "cuda": True,
        "gpu_reference_gib": 12,
        "disk_gib": 5,
        "about": "the real-model GRPO experiment on one CUDA GPU (reference: a 12 GB-class card)",
    },
}
# A "12 GB-class" card reports a little under 12 GiB once the driver has taken its share.
GPU_CLASS_TOLERANCE_GIB = 1.0


@dataclass(frozen=True)
class Requirement:
    name: str
    op: str | None  # "==", ">=", ... or None (any version)
    version: str | None
    source: str = ""  # "file:line" it came from


_REQ_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"(?:(?P<op>===|==|>=|~=|<=|!=|>|<)\s*(?P<version>[^\s;,]+))?"
)


def parse_requirements(path, _seen=None) -> list[Requirement]:
    """Requirements of a pip requirement file, following ``-r`` / ``--requirement`` includes.

    Understands ``name``, ``name==X``, ``name>=X`` (extras and environment markers are ignored);
    comments, blank lines and pip options (``--index-url`` ...) are skipped. The first mention of a
    package wins.
    """
    path = Path(path)
    seen = _seen if _seen is not None else set()
    if path.resolve() in seen:
        return []
    seen.add(path.resolve())
    requirements: list[Requirement] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        include = re.match(r"^(?:-r|--requirement)(?:\s+|=)(\S+)$", line)
        if include:
            requirements.extend(parse_requirements(path.parent / include.group(1), seen))
            continue
        if line.startswith("-"):
            continue
        match = _REQ_LINE.match(line)
        if match:
            requirements.append(
                Requirement(match.group("name"), match.group("op"), match.group("version"), f"{path.name}:{number}")
            )
    unique: dict[str, Requirement] = {}
    for requirement in requirements:
        unique.setdefault(normalise_name(requirement.name), requirement)
    return list(unique.values())


def normalise_name(name: str) -> str:
    """A distribution name as PEP 503 compares it: runs of ``-``, ``_`` and ``.`` become ``-``, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _release_tuple(text: str) -> tuple:
    release = re.match(r"\d+(?:\.\d+)*", str(text).strip())
    return tuple(int(part) for part in release.group(0).split(".")) if release else (0,)


def _at_least(installed: str, minimum: str) -> bool:
    """installed >= minimum, by PEP 440 when ``packaging`` is importable, else by release numbers."""
    try:
        from packaging.version import Version

        return Version(installed) >= Version(minimum)
    except Exception:  # no packaging, or a version string PEP 440 rejects
        return _release_tuple(installed) >= _release_tuple(minimum)


def _find_root(root) -> Path:
    if root is not None:
        return Path(root)
    from tools.project_runtime import resolve_project_root

    return resolve_project_root()


def _profile(profile: str) -> tuple[str, dict]:
    key = str(profile).strip().upper()
    if key not in PROFILES:
        raise ValueError(f"未知的运行环境档位 / unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return key, PROFILES[key]


def pinned_version(package: str, profile: str = "PT-CPU", root=None) -> str:
    """The version ``profile``'s requirement file pins ``package`` to (``name==X``): its one home."""
    for requirement in profile_requirements(profile, root):
        if normalise_name(requirement.name) == normalise_name(package) and requirement.op == "==":
            return str(requirement.version)
    raise LookupError(f"{profile} pins no version of {package}")


def profile_requirements(profile: str, root=None) -> list[Requirement]:
    """The packages ``profile`` needs, read from ``<root>/environments/<file>`` (torch added for PT-RL-CUDA)."""
    key, spec = _profile(profile)
    path = _find_root(root) / "environments" / spec["file"]
    if not path.is_file():
        raise FileNotFoundError(f"requirement file for {key} not found: {path}")
    requirements = parse_requirements(path)
    if spec["cuda"] and all(normalise_name(r.name) != "torch" for r in requirements):
        # The CUDA profile installs torch separately (a CUDA wheel matching the driver).
        requirements.insert(0, Requirement("torch", ">=", TORCH_PLATFORM_MINIMUM, "CUDA build, installed separately"))
    return requirements


def _python_minimum(root: Path) -> str:
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
        match = re.search(r'requires-python\s*=\s*"\s*>=\s*([0-9.]+)', text)
        if match:
            return match.group(1)
    except OSError:
        pass
    return "3.10"


def _row(item, required, installed, status, fatal, note=""):
    return {
        "item": item,
        "required": required,
        "installed": installed,
        "status": status,
        "fatal": bool(fatal and status in ("missing", "too old")),
        "note": note,
    }


def _package_row(requirement: Requirement) -> dict:
    name = requirement.name
    installed = package_version(name)
    # what is accepted, not the pin: `name==X` reads as X or newer, and any torch from TORCH_PLATFORM_MINIMUM on
    op = ">=" if requirement.op in ("==", "===") else requirement.op
    wanted = f"{op}{requirement.version}" if requirement.op else "any"
    if normalise_name(name) == "torch":
        wanted = f">={TORCH_PLATFORM_MINIMUM}"
    if installed is None:
        return _row(name, wanted, "-", "missing", True)
    if normalise_name(name) == "torch":
        if _at_least(installed, TORCH_PLATFORM_MINIMUM):
            return _row(name, wanted, installed, "ok", True, TORCH_RULE)
        return _row(name, wanted, installed, "too old", True, TORCH_RULE)
    if not requirement.op or requirement.op in ("<", "<=", "!="):
        return _row(name, wanted, installed, "ok", True)
    if requirement.op in ("==", "===", ">=", "~=", ">"):
        if _at_least(installed, requirement.version):
            note = "newer than the pin" if requirement.op in ("==", "===") and installed != requirement.version else ""
            return _row(name, wanted, installed, "ok", True, note)
        return _row(name, wanted, installed, "too old", True)
    return _row(name, wanted, installed, "ok", True)


def _cuda_rows(spec: dict) -> list[dict]:
    needed = spec["cuda"]
    try:
        import torch
    except Exception:
        torch = None
    available = bool(torch is not None and torch.cuda.is_available())
    rows = []
    cuda_text = "yes" if available else "no"
    if torch is not None and available:
        cuda_text = f"yes (CUDA {torch.version.cuda})"
    if needed:
        rows.append(
            _row(
                "CUDA",
                "available",
                cuda_text,
                "ok" if available else "missing",
                True,
                "" if available else "torch sees no CUDA device",
            )
        )
    else:
        rows.append(_row("CUDA", "not needed", cuda_text, "not needed", False))

    reference = spec["gpu_reference_gib"]
    if available:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        memory_gib = props.total_memory / GIB
        gpu_text = f"{props.name}, {memory_gib:.1f} GiB"
        if reference is None:
            rows.append(_row("GPU", "not needed", gpu_text, "not needed", False))
        elif memory_gib >= reference - GPU_CLASS_TOLERANCE_GIB:
            rows.append(_row("GPU", f"{reference} GB-class", gpu_text, "ok", False))
        else:
            rows.append(
                _row(
                    "GPU",
                    f"{reference} GB-class",
                    gpu_text,
                    "warn",
                    False,
                    "below the reference card: lower max_length / group size if it runs out of memory",
                )
            )
        bf16 = bool(torch.cuda.is_bf16_supported())
        if needed:
            rows.append(
                _row(
                    "bf16",
                    "when supported",
                    "yes" if bf16 else "no",
                    "ok" if bf16 else "warn",
                    False,
                    "" if bf16 else "fp16 autocast is used instead",
                )
            )
    else:
        if reference is None:
            rows.append(_row("GPU", "not needed", "-", "not needed", False))
        else:
            rows.append(_row("GPU", f"{reference} GB-class", "-", "missing", True))
    return rows


def _disk_row(root: Path, spec: dict) -> dict:
    try:
        free = shutil.disk_usage(root).free
    except OSError as error:
        return _row("free disk", f">= {spec['disk_gib']} GiB", f"unknown ({error})", "warn", False)
    status = "ok" if free >= spec["disk_gib"] * GIB else "warn"
    return _row(
        "free disk",
        f">= {spec['disk_gib']} GiB",
        f"{free / GIB:.1f} GiB",
        status,
        False,
        "" if status == "ok" else "little room for checkpoints and caches",
    )


def collect_rows(profile: str, requirements=None, root=None) -> list[dict]:
    """The preflight rows of ``profile``; ``requirements`` overrides the ones read from environments/."""
    key, spec = _profile(profile)
    root = _find_root(root)
    if requirements is None:
        requirements = profile_requirements(key, root)
    minimum = _python_minimum(root)
    python = platform.python_version()
    rows = [_row("Python", f">={minimum}", python, "ok" if _at_least(python, minimum) else "too old", True)]
    rows.extend(_package_row(requirement) for requirement in requirements)
    rows.extend(_cuda_rows(spec))
    rows.append(_disk_row(root, spec))
    return rows


def _fix_message(key: str, spec: dict, failed: list[dict]) -> str:
    hints = []
    if any(row["item"] not in ("Python", "CUDA", "GPU") for row in failed):
        hints.append(f"make setup PROFILE={key}   (or: pip install -r environments/{spec['file']})")
    if any(row["item"] in ("CUDA", "GPU") for row in failed):
        hints.append(
            "install a CUDA build of torch matching the driver, e.g. pip install torch "
            "--index-url https://download.pytorch.org/whl/cu128 (Colab: Runtime > Change runtime "
            "type > GPU); or run the CPU path with PROFILE=PT-CPU"
        )
    if any(row["item"] == "Python" for row in failed):
        hints.append("use Python >= the version in the 'required' column (e.g. a newer python3 for make setup)")
    return "; ".join(hints)


# The table is printed in Chinese (what the notebooks call the 环境检查表); the English column names stay
# beside the Chinese ones, package names and versions are printed as they are.
HEADERS = (
    ("item", "项目 item"),
    ("required", "要求 required"),
    ("installed", "已安装 installed"),
    ("status", "状态 status"),
    ("note", "说明 note"),
)
STATUS_LABELS = {
    "ok": "通过 ok",
    "missing": "缺失 missing",
    "too old": "版本过旧 too old",
    "not needed": "不需要 not needed",
    "warn": "注意 warn",
}
ABOUT_ZH = {
    "BASE-CPU": "第 1-5 课的 CPU 练习",
    "PT-CPU": "BASE-CPU + transformers / peft / tokenizers / accelerate / trl（CPU 上的真实小模型）",
    "PT-RL-CUDA": "单张 CUDA 显卡上的真实模型 GRPO 实验（参考：12 GB 级显卡）",
}


def _width(text: str) -> int:
    """Display width: CJK characters take two columns in a terminal and in Jupyter's monospace output."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))


def format_table(rows: list[dict]) -> str:
    """The preflight rows as an aligned text table with Chinese (+ English) headers and statuses."""
    keys = [key for key, _ in HEADERS]
    table = [tuple(label for _, label in HEADERS)]
    for row in rows:
        cells = [str(row[key]) for key in keys]
        cells[3] = STATUS_LABELS.get(row["status"], str(row["status"]))
        table.append(tuple(cells))
    widths = [max(_width(line[i]) for line in table) for i in range(len(keys) - 1)]
    lines = []
    for index, line in enumerate(table):
        cells = [_pad(line[i], widths[i]) for i in range(len(widths))] + [line[-1]]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(lines)


def run_preflight(profile: str, quiet_ok: bool = False, *, requirements=None, root=None, stream=None) -> dict:
    """Check ``profile`` on this machine, print the table, return ``{"profile", "ok", "rows", "fix"}``.

    The table (环境检查表) is printed whether or not everything passes; ``quiet_ok`` (``make setup``):
    when every required row passes, print only the one-line summary.
    """
    stream = stream if stream is not None else sys.stdout
    key, spec = _profile(profile)
    rows = collect_rows(key, requirements=requirements, root=root)
    failed = [row for row in rows if row["fatal"]]
    ok = not failed
    fix = _fix_message(key, spec, failed) if failed else ""
    if ok and quiet_ok:
        print(f"preflight {key}: ok ({len(rows)} checks)", file=stream)
    else:
        print(f"环境检查表 preflight {key}：{ABOUT_ZH.get(key, spec['about'])}", file=stream)
        print(format_table(rows), file=stream)
        if ok:
            print(f"preflight {key}: ok（{len(rows)} 项检查全部通过）", file=stream)
        else:
            names = ", ".join(f"{row['item']} ({row['status']})" for row in failed)
            print(f"preflight {key}: FAILED - {names}\n  修复 fix: {fix}", file=stream)
    return {"profile": key, "ok": ok, "rows": rows, "fix": fix}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preflight", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="PT-CPU", help=f"one of {', '.join(PROFILES)} (default PT-CPU)")
    parser.add_argument("--quiet-ok", action="store_true", help="print only a one-line summary when all is ok")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="course root holding environments/ (default: found from the current folder)",
    )
    args = parser.parse_args(argv)
    try:
        report = run_preflight(args.profile, quiet_ok=args.quiet_ok, root=args.root)
    except (ValueError, FileNotFoundError) as error:
        print(f"preflight: {error}", file=sys.stderr)
        return 2
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
