"""Load the course's own answers from the notebook sources, so the benchmarks time the code learners are
graded against (never a copy of it).

``load_answers("nb01_group_advantages", ["compute_group_advantages"])`` reads
``solutions/nb01_group_advantages.py`` with jupytext, executes the notebook's top-level import statements
(from every code cell that is not an answer cell or a test cell) and then the requested answer cells
(found by ``cell.metadata["nbgrader"]["grade_id"]``; a locked helper cell with a ``grade_id`` may be
requested too, a test cell may not) in a fresh namespace, in the order given, and returns that namespace.
The ``### BEGIN/END SOLUTION`` markers are plain comments, so the answer cell runs as written. What the
cells print while loading (a helper cell's demo line) is discarded.
"""

from __future__ import annotations

import ast
import contextlib
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"


class CourseCodeUnavailable(RuntimeError):
    """The source or one of the requested answer cells does not exist (yet)."""


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _import_statements(source: str) -> list[str]:
    """The top-level ``import`` / ``from ... import`` statements of a cell, as source text."""
    # IPython magics (`%matplotlib inline`, `!pip ...`) are not Python: blank them, keep line numbers.
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    try:
        tree = ast.parse(source)
    except SyntaxError:  # anything else that is not plain Python contributes no imports
        return []
    return [
        ast.get_source_segment(source, node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
    ]


def load_answers(assignment: str, grade_ids: list[str], solutions: Path = SOLUTIONS) -> dict:
    """Namespace holding the notebook's imports and the answer cells ``grade_ids`` of ``assignment``."""
    import jupytext

    path = Path(solutions) / f"{assignment}.py"
    if not path.exists():
        raise CourseCodeUnavailable(f"{_shown(path)} does not exist")
    nb = jupytext.read(path, fmt="py:percent")
    answers: dict[str, str] = {}
    imports: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id")
        if grade_id in grade_ids:
            if meta.get("grade") and not meta.get("solution"):
                raise CourseCodeUnavailable(f"{path.name}: cell {grade_id!r} is a test cell, not code to load")
            answers[grade_id] = cell.source
        elif not meta.get("grade") and not meta.get("solution"):
            imports.extend(_import_statements(cell.source))
    missing = [grade_id for grade_id in grade_ids if grade_id not in answers]
    if missing:
        raise CourseCodeUnavailable(f"{path.name}: no answer cell with grade_id {missing}")
    namespace: dict = {"__name__": f"course_{assignment}"}
    exec(compile("\n".join(dict.fromkeys(imports)), f"{path.name}:imports", "exec"), namespace)
    with contextlib.redirect_stdout(io.StringIO()):  # a helper cell may print a demo line
        for grade_id in grade_ids:
            exec(compile(answers[grade_id], f"{path.name}:{grade_id}", "exec"), namespace)
    return namespace
