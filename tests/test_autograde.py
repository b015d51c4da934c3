"""The instructor pipeline (issue 5): the bundled sample class graded by real nbgrader in a throwaway course.

The slow test releases notebooks 1-2 into a temporary nbgrader course, grades the sample class with
`python -m autograde.pipeline autograde --sample` (sandboxed kernels, one worker per core), and checks the
gradebook against `autograde/sample_class/expected.json` (written by hand), then grades again (unchanged
submissions are kept; a forced regrade of some learners rewrites the same rows with the same scores),
generates the feedback and exports the grades.
"""
from __future__ import annotations

import collections
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.notebooknode import NotebookNode

ROOT = Path(__file__).resolve().parents[1]
AUTOGRADE = ROOT / "autograde"

from autograde.grpo_grader import sample as sample_class
from autograde.grpo_grader.preprocessors import HideHiddenTests, SafeExecute
from autograde.grpo_grader.run import check_notebook_file, compare_with_release, pick_files, summarise

ASSIGNMENTS = ["nb01_group_advantages", "nb02_grpo_objective"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _pipeline(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "autograde.pipeline", *args], cwd=ROOT, env=_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    print(done.stdout[-6000:])
    return done


# ----------------------------------------------------------------------------- fast checks
def test_sample_class_is_up_to_date_and_complete():
    assert sample_class.check() == [], "run `python -m autograde.pipeline sample --rebuild`"
    expected = sample_class.expected()
    cases = sample_class.load_cases()
    assert sorted(expected) == sorted(cases), "expected.json must name exactly the learners of cases/"
    for learner, rows in expected.items():
        assert sorted(rows) == ASSIGNMENTS, f"{learner}: one expected row per notebook"
        for assignment, row in rows.items():
            submitted = assignment in cases[learner]
            assert (row["status"] == "missing") == (not submitted), f"{learner}/{assignment}"


def test_file_picking_and_checks(tmp_path):
    folder = tmp_path / "a1"
    folder.mkdir()
    (folder / "other name.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    chosen, problems, notes = pick_files(folder, ["a1"])
    assert chosen == {"a1": folder / "other name.ipynb"} and not problems and "renamed" in notes[0]
    (folder / "second.ipynb").write_text("{}")
    chosen, problems, _ = pick_files(folder, ["a1"])
    assert not chosen and "missing notebook" in problems["a1"]
    (folder / "a1.ipynb").symlink_to(folder / "second.ipynb")
    chosen, problems, _ = pick_files(folder, ["a1"])
    assert not chosen, "a symbolic link is never graded"
    bad = tmp_path / "bad.ipynb"
    bad.write_text('{"cells": [')
    assert "invalid JSON" in check_notebook_file(bad, 25)
    bad.write_text('{"hello": 1}')
    assert "not a notebook" in check_notebook_file(bad, 25)
    bad.write_bytes(b"x" * (2 * 2**20))
    assert "too large" in check_notebook_file(bad, 1)


def test_compare_with_release_finds_edited_and_deleted_locked_cells():
    def cell(gid, source, locked=True, solution=False):
        return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
            "grade_id": gid, "locked": locked, "solution": solution, "grade": not solution}})

    release = nbformat.v4.new_notebook(cells=[cell("f", "raise NotImplementedError", False, True),
                                              cell("t1", "assert f(1) == 2"), cell("t2", "assert f(2) == 3")])
    submitted = nbformat.v4.new_notebook(cells=[cell("f", "def f(x): return x + 1", False, True),
                                                cell("t1", "pass")])
    edited, deleted, written = compare_with_release(submitted, release)
    assert edited == ["t1"] and deleted == ["t2"] and "def f(x)" in written and "pass" in written


def test_summary_names_failed_tests():
    tests = [{"grade_id": "t1", "outcome": "passed", "message": ""},
             {"grade_id": "t2", "outcome": "failed", "message": "AssertionError: 不符"}]
    assert summarise(tests) == "未通过 t2: AssertionError: 不符"
    stub = "NotImplementedError: 请先完成这个 TODO"
    assert "no TODO done" in summarise([{"grade_id": "t", "outcome": "failed", "message": stub}])


