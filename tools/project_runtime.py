"""Find the course root (the folder holding ``course.toml``) from wherever a notebook runs, and read that file.

``course.toml`` is the one source of the course-wide settings (id, title, repository, branch):
``course_settings()`` returns its ``[course]`` table and ``course_id()`` the course id (nbgrader's
``CourseDirectory.course_id`` and the gradebook use it).

Also where run records go under that root (``record_relative_path``) and the one run-label rule of every record
(``RUN_LABEL_PATTERN``, ``check_run_label``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

MARKER = "course.toml"


def _candidates(start: Path) -> list[Path]:
    start = start.expanduser().resolve()
    if start.is_file():
        start = start.parent
    return [start, *start.parents]


def resolve_project_root(start=None) -> Path:
    """Return the course root: the nearest folder at or above ``start`` that holds ``course.toml``.

    ``start`` defaults to the current working directory, which covers ``notebooks/<assignment>/``,
    nbgrader's ``autograde/autograded/<learner>/<assignment>/`` and a shell at the repository root.
    With the default, the folder of the imported ``tools`` package is tried next, so a notebook whose
    working directory lies outside the clone (Colab runs in ``/content``) still finds the clone it
    imported ``tools`` from. Raises ``FileNotFoundError`` naming the marker, the folders searched and
    the fix when no folder holds the marker.
    """
    if start is None:
        searched = _candidates(Path.cwd())
        fallback = _candidates(Path(__file__).resolve().parent)
        searched += [folder for folder in fallback if folder not in searched]
    else:
        searched = _candidates(Path(start))
    for folder in searched:
        if (folder / MARKER).is_file():
            return folder
    listing = "\n".join(f"  - {folder}" for folder in searched)
    raise FileNotFoundError(
        f"找不到课程根目录：以下文件夹中都没有标记文件 `{MARKER}`。\n"
        f"Course root not found: no `{MARKER}` in any of these folders:\n{listing}\n"
        "修复 / Fix: 在课程仓库的克隆目录（含 course.toml 的文件夹）里启动 Jupyter 或运行命令，"
        "或调用 resolve_project_root(start=<克隆内的某个路径>)；在 Colab 上先运行笔记本的第一个单元（它会克隆仓库）。 / "
        "start Jupyter or the command inside the course clone (the folder holding course.toml), or pass "
        "resolve_project_root(start=<a path inside the clone>); on Colab run the notebook's first cell, "
        "which clones the repository."
    )


def course_settings(root=None) -> dict:
    """The ``[course]`` table of ``course.toml`` (``id``, ``title``, ``repository``, ``branch``) of the course at
    or above ``root`` (default: see ``resolve_project_root``)."""
    import tomllib

    folder = resolve_project_root(root)
    with open(folder / MARKER, "rb") as handle:
        return tomllib.load(handle)["course"]


def course_id(root=None) -> str:
    """The course id (``[course] id`` of ``course.toml``)."""
    return str(course_settings(root)["id"])


# Run records (evidence JSON) under the course root. The committed reference records of a kind live in
# benchmarks/results/<kind>/; every other run (a learner's own RUN_LABEL, `make experiment`, `make online`, the
# notebooks' default labels) goes to the git-ignored benchmarks/results/local/<kind>/, so runs never dirty the
# repository.
RESULTS_RELATIVE_DIR = Path("benchmarks") / "results"
LOCAL_RESULTS_RELATIVE_DIR = RESULTS_RELATIVE_DIR / "local"


def record_relative_path(kind: str, stem: str, label: str, reference_labels) -> Path:
    """Where the record ``{stem}_{label}.json`` of a run of ``kind`` goes, relative to the course root:
    ``benchmarks/results/{kind}/`` when ``label`` is one of the committed ``reference_labels``, else the
    git-ignored ``benchmarks/results/local/{kind}/``. The caller checks that ``label`` is a safe file-name part."""
    folder = RESULTS_RELATIVE_DIR if label in tuple(reference_labels) else LOCAL_RESULTS_RELATIVE_DIR
    return folder / kind / f"{stem}_{label}.json"


# The run-label rule of every run record (nb06's `make experiment`, nb07's `make online`, their notebooks): a label
# becomes part of a file name. The evidence schemas restate the pattern as their `run_label` pattern (JSON cannot
# import it); tests/test_tools_project_runtime.py keeps every copy equal to this one.
RUN_LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_run_label(label: str) -> str:
    """Return ``label`` if it matches :data:`RUN_LABEL_PATTERN` (letters, digits, ``.``, ``_``, ``-``; a letter or
    digit first; at most 64), else raise ``ValueError`` (Chinese for the learner, then English)."""
    if not isinstance(label, str) or not RUN_LABEL_PATTERN.fullmatch(label):
        raise ValueError(
            "RUN_LABEL 会成为结果文件名的一部分：只能用字母、数字、'.'、'_'、'-'（以字母或数字开头，"
            f"最多 64 个字符），收到 {label!r}。 / RUN_LABEL becomes part of the record's file name: "
            f"letters, digits, '.', '_', '-' only (a letter or digit first, at most 64 characters), got {label!r}."
        )
    return label


def venv_env(extra: dict[str, str] | None = None, pythonpath: list[Path] | tuple[Path, ...] = ()) -> dict[str, str]:
    """The environment for a subprocess of this interpreter (the one definition: the build chain and the grader use
    it): this interpreter's bin folder first on PATH (nbgrader shells out to `alembic`), the ``pythonpath`` folders
    first on PYTHONPATH, then ``extra``."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in [*map(str, pythonpath), env.get("PYTHONPATH", "")] if p)
    env.update(extra or {})
    return env
