"""Grades that read right: points waiting for the instructor are said to wait ("待人工评分 8 分"), a lesson
without automatic points says "无自动评分" (not "0/0 … 得 0 分 … no-oracle"), in `make grades`, grades.csv and
the grading note of the feedback. A real nbgrader gradebook (sqlite in tmp_path) supplies the submissions."""

from __future__ import annotations

import shutil

import pytest
from nbgrader.api import Gradebook

from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.gradebook import grade_reason, manual_points_of
from autograde.grpo_grader.outcomes import NotebookResult, note_markdown
from autograde.pipeline import score_text
from tools.chain.notebooks import alembic_in_process


@pytest.fixture(scope="module")
def template_db(tmp_path_factory):
    """The empty course gradebook, made once (nbgrader's alembic migrations take seconds)."""
    folder = tmp_path_factory.mktemp("gradebook")
    with (
        alembic_in_process(),
        Gradebook(GradingPipeline(course=folder).db_url, GradingPipeline(course=folder).course_id),
    ):
        pass
    return GradingPipeline(course=folder).db_path


@pytest.fixture()
def gradebook(template_db, tmp_path):
    """Two assignments: 'mixed' (a 14-point test cell and an 8-point markdown answer), 'none' (no graded cell)."""
    shutil.copy(template_db, GradingPipeline(course=tmp_path).db_path)
    with Gradebook(GradingPipeline(course=tmp_path).db_url, GradingPipeline(course=tmp_path).course_id) as gb:
        gb.add_assignment("mixed")
        gb.add_notebook("mixed", "mixed")
        gb.add_grade_cell("test_cell", "mixed", "mixed", max_score=14, cell_type="code")
        gb.add_grade_cell("answer", "mixed", "mixed", max_score=8, cell_type="markdown")
        gb.add_solution_cell("answer", "mixed", "mixed")
        gb.add_assignment("none")
        gb.add_notebook("none", "none")
        gb.add_student("alice")
        gb.add_student("bob")  # submitted nothing
        gb.add_submission("mixed", "alice")
        gb.add_submission("none", "alice")
        yield gb


@pytest.mark.slow  # a real nbgrader gradebook: its migrations take about 10 s on a busy 2-core machine
def test_pending_manual_points_are_counted_until_scored(gradebook):
    submission = gradebook.find_submission("mixed", "alice")
    assert manual_points_of(submission) == {"automatic": 14.0, "pending": 8.0}
    grade = gradebook.find_grade("answer", "mixed", "mixed", "alice")
    grade.manual_score = 5
    gradebook.db.commit()
    assert manual_points_of(gradebook.find_submission("mixed", "alice")) == {"automatic": 14.0, "pending": 0.0}
    assert manual_points_of(gradebook.find_submission("none", "alice")) == {"automatic": 0.0, "pending": 0.0}


def test_reason_says_what_waits_and_what_has_no_points():
    pending = {"automatic": 14.0, "pending": 8.0}
    assert grade_reason("", 14.0, pending) == "待人工评分 8 分"
    assert grade_reason("", 0.0, {"automatic": 0.0, "pending": 0.0}) == "无自动评分（本课没有自动计分的测试）"
    assert grade_reason("", 0.0, {"automatic": 4.0, "pending": 0.0}) == "得 0 分（score 0）"
    both = grade_reason("未通过 test_x: AssertionError", 6.0, pending, penalty=1.0)
    assert both == "未通过 test_x: AssertionError；待人工评分 8 分；迟交扣分 1（late penalty）"
    # the reason is never empty for a zero, and never claims a zero for a lesson without points
    assert "得 0 分" not in grade_reason("", 0.0, {"automatic": 0.0, "pending": 3.0})


def test_score_column():
    assert score_text({"score": 14.0, "max_score": 22.0, "status": "graded"}) == "14/22"
    assert score_text({"score": 0.0, "max_score": 0.0, "status": "graded"}) == "无自动评分"
    assert score_text({"score": 0.0, "max_score": 7.0, "status": "missing"}) == "0/7"


def _result(max_score, tests, score=0.0):
    return NotebookResult(notebook="nb", status="graded", max_score=max_score, score=score, tests=tests)


