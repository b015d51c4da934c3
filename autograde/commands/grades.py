"""``python -m autograde.pipeline grades``: ``grades.csv`` and ``grades_by_test.csv`` from the gradebook and the
grading reports, the class report (``report.html``, :mod:`autograde.grpo_grader.class_report`) and a short summary
on the terminal (``--table``: one row per learner and assignment instead)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import unicodedata
from pathlib import Path

from autograde.grpo_grader.class_report import REPORT_FILE, ClassData, render_report, summary_lines
from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.gradebook import export_rows, hand_over
from autograde.grpo_grader.outcomes import NO_AUTO_POINTS
from autograde.grpo_grader.roster import display_name, roster
from autograde.grpo_grader.submission import SKIPPED
from tools.project_runtime import MARKER

GRADE_FIELDS = [
    "learner",
    "assignment",
    "score",
    "max_score",
    "status",
    "reason",
    "flags",
    "needs_manual_grade",
    "manual_pending",
    "automatic_max_score",
    "timestamp",
]
TEST_FIELDS = ["learner", "assignment", "notebook", "test", "score", "max_score", "outcome", "message"]


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _fit(text: str, width: int) -> str:
    out, used = "", 0
    for ch in text:
        w = _width(ch)
        if used + w > width:
            return out[:-1] + "…" if out else ""
        out, used = out + ch, used + w
    return out + " " * (width - used)


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    tmp = path.with_suffix(".csv.tmp")
    tmp.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(tmp, path)


def score_text(row: dict) -> str:
    """The score column of `make grades`: "14/22"; "无自动评分" for a lesson without any points."""
    if row["status"] == SKIPPED:  # a folder that was not graded (its reason says why)
        return "-"
    if not row["max_score"]:
        return NO_AUTO_POINTS
    return f"{row['score']:g}/{row['max_score']:g}"


def _print_table(rows: list[dict]) -> None:
    columns = shutil.get_terminal_size((160, 40)).columns
    reason_width = max(30, columns - 30 - 24 - 12 - 10 - 14 - 6)
    header = (
        _fit("learner", 30)
        + " "
        + _fit("assignment", 24)
        + " "
        + _fit("score", 12)
        + " "
        + _fit("status", 10)
        + " "
        + _fit("reason", reason_width)
        + " flags"
    )
    print(header)
    print("-" * min(columns, _width(header) + 10))
    for row in rows:
        print(
            _fit(row["learner"], 30),
            _fit(row["assignment"], 24),
            _fit(score_text(row), 12),
            _fit(row["status"], 10),
            _fit(row["reason"] or "-", reason_width),
            row["flags"],
        )


def unlisted_folders(settings: GradingPipeline, rows: list[dict]) -> list[str]:
    """Names of the entries of ``submitted/`` that have no row in ``grades.csv`` (skipped by ``make autograde``: a
    name that is not a learner id, a symbolic link, a stray file). Only the names are read."""
    submitted = settings.dir("submitted")
    if not submitted.is_dir():
        return []
    listed = {row["learner"] for row in rows}
    return sorted(entry.name for entry in os.scandir(submitted) if entry.name not in listed)


def class_data(settings: GradingPipeline, rows: list[dict], test_rows: list[dict], review: dict) -> ClassData:
    """The class report's data: the graded rows apart from the skipped folders' (``SKIPPED``, named only), and the
    copy review (``similarity_report.report_data``)."""
    names = roster(settings.course.parent / MARKER)
    graded = [row for row in rows if row["status"] != SKIPPED]
    learners = {row["learner"] for row in graded}
    return ClassData(
        rows=graded,
        test_rows=test_rows,
        names={learner: display_name(learner, names) for learner in learners if learner in names},
        unlisted=unlisted_folders(settings, rows),
        skipped=sorted({row["learner"] for row in rows if row["status"] == SKIPPED}),
        copy_review=review,
        course=settings.course_id,
        course_folder=settings.course,
    )


def grades(settings: GradingPipeline, table: bool = False) -> int:
    from autograde.commands.review import class_review
    from autograde.grpo_grader.similarity_report import report_data, write_report

    copies = class_review(settings)  # the copy review: flags in grades.csv, review/ and the report's section
    rows, test_rows = export_rows(settings, copies)
    _write_csv(settings.course / "grades.csv", GRADE_FIELDS, rows)
    _write_csv(settings.course / "grades_by_test.csv", TEST_FIELDS, test_rows)
    review = report_data(copies)
    review_paths, review_lines = write_report(settings.course, copies, review)
    data = class_data(settings, rows, test_rows, review)
    report = settings.course / REPORT_FILE
    tmp = report.with_suffix(".html.tmp")
    tmp.write_text(render_report(data), encoding="utf-8")
    os.replace(tmp, report)
    # (as root: the course folder owner's, as everything written)
    hand_over(settings, settings.course / "grades.csv", settings.course / "grades_by_test.csv", report, *review_paths)
    if table:
        _print_table(rows)
    else:
        print("\n".join(summary_lines(data)))
    print(
        f"\n[grades] {len(rows)} row(s) -> {settings.course / 'grades.csv'}; "
        f"{len(test_rows)} test row(s) -> {settings.course / 'grades_by_test.csv'}\n"
        f"[grades] 班级报告（class report）-> {report}"
        + ("" if table else "；逐行的成绩表（the full table）：make grades ARGS=--table")
    )
    print("\n".join(review_lines))
    return 0
