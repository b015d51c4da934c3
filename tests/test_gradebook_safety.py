"""The gradebook is never lost (autograde/grpo_grader/gradebook.py): each `make autograde` keeps a dated copy first (the
newest ten), a damaged gradebook.db - truncated, its header or a page overwritten, emptied - stops every command that
reads it with one message naming the newest good copy and the command that restores it (which works), and a result
that cannot be written fails alone with its reason while the other learners are merged. A real nbgrader gradebook:
the run's released course (tests/conftest.py ``released_course``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from autograde import pipeline
from autograde.grpo_grader import gradebook
from autograde.grpo_grader.course import load_settings
from autograde.grpo_grader.outcomes import AssignmentResult, NotebookResult

LESSON = "nb01_group_advantages"


@pytest.fixture()
def course(released_course, tmp_path) -> Path:
    folder = tmp_path / "autograde"
    folder.mkdir()
    for name in ("gradebook.db", "nbgrader_config.py"):
        shutil.copy2(released_course["course"] / name, folder / name)
    shutil.copytree(released_course["course"] / "release", folder / "release")
    return folder


DAMAGE = {
    "truncated": lambda data: data[: len(data) // 2],
    "header overwritten": lambda data: b"\xff" * 100 + data[100:],
    "a page overwritten": lambda data: data[:8192] + b"\x5a" * 4096 + data[12288:],
    "emptied": lambda data: b"",
}


@pytest.mark.slow  # the released course of the run (shared with the other grading tests)
def test_backups_rotate_and_a_damaged_gradebook_is_never_copied(course):
    settings = load_settings(course)
    kept = [gradebook.backup_gradebook(settings) for _ in range(gradebook.KEEP_BACKUPS + 2)]
    names = [path.name for path in gradebook.backups(settings)]
    assert len(names) == gradebook.KEEP_BACKUPS and names == sorted(names) and kept[-1].name == names[-1]
    assert all(gradebook.gradebook_problem(path) is None for path in gradebook.backups(settings))
    settings.db_path.write_bytes(DAMAGE["header overwritten"](settings.db_path.read_bytes()))
    assert gradebook.backup_gradebook(settings) is None, "a damaged gradebook never pushes a good copy out"
    assert [path.name for path in gradebook.backups(settings)] == names


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_gradebook_stops_every_command_with_the_restore_command(course, damage, capsys):
    settings = load_settings(course)
    good = gradebook.backup_gradebook(settings)
    # a second copy, newer, damaged by hand: the message must skip it
    newer = gradebook.backup_gradebook(settings)
    newer.write_bytes(DAMAGE["truncated"](newer.read_bytes()))
    assert pipeline.main(["grades", "--course", str(course)]) == 0, "a good gradebook stops nothing"
    settings.db_path.write_bytes(DAMAGE[damage](settings.db_path.read_bytes()))
    assert gradebook.gradebook_problem(settings.db_path)
    for command in pipeline.GRADEBOOK_COMMANDS:
        capsys.readouterr()
        assert pipeline.main([command, "--course", str(course)]) == 2, command
        said = capsys.readouterr()
        assert said.err.count("gradebook.db 已损坏") == 1 and "the gradebook is damaged" in said.err, said
        assert str(good) in said.err and str(newer) not in said.err and "Traceback" not in said.err + said.out
    restore = next(line.strip() for line in said.err.splitlines() if line.strip().startswith("mv "))
    subprocess.run(restore, shell=True, check=True)
    assert gradebook.gradebook_problem(settings.db_path) is None
    assert pipeline.main(["grades", "--course", str(course)]) == 0
    assert (course / "gradebook.db.damaged").exists(), "the damaged file is kept aside, not lost"


def _result(settings, learner: str, staging: Path) -> AssignmentResult:
    info = gradebook.load_course_info(settings)[LESSON]
    notebooks = []
    for name, notebook in info["notebooks"].items():
        grades = {
            gid: {"auto_score": cell["max_score"], "needs_manual_grade": False}
            for gid, cell in notebook["cells"].items()
        }
        notebooks.append(NotebookResult(notebook=name, status="graded", grades=grades, score=1.0, max_score=1.0))
    stage = staging / learner / LESSON
    stage.mkdir(parents=True)
    (stage / "grading_report.json").write_text("{}")
    return AssignmentResult(learner=learner, assignment=LESSON, fingerprint="f", notebooks=notebooks, staged=str(stage))


@pytest.mark.slow
def test_a_result_that_cannot_be_written_fails_alone(course, tmp_path):
    """A learner's old results that cannot be replaced (here made immutable: even root cannot remove them, as an
    unprivileged instructor cannot remove a root run's; tests/test_autograde_trust.py does that for real): that
    learner's row says why, the gradebook keeps its old row, the next learner is merged; once the folder is
    writable again, the next merge clears the reason."""
    settings = load_settings(course)
    blocked = settings.dir("autograded") / "alice" / LESSON
    blocked.mkdir(parents=True)
    (blocked / "grading_report.json").write_text('{"status": "graded"}')
    if subprocess.run(["chattr", "+i", str(blocked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this file system")
    try:
        failed = gradebook.merge(settings, [_result(settings, "alice", tmp_path / "s1")])
        merged = gradebook.merge(settings, [_result(settings, "bob", tmp_path / "s2")])
    finally:
        subprocess.run(["chattr", "-i", str(blocked)], check=True)
    assert list(failed) == [LESSON] and "cannot write this learner's results" in failed[LESSON] and merged == {}
    rows = {(r["learner"], r["assignment"]): r for r in gradebook.export_rows(settings)[0]}
    assert rows[("alice", LESSON)]["status"] == "error" and rows[("alice", LESSON)]["reason"] == failed[LESSON]
    assert rows[("bob", LESSON)]["status"] == "graded" and rows[("bob", LESSON)]["score"] > 0
    assert gradebook.merge(settings, [_result(settings, "alice", tmp_path / "s3")]) == {}
    rows = {(r["learner"], r["assignment"]): r for r in gradebook.export_rows(settings)[0]}
    assert rows[("alice", LESSON)]["status"] == "graded" and not (course / gradebook.UNMERGED).exists()


def test_a_root_run_hands_what_it_writes_to_the_course_folders_owner(tmp_path):
    """As root, what a run writes in a course folder someone else owns becomes that owner's (``hand_over``); a course
    folder root owns, or a run that is not root, changes nothing."""
    course = tmp_path / "autograde"
    (course / "autograded" / "alice" / LESSON).mkdir(parents=True)
    (course / "autograded" / "alice" / LESSON / "grading_report.json").write_text("{}")
    settings = load_settings(course)
    if os.geteuid() != 0:
        gradebook.hand_over(settings, course / "autograded")  # nothing to do, nothing raised
        return
    gradebook.hand_over(settings, course / "autograded")  # root's course folder: nothing changes
    assert (course / "autograded" / "alice").stat().st_uid == 0
    os.chown(course, 4242, 4343)
    gradebook.hand_over(settings, course / "autograded")
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in [course / "autograded", *(course / "autograded").rglob("*")]}
    assert owners == {(4242, 4343)}


@pytest.mark.slow
def test_grades_csv_has_a_row_for_every_folder_that_was_not_graded(course):
    """Skipped folders are rows of grades.csv (with no learner graded yet too: the assignments come from the
    gradebook); a learner's folder of a known assignment is no skipped row."""
    submitted = course / "submitted"
    (submitted / "alice" / LESSON).mkdir(parents=True)
    (submitted / "alice" / "nb99_not_a_lesson").mkdir()
    (submitted / "loose.ipynb").write_text("{}")
    rows = gradebook.export_rows(load_settings(course))[0]
    skipped = {(r["learner"], r["assignment"]): r["reason"] for r in rows if r["status"] == "skipped"}
    assert set(skipped) == {("alice", "nb99_not_a_lesson"), ("loose.ipynb", "")}
    assert "unknown assignment" in skipped[("alice", "nb99_not_a_lesson")]
