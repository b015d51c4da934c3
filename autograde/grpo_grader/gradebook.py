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
from .submission import SKIPPED, collect_submitted

# ----------------------------------------------------------------------------- a gradebook never lost
BACKUPS = "gradebook-backups"  # in the course folder (git-ignored): each `make autograde` keeps a copy first
KEEP_BACKUPS = 10
NBGRADER_TABLES = ("assignment", "student", "submitted_assignment", "grade")  # a gradebook holds at least these


def gradebook_problem(path: Path) -> str | None:
    """Why the SQLite file ``path`` is no usable nbgrader gradebook (damaged, not a database, without nbgrader's
    tables), or None. Opened read-only: the check never writes."""
    import sqlite3

    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error as error:
        return str(error)
    try:
        verdict = [row[0] for row in connection.execute("PRAGMA integrity_check")]
        if verdict != ["ok"]:
            return "; ".join(verdict[:3])
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [table for table in NBGRADER_TABLES if table not in tables]
        if missing:
            return f"no nbgrader table {', '.join(missing)} ({path.stat().st_size} bytes)"
    except sqlite3.Error as error:  # "database disk image is malformed", "file is not a database"
        return str(error)
    finally:
        connection.close()
    return None


def backups(settings: GradingPipeline) -> list[Path]:
    """The kept copies of the course gradebook, oldest first."""
    return sorted(settings.dir(BACKUPS).glob("gradebook-*.db"))


def backup_gradebook(settings: GradingPipeline) -> Path | None:
    """A dated copy of the course gradebook (SQLite's online backup: consistent even while another process reads
    it) in ``gradebook-backups/``, the newest ``KEEP_BACKUPS`` kept; None when there is no gradebook or it is damaged
    (a damaged one never pushes a good copy out)."""
    import sqlite3
    import time
    from datetime import datetime, timezone

    if not settings.db_path.exists() or gradebook_problem(settings.db_path):
        return None
    folder = settings.dir(BACKUPS)
    folder.mkdir(exist_ok=True)
    target = folder / f"gradebook-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}.db"  # names sort by time
    while target.exists():
        time.sleep(0.001)
        target = folder / f"gradebook-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}.db"
    partial = target.with_suffix(".db.partial")
    source = sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True, timeout=30)
    copy = sqlite3.connect(partial)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    os.replace(partial, target)
    for old in backups(settings)[:-KEEP_BACKUPS]:
        old.unlink(missing_ok=True)
    hand_over(settings, folder)
    return target


def newest_good_backup(settings: GradingPipeline) -> Path | None:
    return next((path for path in reversed(backups(settings)) if gradebook_problem(path) is None), None)


def damaged_gradebook(settings: GradingPipeline) -> str | None:
    """The message for a damaged course gradebook (bilingual: what is wrong, the newest good copy and the command
    that restores it), or None when it is usable or absent (a course before `make release` has none)."""
    import shlex

    if not settings.db_path.exists():
        return None
    problem = gradebook_problem(settings.db_path)
    if problem is None:
        return None
    db = shlex.quote(str(settings.db_path))
    good = newest_good_backup(settings)
    if good is None:
        restore = (
            f"没有完好的副本（no good copy in {settings.dir(BACKUPS)}）：把损坏的文件移开（mv {db} {db}.damaged），"
            "再 `make release` 重建作业、`make autograde ARGS=--force` 重评所有提交（formgrader 里的人工分数会丢失）"
            "（move the damaged file away, then make release and regrade everything: manual scores are lost）"
        )
    else:
        restore = (
            f"最新的完好副本（newest good copy）：{good}\n恢复（restore）：\n"
            f"  mv {db} {db}.damaged && cp {shlex.quote(str(good))} {db}\n"
            "再 `make autograde ARGS=--force` 重评所有提交，使成绩与 autograded/ 一致（副本之后在 formgrader 里给的人工分数"
            "要重新录入）（then regrade everything with make autograde ARGS=--force; manual scores given after the "
            "copy must be entered again）"
        )
    return f"gradebook.db 已损坏，无法读取（the gradebook is damaged）：{settings.db_path}：{problem}\n{restore}"


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


