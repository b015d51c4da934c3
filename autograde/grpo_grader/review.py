"""What a human may want to look at in a submission; never a score change: the lines the learner wrote (compared
with the release), patterns worth a look in them (``FLAG_PATTERNS``), and answer cells that are mostly the course's
reference answer (winnowed fingerprints, ``submission.py``)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import nbformat

from .course import ROOT
from .submission import containment, fingerprints, read_notebook, worked_answers

# Patterns worth a human look in answer cells; they never change a score.
FLAG_PATTERNS = [
    (
        "ipython-hooks",
        r"input_transformers|ast_transformers|events\.register|set_custom_exc|register_magic"
        r"|\.run_cell\b|showtraceback",
    ),
    ("grader-internals", r"tools\.grading|_ORIGINALS|\btampered\b|sys\.modules"),
    (
        "monkeypatch",
        r"\b(?:torch|torch\.testing|torch\.Tensor|builtins|math|numpy|np)\.[A-Za-z_]+\s*=(?!=)"
        r"|__builtins__|setattr\(\s*(?:torch|builtins|math)",
    ),
    ("exit", r"os\._exit|sys\.exit|\bquit\(|\bexit\(|SystemExit|os\.kill\b"),
    ("file-access", r"\bopen\(|os\.walk|\bglob\b|listdir|scandir|read_text|read_bytes|gradebook|solutions/"),
    ("processes", r"subprocess|os\.system|os\.popen|os\.fork|ctypes|multiprocessing|\bsocket\b"),
]


def compare_with_release(
    submitted: nbformat.NotebookNode, release: nbformat.NotebookNode
) -> tuple[list[str], list[str], str]:
    """(locked cells the learner edited, locked cells the learner deleted, the code the learner wrote).

    nbgrader restores both kinds of locked cells from the gradebook; the learner's own code is every line of a
    code cell that no code cell of the released notebook has (answers, added cells, lines added to a setup
    cell): ``import numpy as np`` added to the imports cell is the learner's, the cell's released lines are not.
    """

    def locked(cell):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        return meta.get("grade_id") and meta.get("locked") and not meta.get("solution")

    released = {c.metadata["nbgrader"]["grade_id"]: c for c in release.cells if locked(c)}
    mine = {}
    for cell in submitted.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            mine.setdefault(gid, cell)
    edited = [gid for gid, cell in released.items() if gid in mine and mine[gid].source != cell.source]
    deleted = [gid for gid in released if gid not in mine]
    release_lines = {line.strip() for c in release.cells if c.cell_type == "code" for line in c.source.splitlines()}
    written = "\n".join(
        line
        for c in submitted.cells
        if c.cell_type == "code"
        for line in c.source.splitlines()
        if line.strip() not in release_lines
    )
    return edited, deleted, written


COPY_THRESHOLD = 0.8  # share of an answer's fingerprint found in the reference (or another learner's answer)


@functools.cache
def reference_fingerprints(assignment: str, course: Path) -> dict[str, frozenset]:
    """{answer grade_id: fingerprint of the course's worked answer}, read from nbgrader's source version of the lesson
    (``<course>/source/<assignment>/<assignment>.ipynb``, which `make release` builds from ``solutions/``), and under
    ``"*"`` the fingerprint of the lesson's exported module (``tools/lessons/<assignment>.py``); empty where neither
    exists."""
    out: dict[str, frozenset] = {}
    source = course / "source" / assignment / f"{assignment}.ipynb"
    if source.is_file() and not source.is_symlink():
        nb, _ = read_notebook(source.read_text(encoding="utf-8"))
        if nb is not None:
            out = {gid: frozenset(fingerprints(text)) for gid, text in worked_answers(nb).items()}
    module = ROOT / "tools" / "lessons" / f"{assignment}.py"
    if module.is_file():
        out["*"] = frozenset(fingerprints(module.read_text(encoding="utf-8")))
    return out


def copies_reference(assignment: str, answers: dict[str, list[int]], course: Path) -> list[str]:
    """``copies-reference:<share>%`` when an answer cell is (nearly) the course's reference answer: most of its
    fingerprint is in the worked answer or the lesson module (a flag for a human; never a score change)."""
    reference = reference_fingerprints(assignment, course)
    shares = [
        containment(prints, reference.get(gid, frozenset()) | reference.get("*", frozenset()))
        for gid, prints in answers.items()
    ]
    best = max(shares, default=0.0)
    return [f"copies-reference:{round(100 * best)}%"] if best >= COPY_THRESHOLD else []


def scan_flags(code: str) -> list[str]:
    """Review flags for code the learner wrote; they never change a score."""
    return [name for name, pattern in FLAG_PATTERNS if re.search(pattern, code)]
