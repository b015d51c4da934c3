"""The course gradebook through nbgrader's API: what the assignments are, the learner-free template each
slot starts from, the serial merge of a learner's results, and the export."""
from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from .course import ROOT, Settings
from .run import AssignmentResult


def load_course_info(settings: Settings) -> dict:
    """{assignment: {"notebooks": {nb: {"cells": {grade_id: {"max_score", "kind"}}}}, "locked", "checksums"}}"""
    info: dict = {}
    with Gradebook(settings.db_url, settings.course_id) as gb:
        for assignment in gb.assignments:
            entry = {"notebooks": {}, "locked": set(), "checksums": {}}
            for notebook in sorted(assignment.notebooks, key=lambda n: n.name):
                order = _cell_order(settings, assignment.name, notebook.name)
                cells = {}
                for cell in notebook.grade_cells:
                    manual = cell.cell_type == "markdown" or any(s.name == cell.name for s in notebook.solution_cells)
                    cells[cell.name] = {"max_score": float(cell.max_score), "kind": "manual" if manual else "test"}
                entry["notebooks"][notebook.name] = {
                    "cells": dict(sorted(cells.items(), key=lambda kv: order.get(kv[0], len(order))))}
                entry["checksums"][notebook.name] = {c.name: c.checksum for c in notebook.source_cells}
                entry["locked"].update(c.name for c in notebook.source_cells if c.locked)
            info[assignment.name] = entry
    return info


def _cell_order(settings: Settings, assignment: str, notebook: str) -> dict[str, int]:
    for path in (settings.course / "release" / assignment / f"{notebook}.ipynb",
                 ROOT / "notebooks" / assignment / f"{notebook}.ipynb"):
        if path.exists():
            nb = nbformat.read(path, as_version=4)
            ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells]
            return {gid: i for i, gid in enumerate(i for i in ids if i)}
    return {}


def make_template(settings: Settings, target: Path) -> Path:
    """A copy of the course gradebook without learners: what every slot's nbgrader starts from."""
    shutil.copy2(settings.db_path, target)
    with Gradebook(f"sqlite:///{target}", settings.course_id) as gb:
        for student in list(gb.students):
            gb.remove_student(student.id)
    return target


def merge(settings: Settings, results: list[AssignmentResult]) -> None:
    """Write one learner's results into the course gradebook and move the autograded notebooks in place.

    Called by the main process only (one writer). Re-grading updates the same rows: nbgrader's
    ``update_or_create_*`` find the existing student, submission and grade rows. Manual scores and
    comments an instructor has entered are left untouched.
    """
    if not results:
        return
    learner = results[0].learner
    with warnings.catch_warnings(), Gradebook(settings.db_url, settings.course_id) as gb:
        # nbgrader's add_submission triggers harmless SQLAlchemy 2 "not in session" autoflush warnings
        warnings.filterwarnings("ignore", message=".*not in session.*")
        gb.update_or_create_student(learner)
        for result in results:
            kwargs = {"timestamp": result.timestamp} if result.timestamp else {}
            gb.update_or_create_submission(result.assignment, learner, **kwargs)
            for nres in result.notebooks:
                submitted = gb.find_submission_notebook(nres.notebook, result.assignment, learner)
                for grade in submitted.grades:
                    values = nres.grades.get(grade.name)
                    if values is None:  # nbgrader did not reach this cell: it earns nothing
                        values = {"auto_score": 0.0, "needs_manual_grade": False}
                    grade.auto_score = values["auto_score"]
                    grade.needs_manual_grade = bool(values["needs_manual_grade"]) or grade.manual_score is not None
                for comment in submitted.comments:
                    comment.auto_comment = nres.comments.get(comment.name)
                submitted.late_submission_penalty = nres.late_penalty
            gb.db.commit()
    for result in results:
        if not result.staged:
            continue
        destination = settings.dir("autograded") / learner / result.assignment
        if destination.exists():
            _make_writable(destination)
            shutil.rmtree(destination)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(result.staged, destination)


def _make_writable(folder: Path) -> None:
    for dirpath, _, files in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)