UNMERGED = "unmerged.json"  # in the course folder: {learner: {assignment: reason}} of results that could not be placed


def hand_over(settings: GradingPipeline, *paths: Path, recursive: bool = True) -> None:
    """As root, give what a run wrote in the course folder to the folder's owner: a root run (``sudo make
    autograde``) must not leave files the instructor's next run cannot replace. Nothing to do for any other user,
    or when root owns the course folder."""
    if os.geteuid() != 0:
        return
    owner = settings.course.stat()
    if owner.st_uid == 0:
        return
    for path in paths:
        if not path.exists() and not path.is_symlink():
            continue
        inside = path.rglob("*") if recursive and path.is_dir() and not path.is_symlink() else []
        for item in [path, *inside]:
            os.chown(item, owner.st_uid, owner.st_gid, follow_symlinks=False)


def _unwritable(destination: Path, error: OSError) -> str:
    import pwd

    try:
        owner = destination.stat().st_uid if destination.exists() else destination.parent.stat().st_uid
        who = pwd.getpwuid(owner).pw_name
    except (OSError, KeyError):
        who = "?"
    me = pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() != 0 else "root"
    return (
        f"得 0 分：无法写入这个学员的评分结果 {destination}（{type(error).__name__}: {error.strerror or error}；"
        f"它属于 {who}）：请运行 `sudo chown -R {me} {destination.parent}` 后再 `make autograde`"
        "（cannot write this learner's results; the run went on without them）"
    )


def _clear(destination: Path) -> None:
    """The learner's old results removed (made writable first), its folder's parent there: raises OSError when the
    folder cannot be replaced (another user's files, a read-only folder)."""
    if destination.exists() or destination.is_symlink():
        if destination.is_dir() and not destination.is_symlink():
            _make_writable(destination)
            shutil.rmtree(destination)
        else:
            destination.unlink()
    destination.parent.mkdir(parents=True, exist_ok=True)


def _make_writable(folder: Path) -> None:
    for dirpath, _, files in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)


def _record_unmerged(settings: GradingPipeline, learner: str, merged: set[str], failed: dict[str, str]) -> None:
    """Keep ``UNMERGED`` up to date for ``learner``: its assignments that failed now, without those merged now."""
    path = settings.course / UNMERGED
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    entry = {k: v for k, v in (data.get(learner) or {}).items() if k not in merged}
    entry.update(failed)
    if entry:
        data[learner] = entry
    else:
        data.pop(learner, None)
    if not data:
        path.unlink(missing_ok=True)
        return
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(partial, path)
    hand_over(settings, path)


