"""The bundled sample class graded by real nbgrader and the oracles in a throwaway course.

The tests share one graded class (module fixture ``graded_class``): every graded lesson of ``sample.LESSONS``
released into a temporary nbgrader course, the sample class graded once with
`python -m autograde.pipeline autograde --sample` (sandboxed kernels, a grading seed made for this run), and
every assertion reads that one result: the gradebook against `autograde/sample_class/expected.json` (written
by hand), a regrade (unchanged submissions kept; a forced regrade rewrites the same rows), feedback, export,
copy flags, and three shards merged == one run (on a Slurm cluster too: tests/test_slurm.py). (A module of its own: the longest chain of the suite, it runs on
one pytest-xdist worker while the other takes the rest.)
"""

from __future__ import annotations

import collections
import csv
import json
import re
import secrets
import shutil
import types
from pathlib import Path

import nbformat
import pytest
from autograde_helpers import ASSIGNMENTS, AUTOGRADE, ROOT, run_pipeline  # tests/autograde_helpers.py
from browser_pages import browser_missing, open_pages  # tests/browser_pages.py

from autograde.sample_class import build as sample_class
from tools.chain.cells import load_settings

COURSE_ID = load_settings(ROOT)["id"]
# the copy review's flags (expected.json's "copy_flags"; they depend on the batch); its "flags" are all the others
COPY_FLAGS = ("similar", "copies-reference", "encoded-exec")


