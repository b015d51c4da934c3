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

from tools.project_runtime import MARKER

from .course import ROOT, GradingPipeline
from .outcomes import NO_AUTO_POINTS, AssignmentResult, manual_pending_text
from .roster import name_learners


def load_course_info(settings: GradingPipeline) -> dict:
    """{assignment: {"notebooks": {nb: {"cells": {grade_id: {"max_score", "kind"}}}}, "locked", "checksums"}}"""
    info: dict = {}
    with Gradebook(settings.db_url, settings.course_id) as gb:
        for assignment in gb.assignments:
            entry = {"notebooks": {}, "locked": set(), "checksums": {}}
            for notebook in sorted(assignment.notebooks, key=lambda n: n.name):
                order = _cell_order(settings, assignment.name, notebook.name)
                cells = {}
                for cell in notebook.grade_cells:
                    kind = "manual" if is_manual(cell.cell_type, cell.name, notebook) else "test"
                    cells[cell.name] = {"max_score": float(cell.max_score), "kind": kind}
                entry["notebooks"][notebook.name] = {
                    "cells": dict(sorted(cells.items(), key=lambda kv: order.get(kv[0], len(order))))
                }
                entry["checksums"][notebook.name] = {c.name: c.checksum for c in notebook.source_cells}
                entry["locked"].update(c.name for c in notebook.source_cells if c.locked)
            info[assignment.name] = entry
    return info


def is_manual(cell_type: str, name: str, notebook) -> bool:
    """A graded cell only the instructor scores: a markdown answer, or an answer cell that is also graded."""
    return cell_type == "markdown" or any(s.name == name for s in notebook.solution_cells)


def _cell_order(settings: GradingPipeline, assignment: str, notebook: str) -> dict[str, int]:
    for path in (
        settings.course / "release" / assignment / f"{notebook}.ipynb",
        ROOT / "notebooks" / assignment / f"{notebook}.ipynb",
    ):
        if path.exists():
            nb = nbformat.read(path, as_version=4)
            ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells]
            return {gid: i for i, gid in enumerate(i for i in ids if i)}
    return {}


def make_template(settings: GradingPipeline, target: Path) -> Path:
    """A copy of the course gradebook without learners: what every slot's nbgrader starts from."""
    shutil.copy2(settings.db_path, target)
    with Gradebook(f"sqlite:///{target}", settings.course_id) as gb:
        for student in list(gb.students):
            gb.remove_student(student.id)
    return target


def merge(settings: GradingPipeline, results: list[AssignmentResult]) -> None:
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
        name_learners(gb, settings.course.parent / MARKER, [learner])  # the roster's name, else the id
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


def read_report(settings: GradingPipeline, learner: str, assignment: str) -> dict | None:
    path = settings.dir("autograded") / learner / assignment / "grading_report.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def similar_learners(reports: dict[tuple[str, str], dict]) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """{(learner, assignment): [(other learner of the batch, similarity)]} for answer cells whose winnowed
    fingerprints mostly agree (``submission.similarity`` >= ``review.COPY_THRESHOLD``: renamed variables, comments,
    layout, dead code and reordered statements do not hide a copy); the highest similarity per pair."""
    from .review import COPY_THRESHOLD
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
            for b in learners[i + 1 :]:
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


def manual_points_of(submission) -> dict[str, float]:
    """{"automatic": points the autograder gives, "pending": manual points no instructor has scored yet}."""
    automatic = pending = 0.0
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            if is_manual(grade.cell_type, grade.name, notebook.notebook):
                pending += grade.max_score if grade.manual_score is None else 0.0
            else:
                automatic += grade.max_score
    return {"automatic": automatic, "pending": pending}


def grade_reason(reason: str, score: float, points: dict[str, float], penalty: float = 0.0) -> str:
    """The reason column of a submitted assignment: the grader's reason, "无自动评分" for a lesson without
    automatic points, "待人工评分 N 分" while manual points wait, "得 0 分" only for a zero nothing explains."""
    parts = [reason]
    if points["automatic"] == 0 and not reason:
        parts = [f"{NO_AUTO_POINTS}（本课没有自动计分的测试）"]
    if points["pending"] > 0:
        parts.append(manual_pending_text(points["pending"]))
    if score == 0 and not any(parts):
        parts = ["得 0 分（score 0）"]
    if penalty:
        parts.append(f"迟交扣分 {penalty:g}（late penalty）")
    return "；".join(p for p in parts if p)


def export_rows(settings: GradingPipeline) -> tuple[list[dict], list[dict]]:
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
                    nothing = "得 0 分" if assignment.max_score else NO_AUTO_POINTS
                    rows.append(
                        {
                            "learner": student.id,
                            "assignment": assignment.name,
                            "score": 0.0,
                            "max_score": assignment.max_score,
                            "status": "missing",
                            "reason": f"{nothing}：没有提交（no submission）",
                            "flags": "",
                            "needs_manual_grade": False,
                            "timestamp": "",
                        }
                    )
                    continue
                penalty = submission.late_submission_penalty or 0.0
                score = max(0.0, submission.score - penalty)
                status = report.get("status", "graded")
                points = manual_points_of(submission)
                reason = grade_reason(report.get("reason", ""), score, points, penalty)
                flags = sorted({f for n in report.get("notebooks", []) for f in n.get("flags", [])})
                if points["automatic"] == 0:  # nothing for an oracle to grade: its absence says nothing
                    flags = [f for f in flags if f != "no-oracle"]
                flags += _similar_flags(similar.get((student.id, assignment.name), []))
                rows.append(
                    {
                        "learner": student.id,
                        "assignment": assignment.name,
                        "score": round(score, 4),
                        "max_score": submission.max_score,
                        "status": status,
                        "reason": reason,
                        "flags": " ".join(flags),
                        "needs_manual_grade": bool(submission.needs_manual_grade),
                        "manual_pending": points["pending"],
                        "automatic_max_score": points["automatic"],
                        "timestamp": submission.timestamp.isoformat() if submission.timestamp else "",
                    }
                )
                outcomes = {
                    (n["notebook"], t["grade_id"]): t for n in report.get("notebooks", []) for t in n.get("tests", [])
                }
                for notebook in sorted(submission.notebooks, key=lambda n: n.name):
                    order = list(outcomes)
                    grades = sorted(
                        notebook.grades,
                        key=lambda g: (
                            order.index((notebook.name, g.name)) if (notebook.name, g.name) in outcomes else len(order)
                        ),
                    )
                    for grade in grades:
                        row = outcomes.get((notebook.name, grade.name), {})
                        test_rows.append(
                            {
                                "learner": student.id,
                                "assignment": assignment.name,
                                "notebook": notebook.name,
                                "test": grade.name,
                                "score": grade.score,
                                "max_score": grade.max_score,
                                "outcome": row.get("outcome", ""),
                                "message": row.get("message", ""),
                            }
                        )
    return rows, test_rows