def read_report(settings: Settings, learner: str, assignment: str) -> dict | None:
    path = settings.dir("autograded") / learner / assignment / "grading_report.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def similar_learners(reports: dict[tuple[str, str], dict]) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """{(learner, assignment): [(other learner of the batch, similarity)]} for answer cells whose winnowed
    fingerprints mostly agree (``submission.similarity`` >= ``run.COPY_THRESHOLD``: renamed variables, comments,
    layout, dead code and reordered statements do not hide a copy); the highest similarity per pair."""
    from .run import COPY_THRESHOLD
    from .submission import similarity

    answers: dict[tuple[str, str], dict[str, list[str]]] = {}
    prints: dict[tuple[str, str, str], set] = {}
    for (learner, assignment), report in reports.items():
        for nb in report.get("notebooks", []):
            for gid, value in (nb.get("answers") or {}).items():
                if isinstance(value, list):  # reports of grader version 2 hold a digest: not comparable
                    prints[(learner, assignment, gid)] = set(value)
                    answers.setdefault((assignment, gid), []).append(learner)
    best: dict[tuple[str, str], dict[str, float]] = {}
    for (assignment, gid), learners in answers.items():
        for i, a in enumerate(learners):
            for b in learners[i + 1:]:
                share = similarity(prints[(a, assignment, gid)], prints[(b, assignment, gid)])
                if share >= COPY_THRESHOLD:
                    for one, other in ((a, b), (b, a)):
                        seen = best.setdefault((one, assignment), {})
                        seen[other] = max(seen.get(other, 0.0), share)
    return {key: sorted(value.items(), key=lambda item: (-item[1], item[0])) for key, value in best.items()}


def _similar_flags(others: list[tuple[str, float]], limit: int = 5) -> list[str]:
    """``similar:<learner>:<similarity>%`` for the most similar learners (then ``similar:+<more>``)."""
    flags = [f"similar:{other}:{round(100 * share)}%" for other, share in others[:limit]]
    if len(others) > limit:
        flags.append(f"similar:+{len(others) - limit}")
    return flags


def export_rows(settings: Settings) -> tuple[list[dict], list[dict]]:
    """Rows of grades.csv (learner x assignment) and grades_by_test.csv (learner x test cell)."""
    rows, test_rows = [], []
    with Gradebook(settings.db_url, settings.course_id) as gb:
        pairs = [(s.id, a.name) for s in gb.students for a in gb.assignments]
    reports = {pair: read_report(settings, *pair) or {} for pair in pairs}
    similar = similar_learners(reports)
    with Gradebook(settings.db_url, settings.course_id) as gb:
        assignments = sorted(gb.assignments, key=lambda a: a.name)
        for student in sorted(gb.students, key=lambda s: s.id):
            for assignment in assignments:
                report = reports.get((student.id, assignment.name)) or {}
                try:
                    submission = gb.find_submission(assignment.name, student.id)
                except MissingEntry:
                    rows.append({"learner": student.id, "assignment": assignment.name, "score": 0.0,
                                 "max_score": assignment.max_score, "status": "missing",
                                 "reason": "得 0 分：没有提交（no submission）", "flags": "",
                                 "needs_manual_grade": False, "timestamp": ""})
                    continue
                penalty = submission.late_submission_penalty or 0.0
                score = max(0.0, submission.score - penalty)
                reason = report.get("reason", "")
                status = report.get("status", "graded")
                if score == 0 and not reason:
                    reason = "得 0 分（score 0）"
                if penalty:
                    reason = "；".join(p for p in [reason, f"迟交扣分 {penalty:g}（late penalty）"] if p)
                flags = sorted({f for n in report.get("notebooks", []) for f in n.get("flags", [])})
                flags += _similar_flags(similar.get((student.id, assignment.name), []))
                rows.append({"learner": student.id, "assignment": assignment.name, "score": round(score, 4),
                             "max_score": submission.max_score, "status": status, "reason": reason,
                             "flags": " ".join(flags), "needs_manual_grade": bool(submission.needs_manual_grade),
                             "timestamp": submission.timestamp.isoformat() if submission.timestamp else ""})
                outcomes = {(n["notebook"], t["grade_id"]): t
                            for n in report.get("notebooks", []) for t in n.get("tests", [])}
                for notebook in sorted(submission.notebooks, key=lambda n: n.name):
                    order = list(outcomes)
                    grades = sorted(notebook.grades, key=lambda g: order.index((notebook.name, g.name))
                                    if (notebook.name, g.name) in outcomes else len(order))
                    for grade in grades:
                        row = outcomes.get((notebook.name, grade.name), {})
                        test_rows.append({
                            "learner": student.id, "assignment": assignment.name, "notebook": notebook.name,
                            "test": grade.name, "score": grade.score, "max_score": grade.max_score,
                            "outcome": row.get("outcome", ""), "message": row.get("message", ""),
                        })
    return rows, test_rows