def _release_course(base: Path, released: Path) -> Path:
    """A copy of the test run's one release (``released_course``, tests/conftest.py) that holds the graded lessons
    only, as a release of ``ASSIGNMENTS`` alone would: the other lessons' folders and gradebook rows removed."""
    from nbgrader.api import Gradebook

    course = base / "autograde"
    shutil.copytree(released, course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        others = sorted(a.name for a in gb.assignments if a.name not in ASSIGNMENTS)
        for name in others:
            gb.remove_assignment(name)
    for name in others:
        for folder in ("source", "release"):
            shutil.rmtree(course / folder / name, ignore_errors=True)
    assert (course / "nbgrader_config.py").read_bytes() == (AUTOGRADE / "nbgrader_config.py").read_bytes()
    return course


def _gradebook_dump(course: Path) -> dict:
    """Every row the pipeline writes, with its primary key: a regrade must keep the same rows."""
    from nbgrader.api import Gradebook

    dump = {"students": [], "submissions": [], "grades": [], "comments": []}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        for student in gb.students:
            dump["students"].append(student.id)
            for submission in student.submissions:
                dump["submissions"].append(
                    (submission.id, student.id, submission.assignment.name, submission.score, submission.max_score)
                )
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        dump["grades"].append(
                            (
                                grade.id,
                                student.id,
                                notebook.name,
                                grade.name,
                                grade.auto_score,
                                grade.manual_score,
                                grade.needs_manual_grade,
                            )
                        )
                    for comment in notebook.comments:
                        dump["comments"].append(
                            (comment.id, student.id, notebook.name, comment.name, comment.auto_comment)
                        )
    return {k: sorted(v, key=str) for k, v in dump.items()}


def _scores(course: Path) -> dict:
    from nbgrader.api import Gradebook, MissingEntry

    out = collections.defaultdict(dict)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        for student in gb.students:
            for assignment in ASSIGNMENTS:
                try:
                    out[student.id][assignment] = gb.find_submission(assignment, student.id).score
                except MissingEntry:
                    out[student.id][assignment] = None
    return dict(out)


def _grades_csv(course: Path) -> list[dict]:
    with open(course / "grades.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory, released_course):
    """The sample class graded once (a released course of every graded lesson, a seed made for this run)."""
    base = tmp_path_factory.mktemp("sample-class")
    course = _release_course(base, released_course["course"])
    pristine = base / "pristine"  # the released course before grading (for the shard run)
    shutil.copytree(course, pristine)
    seed = secrets.token_hex(12)
    first = run_pipeline("autograde", "--sample", "--course", str(course), seed=seed)
    errors = {  # read now: a later test regrades and replaces the reports
        f"{path.parent.parent.name}/{path.parent.name}": report.get("reason", "")
        for path in (course / "autograded").glob("*/*/grading_report.json")
        if (report := json.loads(path.read_text(encoding="utf-8"))).get("status") == "error"
    }
    return types.SimpleNamespace(course=course, pristine=pristine, seed=seed, first=first, errors=errors)


@pytest.mark.slow
def test_sample_class_grades_exactly_as_expected(graded_class):
    course, first = graded_class.course, graded_class.first
    expected = sample_class.expected()
    assert first.returncode == 0 and not graded_class.errors, f"grader errors: {graded_class.errors}"
    assert " error " not in first.stdout and "[error]" not in first.stdout
    assert "Warning:" not in first.stdout, "the instructor's output carries no Python warnings"
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
                if "reason" in row and report["reason"].split("；")[0] != row["reason"]:
                    mismatches.append(f"{learner}/{assignment}: reason {report['reason'][:200]!r} != {row['reason']!r}")
                flags = sorted({f for nb in report["notebooks"] for f in nb["flags"] if not f.startswith(COPY_FLAGS)})
                if "flags" in row and flags != sorted(row["flags"]):
                    mismatches.append(f"{learner}/{assignment}: flags {flags} != {row['flags']}")
                for nb in report["notebooks"]:
                    if report["status"] == "graded":
                        assert "cases" in nb["phases"], f"{learner}/{assignment}: graded without the oracle"
                        # the hidden tests (their reference helpers, expected values) never ran in the learner's kernel
                        executed = nbformat.read(
                            course / "autograded" / learner / assignment / f"{nb['notebook']}.ipynb", as_version=4
                        )
                        leaked = [
                            c.metadata["nbgrader"]["grade_id"]
                            for c in executed.cells
                            if c.get("metadata", {}).get("nbgrader", {}).get("grade")
                            and not c.metadata["nbgrader"].get("solution")
                            and ("BEGIN HIDDEN TESTS" in c.source or "def _h_" in c.source)
                        ]
                        if leaked:
                            mismatches.append(f"{learner}/{assignment}: hidden tests ran in the kernel: {leaked}")
                    if learner in ("s01_worked_answers", "s02_independent_answers"):
                        # correct answers run without an error in nbgrader's kernel too (it has what the notebook
                        # needs: readable checkpoints, no write into the read-only course) and pass there
                        executed = nbformat.read(
                            course / "autograded" / learner / assignment / f"{nb['notebook']}.ipynb", as_version=4
                        )
                        errors = [
                            f"{o.get('ename')}: {o.get('evalue', '')[:120]}"
                            for c in executed.cells
                            for o in c.get("outputs", [])
                            if o.get("output_type") == "error"
                        ]
                        if errors:
                            mismatches.append(f"{learner}/{assignment}: errors in the grading kernel: {errors}")
                        automatic = sum(t["score"] for t in nb["tests"] if t["outcome"] != "manual")
                        if nb["phases"].get("in_kernel_score") != automatic:
                            mismatches.append(
                                f"{learner}/{assignment}: in-kernel score "
                                f"{nb['phases'].get('in_kernel_score')} != {automatic}"
                            )
    for learner in sample_class.expected_skipped():  # skipped, said so in the run's output and its summary
        if f"跳过（skipped）{learner}" not in first.stdout:
            mismatches.append(f"{learner}: not reported as skipped")
    skipped = len(sample_class.expected_skipped())
    if skipped and not re.search(rf"done in .*skipped {skipped}[,;]", first.stdout):
        mismatches.append(f"the run's summary does not count {skipped} skipped folder(s)")
    assert not mismatches, "\n".join(mismatches)
    match = re.search(r"done in ([\d.]+) s", first.stdout)
    print(f"sample class graded in {match.group(1) if match else '?'} s with the default workers")


@pytest.mark.slow
def test_regrade_keeps_rows_and_scores(graded_class):
    course, seed = graded_class.course, graded_class.seed
    before = _gradebook_dump(course)
    again = run_pipeline("autograde", "--sample", "--course", str(course), seed=seed)
    assert again.returncode == 0 and "nothing new to grade" in again.stdout
    assert _gradebook_dump(course) == before
    # a forced regrade rewrites the same rows with the same scores (no duplicates); a new seed would not
    forced = run_pipeline(
        "autograde",
        "--sample",
        "--course",
        str(course),
        "--force",
        "--learner",
        "s14_invalid_json",
        "--learner",
        "m3_deeply_nested_json",
        "--learner",
        "s07_sys_exit",
        seed=seed,
    )
    assert forced.returncode == 0 and "graded 1" in forced.stdout and "invalid 2" in forced.stdout
    assert _gradebook_dump(course) == before


def _check_class_report(course: Path, rows: list[dict], printed: str, skipped: dict) -> None:
    """The class report beside grades.csv: each learner's total is the sum of their rows of grades.csv (summed here;
    ``rows`` without the skipped folders', which the report names apart), highest first; the status counts are
    grades.csv's; no script, the CSP; the terminal got the summary, not a row per learner and assignment."""
    from autograde.grpo_grader.sanitise import CSP_META

    report = (course / "report.html").read_text(encoding="utf-8")
    totals = collections.defaultdict(float)
    for row in rows:
        totals[row["learner"]] += float(row["score"])
    shown = [
        (m.group(1), float(m.group(2))) for m in re.finditer(r'<tr data-learner="([^"]+)" data-total="([^"]+)"', report)
    ]
    assert {learner for learner, _ in shown} == set(totals) and len(shown) == len(totals)
    for learner, total in shown:
        assert abs(total - totals[learner]) < 0.01, (learner, total, totals[learner])
    assert [t for _, t in shown] == sorted((t for _, t in shown), reverse=True)
    statuses = collections.Counter(row["status"] for row in rows)
    status_table = report[report.index('<section id="status">') : report.index('<section id="totals">')]
    total_row = re.search(r"<tr><td>合计（total）</td>(.*?)</tr>", status_table).group(1)
    assert [int(n) for n in re.findall(r"<td>(\d+)</td>", total_row)] == [
        statuses[s] for s in re.findall(r"<th>(\w+)</th>", status_table)
    ]
    assert "<script" not in report and report.count(CSP_META) == 1
    for section in ("status", "totals", "distribution", "checks", "flags"):
        assert f'<section id="{section}">' in report, section
    assert f"{len(totals)} 个学员 × {len(ASSIGNMENTS)} 个作业" in printed and "通过率最低的检查" in printed, printed
    assert printed.count("\n") < 60, "the terminal got more than a summary"
    for learner in skipped:  # named as skipped in the report's status section and on the terminal
        assert learner in status_table and learner in printed, learner


@pytest.mark.slow
def test_feedback_and_export(graded_class):
    course = graded_class.course
    expected = sample_class.expected()
    assert run_pipeline("feedback", "--course", str(course)).returncode == 0
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
            # (a learner's own code may name a hidden helper, as t2 does; the hidden test's definition must not show)
            assert "BEGIN HIDDEN TESTS" not in text and "def _h_reference" not in text, f"{html} shows hidden tests"
    exported = run_pipeline("grades", "--course", str(course))
    assert exported.returncode == 0
    rows = _grades_csv(course)
    skipped = sample_class.expected_skipped()
    assert len(rows) == len(expected) * len(ASSIGNMENTS) + len(skipped)
    for row in [r for r in rows if r["learner"] in skipped]:  # a folder that was not graded: a row with its reason
        want = skipped[row["learner"]]
        assert (float(row["score"]), row["status"], row["reason"]) == (want["score"], want["status"], want["reason"])
    rows = [r for r in rows if r["learner"] not in skipped]
    _check_class_report(course, rows, exported.stdout, skipped)
    for row in rows:
        want = expected[row["learner"]][row["assignment"]]
        assert float(row["score"]) == float(want["score"]) and row["status"] == want["status"], row
        assert "reason" not in want or row["reason"].split("；")[0] == want["reason"], (row, want["reason"])
        if float(row["score"]) == 0:
            assert row["reason"].strip(), f"zero without a reason: {row}"
    manual = {(r["learner"], r["assignment"]) for r in rows if r["needs_manual_grade"] == "True"}
    assert ("s01_worked_answers", "nb04_verifiable_rewards") in manual and (
        "s01_worked_answers",
        "nb05_logprobs_masks",
    ) in manual
    assert ("s01_worked_answers", "nb03a_cispo_trace_lab") in manual
    with open(course / "grades_by_test.csv", encoding="utf-8") as handle:
        tests = list(csv.DictReader(handle))
    assert {t["test"] for t in tests} >= {"test_compute_group_advantages_hidden", "test_compute_grpo_loss_hidden"}
    failed = [t for t in tests if float(t["score"]) < float(t["max_score"]) and t["outcome"] != "manual"]
    assert failed and all(t["message"] for t in failed), "every lost point names its cause"
    # copies are flagged, never scored: m1 is s01's nb01 with edited metadata; each row of expected.json with
    # "flags" lists exactly the copy review's flag kinds it gets (c01-c06: the disguised copies; h01, s02: honest)
    flags = {(r["learner"], r["assignment"]): r["flags"].split() for r in rows}
    names = {
        key: {f.rsplit(":", 1)[0] if f.startswith("similar:") else f.split(":")[0] for f in value}
        for key, value in flags.items()
    }
    # (a row names its five most similar learners, then similar:+N; the review's JSON has every flagged pair)
    review = json.loads((course / "review" / "similarity.json").read_text(encoding="utf-8"))

    def share(assignment, one, other):
        pairs = review["assignments"][assignment]["pairs"]
        return max(
            (p["similarity"] for p in pairs if p["flagged"] and {p["learner"], p["other"]} == {one, other}), default=0
        )

    assert share("nb01_group_advantages", "s01_worked_answers", "m1_edited_metadata") == 1.0
    assert any(f.startswith("similar:+") for f in flags[("s01_worked_answers", "nb01_group_advantages")])
    assert all(sum(f.startswith("similar:") and not f.startswith("similar:+") for f in v) <= 5 for v in flags.values())
    copy_kinds = set(COPY_FLAGS)
    wrong = [
        f"{learner}/{assignment}: {sorted({f.split(':')[0] for f in flags[(learner, assignment)]} & copy_kinds)} "
        f"!= {sorted(row['copy_flags'])} ({flags[(learner, assignment)]})"
        for learner, lessons in expected.items()
        for assignment, row in lessons.items()
        if "copy_flags" in row
        and {f.split(":")[0] for f in flags[(learner, assignment)]} & copy_kinds != set(row["copy_flags"])
    ]
    assert not wrong, "\n".join(wrong)
    assert sum("copy_flags" in row for lessons in expected.values() for row in lessons.values()) >= 15
    assert share("nb01_group_advantages", "s01_worked_answers", "f03_copies_the_reference") > 0
    # the side-by-side report: written by `grades`, summarised on the terminal, no script; the class report's section
    from tests.test_similarity_report import page_problems

    assert "[review] nb04_verifiable_rewards:" in exported.stdout and "similarity.html" in exported.stdout
    page = (course / "review" / "similarity.html").read_text(encoding="utf-8")
    assert page_problems(page) == [] and "c03_execs_an_encoded_reference" in page
    assert review["assignments"]["nb05_logprobs_masks"]["flagged_reference"] >= 1
    report = (course / "report.html").read_text(encoding="utf-8")
    copies = report[report.index('<section id="copies">') :]
    assert "c03_execs_an_encoded_reference" in copies and "c02_pastes_the_reference_below_the_stub" in copies
    for learner, lesson in (
        ("f01_nb01_written_its_own_way", "nb01_group_advantages"),
        ("f02_uses_the_notebooks_own_names", "nb04_verifiable_rewards"),
    ):
        assert not names[(learner, lesson)] & {"grader-internals", "processes", "file-access"}, flags[(learner, lesson)]


@pytest.mark.slow
def test_attacks_on_the_results_channel_cost_nothing_and_the_seed_never_leaks(graded_class):
    """a01 sent a forged 12 MB results line (skipped with a reason, full marks: its answers are right); no
    process a02 left running survives grading; and the grading seed is in no output of the run - the pipeline's
    output, grades.csv, grades_by_test.csv, the feedback pages, the autograded notebooks and reports, the gradebook."""
    course, seed = graded_class.course, graded_class.seed
    report = json.loads(
        (
            course / "autograded" / "a01_attacks_the_results_channel" / "nb01_group_advantages" / "grading_report.json"
        ).read_text()
    )
    assert any("oversized line" in note for nb in report["notebooks"] for note in nb["notes"]), report
    lingering = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "a02-lingerer":
                lingering.append(entry.name)
        except OSError:
            continue
    assert not lingering, f"processes a02 left behind still run: {lingering}"
    if not (course / "feedback").exists():
        assert run_pipeline("feedback", "--course", str(course)).returncode == 0
    if not (course / "grades.csv").exists():
        assert run_pipeline("grades", "--course", str(course)).returncode == 0
    assert seed not in graded_class.first.stdout
    outputs = [
        course / "grades.csv",
        course / "grades_by_test.csv",
        course / "gradebook.db",
        *(course / "feedback").rglob("*"),
        *(course / "autograded").rglob("*"),
    ]
    files = [path for path in outputs if path.is_file()]
    assert len(files) > 50
    leaked = [str(path) for path in files if seed.encode() in path.read_bytes()]
    assert not leaked, f"the grading seed is in {leaked}"


@pytest.mark.slow
def test_the_learners_words_never_pose_as_the_graders_and_a_lingering_kernel_frees_its_slot(graded_class):
    """p03 raises ValueError and writes to stderr with fake grader sentences (line breaks, an escape sequence, the
    closing quotation mark): in grades.csv's reason, the gradebook comment and the grading note of the feedback they
    appear only inside the learner-output quotation, escaped, on one line (the cells' own outputs are the learner's
    run, shown as such). l01 loops (swallowing the interrupt) with a forked child after its last result: its kernel
    is stopped after the grace - well inside the notebook's limit - and it keeps its points."""
    from nbgrader.api import Gradebook

    from autograde.grpo_grader.outcomes import LEARNER_OUTPUT

    course = graded_class.course
    if not (course / "grades.csv").exists():
        assert run_pipeline("grades", "--course", str(course)).returncode == 0
    quoted = re.compile(re.escape(LEARNER_OUTPUT) + "：「[^」]*」")
    fake = "评分器：本测试通过"
    learner, lesson = "p03_fake_grader_sentence", "nb01_group_advantages"
    row = next(r for r in _grades_csv(course) if r["learner"] == learner)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        notebook = gb.find_submission_notebook(lesson, lesson, learner)
        comment = next(c.auto_comment for c in notebook.comments if c.name == "group_relative_advantages")
    executed = nbformat.read(course / "autograded" / learner / lesson / f"{lesson}.ipynb", as_version=4)
    note = next(c.source for c in executed.cells if "grading-note" in c.get("metadata", {}).get("tags", []))
    for where, text in (("grades.csv", row["reason"]), ("gradebook comment", comment), ("feedback note", note)):
        assert fake in text, (where, text[:2000])
        assert fake not in quoted.sub("", text), f"{where}: a learner's sentence outside the quotation: {text[:2000]}"
        for span in quoted.findall(text):
            assert all(ch.isprintable() for ch in span), (where, span)
    assert "\n" not in row["reason"] and "\x1b" not in row["reason"]

    learner = "l01_lingers_after_the_last_result"
    report = json.loads((course / "autograded" / learner / lesson / "grading_report.json").read_text())
    notebook = report["notebooks"][0]
    limit = int(re.search(r"notebook limit (\d+) s", graded_class.first.stdout).group(1))
    assert notebook["status"] == "graded" and any("内核已被终止" in n for n in notebook["notes"]), notebook["notes"]
    assert notebook["phases"]["nbgrader"] < limit - 5, (notebook["phases"], limit)


SHARD_SUBSET = ["s14_invalid_json", "m3_deeply_nested_json", "s15_wrong_file_name"]  # (one executed notebook)


def _subset_course(pristine: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the released course ``pristine`` (before grading) with the submissions of ``SHARD_SUBSET`` only (a
    cheap subset of the class: invalid files, a missing and one executed notebook), and the ``--learner``
    arguments naming them."""
    course = tmp_path / "autograde"
    shutil.copytree(pristine, course)
    sample_class.install(course / "submitted")
    for folder in (course / "submitted").iterdir():
        if folder.name not in SHARD_SUBSET:
            shutil.rmtree(folder)
    return course, [a for learner in SHARD_SUBSET for a in ("--learner", learner)]


def subset_rows(course: Path) -> list[tuple]:
    """grades.csv rows of ``SHARD_SUBSET`` in ``course`` (exported first when missing)."""
    if not (course / "grades.csv").exists():
        assert run_pipeline("grades", "--course", str(course)).returncode == 0
    keep = ("learner", "assignment", "score", "max_score", "status", "reason")
    return sorted(tuple(r[k] for k in keep) for r in _grades_csv(course) if r["learner"] in SHARD_SUBSET)


@pytest.mark.slow
def test_three_shards_merge_into_the_same_grades(graded_class, tmp_path):
    """`--shard k/3` in three processes, then `merge-shards`: grades.csv equals the single run's (sorted rows)
    for the same learners."""
    course, args = _subset_course(graded_class.pristine, tmp_path)
    for k in (1, 2, 3):
        done = run_pipeline("autograde", "--course", str(course), "--shard", f"{k}/3", *args, seed=graded_class.seed)
        assert done.returncode == 0
    assert run_pipeline("merge-shards", "--course", str(course)).returncode == 0
    sharded, single = subset_rows(course), subset_rows(graded_class.course)
    assert sharded == single and len(sharded) == len(SHARD_SUBSET) * len(ASSIGNMENTS)


@pytest.mark.slow
@pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
def test_class_report_of_the_sample_class_in_chromium(graded_class):
    """The sample class's report opened from its file in Chromium: no script runs, no request is made, every
    assignment's score distribution is drawn."""
    assert run_pipeline("grades", "--course", str(graded_class.course)).returncode == 0
    page = {
        "name": "class_report",
        "file": str(graded_class.course / "report.html"),
        "wait_ms": 300,
        "screenshot": False,
    }
    view = open_pages([page])["class_report"]
    assert not view["requests"] and not view["dialogs"] and not view["pageErrors"], view
    assert view["svgs"] == view["svgsDrawn"] == len(ASSIGNMENTS), view
    assert "s01_worked_answers" in view["text"] and "各项检查的通过率" in view["text"]
