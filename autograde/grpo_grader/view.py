"""What a grading sandbox must never see: the secrets the probe tries to read from inside, and the folders never bound."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .course import AUTOGRADE, ROOT, GradingPipeline


def _git(args: list[str]) -> list[str]:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


def _checkout_of(path: Path) -> Path | None:
    for folder in [path, *path.parents]:
        if (folder / "course.toml").is_file():
            return folder
    return None


def secret_probe_paths(settings: GradingPipeline, slot_db: Path) -> list[str]:
    """Paths a sandboxed kernel must not be able to read (checked by the probe)."""
    paths = [
        ROOT / "solutions",
        settings.course / "gradebook.db",
        settings.course / "source",
        settings.course / "autograded",
        settings.course / "submitted",
        AUTOGRADE / "sample_class",
        slot_db,
        AUTOGRADE / "grpo_grader" / "oracles",
        settings.course / ".grading_seed",
        AUTOGRADE / ".grading_seed",
    ]
    paths += sorted((ROOT / "solutions").glob("*.py"))[:1]
    for line in _git(["rev-parse", "--path-format=absolute", "--git-common-dir"]):
        paths.append(Path(line.strip()))
    venv_checkout = _checkout_of(Path(sys.prefix).resolve())
    if venv_checkout:
        paths.append(venv_checkout / "solutions")
    return [str(p) for p in paths if p.exists()]


def _never_bound(settings: GradingPipeline, base: Path) -> list[str]:
    """Folders no sandbox may show, whatever ``sys.path`` or ``extra_readonly_paths`` says: this checkout, the course,
    the run's folder, the git object store, the checkout holding the virtual environment (probe.refusal)."""
    found = {ROOT, settings.course, base}
    found.update(Path(line.strip()) for line in _git(["rev-parse", "--path-format=absolute", "--git-common-dir"]))
    venv_checkout = _checkout_of(Path(sys.prefix).resolve())
    if venv_checkout:
        found.add(venv_checkout)
    return sorted({str(path.resolve()) for path in found})
