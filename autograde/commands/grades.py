"""``python -m autograde.pipeline grades``: ``grades.csv`` and ``grades_by_test.csv`` from the gradebook and the
grading reports, and the table on the terminal."""

from __future__ import annotations

import csv
import io
import os
import shutil
import unicodedata
from pathlib import Path

from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.gradebook import export_rows, hand_over
from autograde.grpo_grader.outcomes import NO_AUTO_POINTS
from autograde.grpo_grader.submission import SKIPPED

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


def grades(settings: GradingPipeline) -> int:
    from autograde.commands.review import class_review
    from autograde.grpo_grader.similarity_report import write_report

    copies = class_review(settings)
    rows, test_rows = export_rows(settings, copies)
    _write_csv(settings.course / "grades.csv", GRADE_FIELDS, rows)
    _write_csv(settings.course / "grades_by_test.csv", TEST_FIELDS, test_rows)
    hand_over(settings, settings.course / "grades.csv", settings.course / "grades_by_test.csv")  # (as root)
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
        score = score_text(row)
        print(
            _fit(row["learner"], 30),
            _fit(row["assignment"], 24),
            _fit(score, 12),
            _fit(row["status"], 10),
            _fit(row["reason"] or "-", reason_width),
            row["flags"],
        )
    print(
        f"\n[grades] {len(rows)} row(s) -> {settings.course / 'grades.csv'}; "
        f"{len(test_rows)} test row(s) -> {settings.course / 'grades_by_test.csv'}"
    )
    for line in write_report(settings.course, copies)[1]:
        print(line)
    return 0