def _executor() -> SafeExecute:
    ex = SafeExecute(max_output_bytes=100)
    ex.reset_execution_trackers()
    ex.clear_before_next_output = False  # set per cell by nbclient's execute_cell
    return ex


def _msg(kind: str, **content) -> dict:
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "m"}, "content": content}


def test_output_cap_keeps_what_nbgrader_grades():
    """Past the cap, output is dropped, but the first stderr and every error are kept (they decide the grade)."""
    ex = _executor()
    outs: list = []
    for _ in range(50):
        ex.output(outs, _msg("stream", name="stdout", text="x" * 30 + "\n"), None, 0)
    ex.output(outs, _msg("stream", name="stderr", text="warning\n"), None, 0)
    ex.output(outs, _msg("error", ename="AssertionError", evalue="boom", traceback=[]), None, 0)
    kinds = [(o["output_type"], o.get("name")) for o in outs]
    assert ("stream", "stderr") in kinds and ("error", None) in kinds
    assert sum(len(o.get("text", "")) for o in outs) < 400, "the flood must be dropped"
    assert any("输出超过" in o.get("text", "") for o in outs), "the cell says that its output was capped"


def test_feedback_hides_hidden_tests():
    cell = nbformat.v4.new_code_cell(
        '"""检查"""\nassert f(1) == 2\n### BEGIN HIDDEN TESTS\nassert f(5) == 6  # secret\n### END HIDDEN TESTS\n',
        metadata={"nbgrader": {"grade": True, "grade_id": "t", "locked": True, "solution": False, "points": 1}})
    cell.outputs = [NotebookNode(output_type="error", ename="AssertionError", evalue="不符",
                                 traceback=["---> 4 assert f(5) == 6  # secret", "AssertionError: 不符"])]
    restore = nbformat.v4.new_code_cell("restore", metadata={"tags": ["grader-restore"]})
    nb = nbformat.v4.new_notebook(cells=[restore, cell])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert len(nb.cells) == 1
    assert "secret" not in nb.cells[0].source and "assert f(1) == 2" in nb.cells[0].source
    assert nb.cells[0].outputs[0]["traceback"] == ["AssertionError: 不符"]


@pytest.mark.slow
def test_sandbox_hides_the_course_sources():
    """The kernel sandbox (pipeline.py probe): solutions, gradebook, sources, .git unreadable from a kernel."""
    done = _pipeline("probe", timeout=120)
    assert "READABLE" not in done.stdout, (
        "a grading kernel can read answers or hidden tests; grading needs root (isolated mode) or "
        "unprivileged user namespaces (userns mode): see autograde/README.md")
    assert done.returncode == 0 and "address-space limit" in done.stdout


# ----------------------------------------------------------------------------- the sample class
def _release_course(base: Path) -> Path:
    import tools.chain.notebooks as chain

    course = base / "autograde"
    course.mkdir(parents=True)
    shutil.copy2(AUTOGRADE / "nbgrader_config.py", course / "nbgrader_config.py")
    chain.release_into(course, base / "notebooks", ASSIGNMENTS)
    return course


def _gradebook_dump(course: Path) -> dict:
    """Every row the pipeline writes, with its primary key: a regrade must keep the same rows."""
    from nbgrader.api import Gradebook

    dump = {"students": [], "submissions": [], "grades": [], "comments": []}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "grpo-in-practice") as gb:
        for student in gb.students:
            dump["students"].append(student.id)
            for submission in student.submissions:
                dump["submissions"].append((submission.id, student.id, submission.assignment.name,
                                            submission.score, submission.max_score))
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        dump["grades"].append((grade.id, student.id, notebook.name, grade.name, grade.auto_score,
                                               grade.manual_score, grade.needs_manual_grade))
                    for comment in notebook.comments:
                        dump["comments"].append((comment.id, student.id, notebook.name, comment.name,
                                                 comment.auto_comment))
    return {k: sorted(v, key=str) for k, v in dump.items()}


