"""The bundled sample class: one learner per case, built from the released learner notebooks.

    autograde/sample_class/cases/<learner>.py        what the learner did, per assignment (``CASE``)
    autograde/sample_class/submitted/<learner>/...   the generated submissions (tracked; `sample --rebuild`)
    autograde/sample_class/expected.json             the expected score per learner and assignment,
                                                     written by hand from the points of the test cells

A case is a dict ``{assignment: spec}``; a spec may hold:

- ``base``: ``"solution"`` (every answer cell gets the worked answer from ``solutions/<a>.py``) or
  ``"release"`` (the learner version as released, every TODO still raising ``NotImplementedError``);
- ``cells``: ``{grade_id: source}``: the new source of those cells (answers, or a test cell a learner edited);
- ``edit``: ``{grade_id: [(old, new), ...]}``: text replacements in a cell after ``base`` and ``cells`` (each
  ``old`` must occur in the cell: a changed notebook makes the rebuild fail instead of silently drifting);
- ``prepend``: ``{grade_id: text}``: text put before a cell's source (after ``base``, ``cells`` and ``edit``);
- ``delete``: grade_ids of cells the learner deleted;
- ``insert_after`` / ``insert_before``: ``[(grade_id, source)]``: new code cells the learner added;
- ``append``: ``[source]``: new code cells the learner added at the end of the notebook;
- ``edit_setup``: ``[(marker, old, new)]``: a text replacement in the first setup cell without a grade_id (an
  editable cell of the lesson, e.g. its imports) whose source contains ``marker``;
- ``filename``: the file name the learner used (default ``<assignment>.ipynb``);
- ``metadata``: ``{grade_id: {key: value}}``: edits of a cell's nbgrader metadata (points, checksum, grade, ...);
  a ``grade_id`` key renames the cell's id; ``cell_type`` changes the cell's type;
- ``duplicate``: ``[(grade_id, source)]``: a copy of that cell (same nbgrader metadata) with new source after it;
- ``inject``: ``[(grade_id, source, nbgrader)]``: a new code cell with that nbgrader metadata after the cell;
- ``kernelspec``: the notebook's kernelspec replaced by this dict;
- ``nbformat``: ``3``: the notebook written in the nbformat 3 layout;
- ``corrupt``: ``"truncate"``: the file is cut in half (not valid JSON); ``"deep"``: valid JSON nested 100 000
  levels deep inside a cell's metadata;
- ``notebook_of``: another assignment: its notebook (with ``base`` and ``cells`` of that one) handed in under this
  assignment's name;
- ``layout``: ``"flat"``: the file lies in the learner's folder itself, not in an assignment folder.

A learner whose every file is skipped (``layout`` ``"flat"``) has no gradebook row: ``expected.json`` gives it one
``"skipped"`` entry instead of rows per lesson (``expected_skipped``).

The lessons of the sample class are ``LESSONS``: every lesson with an oracle module. Adding a lesson = its entries in
the cases s02 and s04 and the copy review's calibration learners ``calibration/k*.py`` (s01 and s03 cover every
lesson of ``LESSONS``), its rows in ``expected.json``, then ``review --calibrate``
(``tests/test_one_home.py::test_every_graded_lesson_is_in_each_of_its_places`` lists the places).
"""

from __future__ import annotations

import copy
import json
import runpy
import shutil
from pathlib import Path

import nbformat

from autograde.grpo_grader.course import AUTOGRADE, ROOT
from autograde.grpo_grader.oracles import oracle_assignments

SAMPLE = AUTOGRADE / "sample_class"
CASES = SAMPLE / "cases"
SUBMITTED = SAMPLE / "submitted"
EXPECTED = SAMPLE / "expected.json"
# The sample class runs with short limits so that its infinite loops cost little time in CI: on an idle 2-core
# machine its honest notebooks take at most ~6 s in nbgrader and ~3 s in one cell. s06's nb01 spends two cell limits
# in its loops plus the rest of the notebook, the oracle's cases included (they run in the same kernel): at a 30 s
# notebook limit that left ~4 s, and a loaded CI run hit it (timeout, 0 instead of 13); 40 s and 10 s leave room
# before machine_timeouts() scales them; the
# grace after the last result (l01 lingers after it) ends well inside the notebook limit, 5 s after its last cell's
# start. The memory limit is fixed so that the huge-allocation case fails the same way on every machine; so are the
# job caps (job_caps.py), so that the fork bomb (j1) and the memory hog (j2) reach them while every honest job stays
# below.
TIMEOUTS = {
    "cell_timeout": 10,
    "notebook_timeout": 40,
    "grace_after_results": 5,
    "memory_limit_mb": 4096,
    "job_memory_mb": 1536,
    "job_max_processes": 64,
}
# every lesson the sample class grades: every lesson with an oracle module (a learner's row for a lesson it did not
# submit is "missing")
LESSONS = oracle_assignments()