def unmerged(settings: GradingPipeline) -> dict[str, dict[str, str]]:
    """{learner: {assignment: reason}} of results a run could not place (``merge``)."""
    try:
        data = json.loads((settings.course / UNMERGED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def merge(settings: GradingPipeline, results: list[AssignmentResult]) -> dict[str, str]:
    """Write one learner's results into the course gradebook and move the autograded notebooks in place.

    Called by the main process only (one writer). Re-grading updates the same rows: nbgrader's
    ``update_or_create_*`` find the existing student, submission and grade rows. Manual scores and
    comments an instructor has entered are left untouched. An assignment whose old results cannot be replaced
    (``autograded/<learner>/<assignment>`` of another user, read-only) is left out - the gradebook keeps its old
    row - and returned, {assignment: reason}, and recorded (``UNMERGED``: grades.csv shows it): that learner fails
    alone, the run goes on. As root, what is written is the course folder owner's (``hand_over``).
    """
    if not results:
        return {}
    learner = results[0].learner
    failed: dict[str, str] = {}
    placed = []
    for result in results:
        destination = settings.dir("autograded") / learner / result.assignment
        if result.staged:
            try:
                _clear(destination)
            except OSError as error:
                failed[result.assignment] = _unwritable(destination, error)
                continue
        placed.append(result)
    if placed:
        with warnings.catch_warnings(), Gradebook(settings.db_url, settings.course_id) as gb:
            # nbgrader's add_submission triggers harmless SQLAlchemy 2 "not in session" autoflush warnings
            warnings.filterwarnings("ignore", message=".*not in session.*")
            name_learners(gb, settings.course.parent / MARKER, [learner])  # the roster's name, else the id
            for result in placed:
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
        hand_over(settings, settings.db_path, recursive=False)
    for result in placed:
        if not result.staged:
            continue
        destination = settings.dir("autograded") / learner / result.assignment
        try:
            shutil.move(result.staged, destination)
        except OSError as error:  # (the gradebook has the new row; without a report the next run regrades it)
            failed[result.assignment] = _unwritable(destination, error)
            continue
        hand_over(settings, destination)
        hand_over(settings, destination.parent, destination.parent.parent, recursive=False)
    _record_unmerged(settings, learner, {r.assignment for r in placed} - set(failed), failed)
    return failed


def read_report(settings: GradingPipeline, learner: str, assignment: str) -> dict | None:
    path = settings.dir("autograded") / learner / assignment / "grading_report.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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


def class_reports(settings: GradingPipeline) -> dict[tuple[str, str], dict]:
    """{(learner, assignment): grading report} of every learner and assignment of the gradebook ({} when none)."""
    with Gradebook(settings.db_url, settings.course_id) as gb:
        pairs = [(s.id, a.name) for s in gb.students for a in gb.assignments]
    return {pair: read_report(settings, *pair) or {} for pair in pairs}


def export_rows(settings: GradingPipeline, copies: dict | None = None) -> tuple[list[dict], list[dict]]:
    """Rows of grades.csv (learner x assignment) and grades_by_test.csv (learner x test cell); ``copies``: the class's
    copy review (``copy_review.review_class``), made here when not given."""
    from .copy_review import class_flags, review_class

    rows, test_rows = [], []
    reports = class_reports(settings)
    not_placed = unmerged(settings)
    if copies is None:
        copies = review_class(settings.course, reports, ROOT / "notebooks")
    copy_flags = class_flags(copies)
    with Gradebook(settings.db_url, settings.course_id) as gb:
        assignments = sorted(gb.assignments, key=lambda a: a.name)
        names = {a.name for a in assignments}
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
                problem = (not_placed.get(student.id) or {}).pop(assignment.name, None)
                if problem:  # the last run could not place this result: the row says so, not the old result
                    status, reason = "error", f"{problem}；上一次写入的结果（the last result written）：{reason}"
                flags = sorted({f for n in report.get("notebooks", []) for f in n.get("flags", [])})
                if points["automatic"] == 0:  # nothing for an oracle to grade: its absence says nothing
                    flags = [f for f in flags if f != "no-oracle"]
                flags += copy_flags.get((student.id, assignment.name), [])
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
    for learner, problems in sorted(not_placed.items()):  # learners the gradebook does not hold yet
        for assignment, problem in sorted((problems or {}).items()):
            rows.append(_plain_row(learner, assignment, "error", problem))
    _learners, skipped = collect_submitted(settings.dir("submitted"), names)
    rows += [_plain_row(item.learner, item.assignment, SKIPPED, item.reason) for item in skipped]
    return rows, test_rows


def _plain_row(learner: str, assignment: str, status: str, reason: str) -> dict:
    """A grades.csv row of a folder that was not graded (``SKIPPED``) or a result that could not be placed."""
    return {
        "learner": learner,
        "assignment": assignment,
        "score": 0.0,
        "max_score": 0.0,
        "status": status,
        "reason": reason,
        "flags": "",
        "needs_manual_grade": False,
        "timestamp": "",
    }