def _scores(course: Path) -> dict:
    from nbgrader.api import Gradebook, MissingEntry

    out = collections.defaultdict(dict)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "grpo-in-practice") as gb:
        for student in gb.students:
            for assignment in ASSIGNMENTS:
                try:
                    out[student.id][assignment] = gb.find_submission(assignment, student.id).score
                except MissingEntry:
                    out[student.id][assignment] = None
    return dict(out)


@pytest.mark.slow
def test_sample_class_grades_exactly_as_expected(tmp_path):
    course = _release_course(tmp_path)
    expected = sample_class.expected()

    first = _pipeline("autograde", "--sample", "--course", str(course))
    assert first.returncode == 0, "autograde must finish without grader errors"
    scores = _scores(course)
    assert sorted(scores) == sorted(expected), "exactly the sample learners are registered"
    mismatches = []
    for learner, rows in expected.items():
        for assignment, row in rows.items():
            got = scores[learner][assignment]
            want = None if row["status"] == "missing" else float(row["score"])
            if got != want:
                mismatches.append(f"{learner}/{assignment}: expected {want}, graded {got}")
            if row["status"] != "missing":
                report = json.loads((course / "autograded" / learner / assignment / "grading_report.json").read_text())
                if report["status"] != row["status"]:
                    mismatches.append(f"{learner}/{assignment}: status {report['status']} != {row['status']}")
    assert not mismatches, "\n".join(mismatches)
    match = re.search(r"done in ([\d.]+) s", first.stdout)
    print(f"sample class graded in {match.group(1) if match else '?'} s with the default workers")

    # Grading again changes nothing: unchanged submissions are kept ...
    before = _gradebook_dump(course)
    again = _pipeline("autograde", "--sample", "--course", str(course))
    assert again.returncode == 0 and "nothing new to grade" in again.stdout
    assert _gradebook_dump(course) == before
    # ... and a forced regrade rewrites the same rows with the same scores (no duplicates).
    forced = _pipeline("autograde", "--sample", "--course", str(course), "--force",
                       "--learner", "s08_os_exit", "--learner", "s14_invalid_json",
                       "--learner", "s15_wrong_file_name", "--learner", "s03_untouched")
    assert forced.returncode == 0 and "graded 4" in forced.stdout and "invalid 1" in forced.stdout
    assert _gradebook_dump(course) == before

    # Feedback: one HTML per graded notebook; every zero explains itself; no hidden test leaks.
    assert _pipeline("feedback", "--course", str(course)).returncode == 0
    for learner, rows in expected.items():
        for assignment, row in rows.items():
            html = course / "feedback" / learner / assignment / f"{assignment}.html"
            if row["status"] == "missing":
                assert not html.exists()
                continue
            text = html.read_text(encoding="utf-8")
            assert "自动评分说明" in text, f"{html}: no grading note"
            if row["score"] == 0:
                assert "原因：" in text, f"{html}: a zero without a reason"
            assert "BEGIN HIDDEN TESTS" not in text and "_h_reference" not in text, f"{html} shows hidden tests"

    # Export: one row per learner and assignment, with a reason for every zero, and the per-test CSV.
    exported = _pipeline("grades", "--course", str(course))
    assert exported.returncode == 0
    with open(course / "grades.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(expected) * len(ASSIGNMENTS)
    for row in rows:
        want = expected[row["learner"]][row["assignment"]]
        assert float(row["score"]) == float(want["score"]) and row["status"] == want["status"], row
        if float(row["score"]) == 0:
            assert row["reason"].strip(), f"zero without a reason: {row}"
    with open(course / "grades_by_test.csv", encoding="utf-8") as handle:
        tests = list(csv.DictReader(handle))
    assert {t["test"] for t in tests} >= {"test_compute_group_advantages_hidden", "test_compute_grpo_loss_hidden"}
    failed = [t for t in tests if float(t["score"]) < float(t["max_score"])]
    assert failed and all(t["message"] for t in failed), "every lost point names its cause"