REFERENCE_IMPORT_S = 2.0  # `import torch` on an idle 2-core machine, about (1.8 s in the pipeline, 1.9-2.4 s fresh)


def machine_timeouts(say=print) -> dict:
    """TIMEOUTS scaled to this machine's speed right now: one timed ``import torch`` against REFERENCE_IMPORT_S, the
    factor clamped to [1, 4] (a busy machine gets longer limits, an idle one the short ones); the time limits and the
    grace after the last result scale. The import is this
    process's own where torch is not imported yet (the grading run needs it anyway: no second import of torch paid
    for a measurement), else one in a fresh interpreter. The memory limit and the job caps are not scaled."""
    import subprocess
    import sys
    import time

    started = time.monotonic()
    if "torch" in sys.modules:
        subprocess.run([sys.executable, "-c", "import torch"], check=False, capture_output=True)
    else:
        import torch  # noqa: F401
    took = time.monotonic() - started
    factor = min(4.0, max(1.0, took / REFERENCE_IMPORT_S))
    say(f"[autograde] sample class: `import torch` took {took:.1f} s -> time limits x{factor:.1f}")
    return {
        "cell_timeout": int(TIMEOUTS["cell_timeout"] * factor),
        "notebook_timeout": int(TIMEOUTS["notebook_timeout"] * factor),
        "grace_after_results": int(TIMEOUTS["grace_after_results"] * factor),
        **{key: TIMEOUTS[key] for key in ("memory_limit_mb", "job_memory_mb", "job_max_processes")},
    }


def load_cases() -> dict[str, dict]:
    cases = {}
    for path in sorted(CASES.glob("*.py")):
        cases[path.stem] = runpy.run_path(str(path))["CASE"]
    return cases


def worked_answers(assignment: str) -> dict[str, str]:
    """{grade_id: source} of every answer cell of the lesson built from ``solutions/``, solution markers removed."""
    from autograde.grpo_grader.submission import worked_answers as answers_of
    from tools.chain.notebooks import build_notebook

    return answers_of(build_notebook(assignment))


