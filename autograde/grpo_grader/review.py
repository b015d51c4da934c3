"""What a human may want to look at in a submission; never a score change: the lines the learner wrote (compared
with the release), patterns worth a look in them (``FLAG_PATTERNS``), ``exec`` of a decoded string, and the
fingerprint of each graded function as the learner wrote it (``learner_code``), which ``copy_review`` compares with
the reference and the rest of the class when the grades are exported."""

from __future__ import annotations

import re

import nbformat

from .learner_code import notebook_units

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


def scan_flags(code: str) -> list[str]:
    """Review flags for code the learner wrote; they never change a score."""
    return [name for name, pattern in FLAG_PATTERNS if re.search(pattern, code)]


def review_notebook(nb: nbformat.NotebookNode, release: nbformat.NotebookNode) -> tuple[dict, list[str]]:
    """({answer grade_id: the learner's unit, as stored in the grading report}, review flags) of a notebook whose
    metadata has been rebuilt against ``release``: the patterns of ``FLAG_PATTERNS`` in the lines the learner
    wrote and in what their strings decode to, and ``encoded-exec``."""
    _, _, written = compare_with_release(nb, release)
    units, flags = notebook_units(nb, release, scan=scan_flags)
    own = scan_flags(written)
    return {gid: unit.to_json() for gid, unit in units.items()}, own + [f for f in flags if f not in own]