def test_grading_note_says_the_same():
    tests = [
        {"grade_id": "t", "max_score": 14.0, "score": 14.0, "outcome": "passed", "message": ""},
        {"grade_id": "q", "max_score": 8.0, "score": 0.0, "outcome": "manual", "message": "需要人工评分"},
    ]
    note = note_markdown(_result(22.0, tests, score=14.0))
    assert "自动评分得分：14 / 14" in note and "待人工评分 8 分" in note and "14 / 22" not in note
    empty = note_markdown(_result(0.0, []))
    assert "无自动评分" in empty and "0 / 0" not in empty
    plain = note_markdown(
        _result(4.0, tests[:1] and [{**tests[0], "max_score": 4.0, "score": 0.0, "outcome": "failed"}])
    )
    assert "自动评分得分：0 / 4" in plain and "待人工评分" not in plain and "无自动评分" not in plain


@pytest.mark.slow
def test_grades_command_prints_the_status(gradebook, tmp_path, capsys):
    """`grades` (what `make grades` runs) on the real gradebook: the reason column says what waits, not '-';
    grades.csv carries the pending points in their own column."""
    import csv

    from autograde.pipeline import grades

    grade = gradebook.find_grade("test_cell", "mixed", "mixed", "alice")
    grade.auto_score = 14
    gradebook.db.commit()
    assert grades(GradingPipeline(course=tmp_path), table=True) == 0
    printed = capsys.readouterr().out
    assert "待人工评分 8 分" in printed and "无自动评分" in printed and "0/0" not in printed, printed
    # without --table: the summary, not a row per learner and assignment; the class report beside grades.csv, naming
    # the folders of submitted/ that were skipped (each has a grades.csv row with its reason; alice's was graded)
    for folder in ("alice/mixed", "bad name/mixed"):
        (tmp_path / "submitted" / folder).mkdir(parents=True)
    (tmp_path / "submitted" / "stray.txt").write_text("x", encoding="utf-8")
    assert grades(GradingPipeline(course=tmp_path)) == 0
    summary = capsys.readouterr().out
    assert "待人工评分" not in summary and "2 个学员 × 2 个作业" in summary and "graded 2，missing 2" in summary
    assert "没有评分的目录 2 个（skipped）：bad name stray.txt" in summary, summary
    assert "make grades ARGS=--table" in summary and (tmp_path / "report.html").is_file(), summary
    assert "bad name、stray.txt" in (tmp_path / "report.html").read_text(encoding="utf-8")
    with open(tmp_path / "grades.csv", encoding="utf-8") as handle:
        everyone = list(csv.DictReader(handle))
    rows = {r["assignment"]: r for r in everyone if r["learner"] == "alice"}
    missing = {r["assignment"]: r["reason"] for r in everyone if r["learner"] == "bob"}
    assert missing == {"mixed": "得 0 分：没有提交（no submission）", "none": "无自动评分：没有提交（no submission）"}
    assert (rows["mixed"]["score"], rows["mixed"]["max_score"], rows["mixed"]["manual_pending"]) == (
        "14.0",
        "22.0",
        "8.0",
    )
    assert rows["mixed"]["reason"] == "待人工评分 8 分"
    assert rows["none"]["reason"].startswith("无自动评分") and "得 0 分" not in rows["none"]["reason"]


# ----------------------------------------------------------------------------- the class report
def _class_rows():
    rows = [
        {"learner": "bob", "assignment": "a1", "score": 2.0, "max_score": 4.0, "status": "graded", "flags": "exit"},
        {"learner": "bob", "assignment": "a2", "score": 0.0, "max_score": 6.0, "status": "missing", "flags": ""},
        {"learner": "amy", "assignment": "a1", "score": 4.0, "max_score": 4.0, "status": "graded", "flags": ""},
        {"learner": "amy", "assignment": "a2", "score": 3.0, "max_score": 6.0, "status": "timeout", "flags": ""},
        {"learner": "cid", "assignment": "a1", "score": 2.0, "max_score": 4.0, "status": "graded", "flags": ""},
        {"learner": "cid", "assignment": "a2", "score": 6.0, "max_score": 6.0, "status": "graded",
         "flags": "similar:amy:92% copies-reference:88%", "manual_pending": 2.0},
    ]  # fmt: skip
    tests = [
        {"learner": who, "assignment": "a1", "test": "t1", "score": score, "max_score": 2.0, "outcome": outcome,
         "message": message}
        for who, score, outcome, message in (
            ("amy", 2.0, "passed", ""),
            ("bob", 0.0, "failed", "AssertionError: expected 0.5, got 0.25"),
            ("cid", 0.0, "failed", "AssertionError: expected 0.75, got 1.5"),
        )
    ] + [
        {"learner": "amy", "assignment": "a1", "test": "q", "score": 0.0, "max_score": 3.0, "outcome": "manual",
         "message": "需要人工评分"},
    ]  # fmt: skip
    return rows, tests