def _released(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def build_submission(assignment: str, spec: dict, answers_cache: dict) -> tuple[str, bytes]:
    filename = spec.get("filename", f"{assignment}.ipynb")
    assignment = spec.get("notebook_of", assignment)  # another lesson's notebook under this one's name
    nb = copy.deepcopy(_released(assignment))
    sources = {}
    if spec.get("base", "solution") == "solution":
        if assignment not in answers_cache:
            answers_cache[assignment] = worked_answers(assignment)
        sources.update(answers_cache[assignment])
    elif spec.get("base") != "release":
        raise ValueError(f"unknown base {spec.get('base')!r}")
    sources.update(spec.get("cells", {}))
    for gid, edits in spec.get("edit", {}).items():
        if gid not in sources:
            sources[gid] = next((c.source for c in nb.cells if _grade_id(c) == gid), "")
        for old, new in edits:
            if old not in sources[gid]:
                raise ValueError(f"{assignment}/{gid}: text to edit not found: {old!r}")
            sources[gid] = sources[gid].replace(old, new)
    for gid, text in spec.get("prepend", {}).items():
        if gid not in sources:
            sources[gid] = next((c.source for c in nb.cells if _grade_id(c) == gid), "")
        sources[gid] = text + sources[gid]
    known = {_grade_id(c) for c in nb.cells}
    unknown = sorted((set(sources) | set(spec.get("delete", []))) - known)
    unknown += [gid for gid, _ in spec.get("insert_after", []) + spec.get("insert_before", []) if gid not in known]
    for marker, old, new in spec.get("edit_setup", []):
        cell = next(
            (c for c in nb.cells if c.cell_type == "code" and _grade_id(c) is None and marker in c.source), None
        )
        if cell is None or old not in cell.source:
            raise ValueError(f"{assignment}: no setup cell with {marker!r} containing {old!r}")
        cell.source = cell.source.replace(old, new, 1)
    if unknown:
        raise KeyError(f"{assignment}: no cell with grade_id {unknown}")
    for cell in nb.cells:
        if _grade_id(cell) in sources:
            cell.source = sources[_grade_id(cell)]
    nb.cells = [c for c in nb.cells if _grade_id(c) not in set(spec.get("delete", []))]
    for gid, source in spec.get("duplicate", []):
        position = next(i for i, c in enumerate(nb.cells) if _grade_id(c) == gid)
        twin = copy.deepcopy(nb.cells[position])
        twin.source, twin["id"] = source, f"duplicate-{position}"
        nb.cells.insert(position + 1, twin)
    for index, (after, source, meta) in enumerate(spec.get("inject", [])):
        position = next(i for i, c in enumerate(nb.cells) if _grade_id(c) == after) + 1
        new = nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta})
        new["id"] = f"learner-injected-{index}"
        nb.cells.insert(position, new)
    for gid, edits in spec.get("metadata", {}).items():
        cell = next(c for c in nb.cells if _grade_id(c) == gid)
        edits = dict(edits)
        if "cell_type" in edits:
            cell.cell_type = edits.pop("cell_type")
            if cell.cell_type == "markdown":
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
        cell.metadata.nbgrader.update(edits)
    if "kernelspec" in spec:
        nb.metadata["kernelspec"] = spec["kernelspec"]
    for index, (after, source) in enumerate(spec.get("insert_after", [])):
        position = next(i for i, c in enumerate(nb.cells) if _grade_id(c) == after) + 1
        new = nbformat.v4.new_code_cell(source)
        new["id"] = f"learner-added-{index}"
        nb.cells.insert(position, new)
    for index, (before, source) in enumerate(spec.get("insert_before", [])):
        position = next(i for i, c in enumerate(nb.cells) if _grade_id(c) == before)
        new = nbformat.v4.new_code_cell(source)
        new["id"] = f"learner-added-above-{index}"
        nb.cells.insert(position, new)
    for index, source in enumerate(spec.get("append", [])):
        new = nbformat.v4.new_code_cell(source)
        new["id"] = f"learner-appended-{index}"
        nb.cells.append(new)
    if spec.get("nbformat") == 3:
        text = nbformat.writes(nbformat.convert(copy.deepcopy(nb), 3)) + "\n"
    else:
        text = nbformat.writes(nb) + "\n"
    if spec.get("corrupt") == "truncate":
        text = text[: len(text) // 2]
    elif spec.get("corrupt") == "deep":
        depth = 100_000
        text = text.replace('"metadata": {', '"metadata": {"nested": ' + "[" * depth + "]" * depth + ", ", 1)
    return filename, text.encode("utf-8")


def build_all() -> dict[str, bytes]:
    """{path relative to sample_class/submitted: bytes} for every case."""
    files, cache = {}, {}
    for learner, case in load_cases().items():
        for assignment, spec in case.items():
            name, data = build_submission(assignment, spec, cache)
            files[f"{learner}/{name}" if spec.get("layout") == "flat" else f"{learner}/{assignment}/{name}"] = data
    return files


def rebuild() -> list[Path]:
    files = build_all()
    if SUBMITTED.exists():
        shutil.rmtree(SUBMITTED)
    written = []
    for relative, data in sorted(files.items()):
        path = SUBMITTED / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def check() -> list[str]:
    """Paths of the tracked sample that differ from a fresh build (or are missing / extra)."""
    files = build_all()
    tracked = (
        {str(p.relative_to(SUBMITTED)): p.read_bytes() for p in SUBMITTED.rglob("*") if p.is_file()}
        if SUBMITTED.exists()
        else {}
    )
    stale = [k for k in sorted(set(files) | set(tracked)) if files.get(k) != tracked.get(k)]
    return stale


def install(submitted: Path) -> list[str]:
    """Copy the sample submissions into a course's ``submitted/`` (replacing those learners' folders)."""
    learners = sorted(p.name for p in SUBMITTED.iterdir() if p.is_dir())
    submitted.mkdir(parents=True, exist_ok=True)
    for learner in learners:
        shutil.rmtree(submitted / learner, ignore_errors=True)
        shutil.copytree(SUBMITTED / learner, submitted / learner)
    return learners


SKIPPED_ROW = "skipped"  # expected.json: the one entry of a learner whose folder is not graded at all


def expected() -> dict[str, dict[str, dict]]:
    """{learner: {lesson: {"score", "status", ...}}} for every lesson of LESSONS (unlisted rows: missing, 0), for the
    learners the gradebook holds (those of ``expected_skipped`` are not graded)."""
    data = json.loads(EXPECTED.read_text(encoding="utf-8"))
    out = {}
    for learner, rows in data.items():
        if learner.startswith("_") or SKIPPED_ROW in rows:
            continue
        out[learner] = {lesson: rows.get(lesson, {"score": 0, "status": "missing"}) for lesson in LESSONS}
    return out


def expected_skipped() -> dict[str, dict]:
    """{learner: {"score", "status", "reason"}} of the sample learners whose folder is skipped (one grades.csv row)."""
    data = json.loads(EXPECTED.read_text(encoding="utf-8"))
    return {
        learner: rows[SKIPPED_ROW]
        for learner, rows in data.items()
        if not learner.startswith("_") and SKIPPED_ROW in rows
    }