def test_class_report_totals_rates_and_flags():
    """Totals per learner (sorted, highest first), each check's pass rate with its failures grouped whatever their
    numbers (a manually graded answer is no check), the flags in one list, the status counts."""
    from autograde.grpo_grader.class_report import (
        ClassData,
        check_rates,
        learner_totals,
        message_group,
        report_sections,
    )

    rows, tests = _class_rows()
    totals = learner_totals(rows)
    assert [(t["learner"], t["score"], t["max_score"], t["pending"]) for t in totals] == [
        ("cid", 8.0, 10.0, 2.0),
        ("amy", 7.0, 10.0, 0.0),
        ("bob", 2.0, 10.0, 0.0),
    ]
    (check,) = check_rates(tests)
    assert (check["test"], check["ran"], check["passed"]) == ("t1", 3, 1)
    assert check["messages"].most_common() == [("AssertionError: expected #, got #", 2)]
    assert message_group("torch.float32 x1: 共9个, got -1.5e-3\n\x1b[2J") == "torch.float32 x1: 共#个, got # \ufffd[#J"
    sections = {s.key: s for s in report_sections(ClassData(rows, tests, unlisted=["stray"]))}
    assert list(sections) == ["status", "totals", "distribution", "checks", "flags"]
    assert sections["status"].columns[1:] == ("graded", "timeout", "missing") and "stray" in sections["status"].note
    assert sections["status"].rows[-1][1:] == (4, 1, 1)
    assert [k["learner"] for k in sections["totals"].row_keys] == ["cid", "amy", "bob"]
    assert [r[3] for r in sections["flags"].rows] == ["copies-reference:88%", "exit", "similar:amy:92%"]
    (a1, a2) = sections["distribution"].charts
    assert a1.values == (0, 0, 0, 0, 0, 2, 0, 0, 0, 1) and sum(a2.values) == 2  # bob's missing a2 left out


def test_class_report_escapes_every_learner_text_and_takes_added_sections():
    """Every string of the page is escaped (a learner id, a name, a flag, a message, a folder name, a section a
    builder adds); the page has no script and carries the CSP; a builder returning None adds nothing. Writing any
    of them unescaped is caught (the check can fail)."""
    import re

    from autograde.grpo_grader import class_report
    from autograde.grpo_grader.class_report import ClassData, ReportSection, render_report, report_sections
    from autograde.grpo_grader.sanitise import CSP_META

    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    rows, tests = _class_rows()
    rows[0] = {**rows[0], "learner": evil, "flags": f"similar:{evil}:90%"}
    tests[1] = {**tests[1], "message": evil}
    data = ClassData(rows, tests, names={"amy": evil}, unlisted=[evil], course=evil)

    def added(data):
        return ReportSection("extra", f"相似度 {evil}", evil, ("a", evil), ((evil, [evil, 1.5]),))

    sections = report_sections(data, [*class_report.SECTION_BUILDERS, added, lambda data: None])
    assert [s.key for s in sections][-1] == "extra"
    page = render_report(data, sections)
    assert "<script" not in page and "<img" not in page and page.count(CSP_META) == 1
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 8
    kept = class_report._e
    try:
        class_report._e = lambda text, quote=True: text  # a page that forgot to escape
        assert re.search(r"<script>alert", render_report(data, sections))
    finally:
        class_report._e = kept


def test_grades_summary_keeps_control_characters_off_the_terminal():
    """A learner's message or folder name printed by `make grades` cannot move the cursor or retitle the terminal."""
    from autograde.grpo_grader.class_report import ClassData, summary_lines

    rows, tests = _class_rows()
    tests[1] = {**tests[1], "message": "\x1b]0;owned\x07\x1b[2J wrong"}
    lines = summary_lines(ClassData(rows, tests, unlisted=["odd\x1b[31mname"]))
    assert not any(ch in line for line in lines for ch in "\x1b\x07"), lines
    assert any("t1: 1/3" in line for line in lines) and any("odd" in line for line in lines), lines
