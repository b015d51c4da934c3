"""What comes in (autograde/grpo_grader/submission.py): every folder of ``submitted/`` that is not graded is named with
its reason (a row of grades.csv and a line of the run's summary), and another lesson's notebook handed in under a
lesson's name is the learner's mistake (``invalid``), never the grader's (``error``). Fast: no grading."""

from __future__ import annotations

import copy
import os

import nbformat

from autograde.grpo_grader.course import ROOT
from autograde.grpo_grader.submission import Skipped, collect_submitted, grade_ids, other_assignment


def _reasons(skipped: list[Skipped]) -> dict[tuple[str, str], str]:
    return {(item.learner, item.assignment): item.reason for item in skipped}


def test_every_folder_that_is_not_graded_has_a_reason(tmp_path):
    submitted = tmp_path / "submitted"
    (submitted / "alice" / "nb01").mkdir(parents=True)  # graded
    (submitted / "alice" / "nb01" / "nb01.ipynb").write_text("{}")
    (submitted / "alice" / "notes.txt").write_text("stray")
    (submitted / "alice" / "nb99").mkdir()  # not an assignment
    os.symlink(submitted / "alice" / "nb01", submitted / "alice" / "nb02")  # a link instead of a folder
    (submitted / "bad name!").mkdir()
    (submitted / "empty").mkdir()
    (submitted / "loose.ipynb").write_text("{}")
    os.symlink(submitted / "alice", submitted / "mallory")
    (submitted / "bob" / "nb02").mkdir(parents=True)
    (submitted / "bob" / "nb01.ipynb").write_text("{}")  # only a file beside the assignment folders... and nb02
    learners, skipped = collect_submitted(submitted, {"nb01", "nb02"})
    assert [(learner, [f.name for f in folders]) for learner, folders in learners] == [
        ("alice", ["nb01"]),
        ("bob", ["nb02"]),
    ]
    reasons = _reasons(skipped)
    assert set(reasons) == {
        ("alice", "nb99"),
        ("alice", "nb02"),
        ("alice", ""),
        ("bad name!", ""),
        ("empty", ""),
        ("loose.ipynb", ""),
        ("mallory", ""),
        ("bob", ""),
    }
    assert "unknown assignment" in reasons[("alice", "nb99")]
    assert "symbolic link" in reasons[("alice", "nb02")] and "symbolic link" in reasons[("mallory", "")]
    assert "notes.txt" in reasons[("alice", "")] and "stray files" in reasons[("alice", "")]
    assert "learner id not allowed" in reasons[("bad name!", "")]
    assert "empty folder" in reasons[("empty", "")] and "not a learner folder" in reasons[("loose.ipynb", "")]
    assert "bob/<作业名>/<作业名>.ipynb" in reasons[("bob", "")]
    assert collect_submitted(tmp_path / "nothing", {"nb01"}) == ([], [])


def test_a_name_with_control_characters_is_shown_escaped(tmp_path):
    (tmp_path / "evil\x1b[2Jname").mkdir()
    _learners, skipped = collect_submitted(tmp_path, {"nb01"})
    assert skipped[0].learner == "evil\\x1b[2Jname" and skipped[0].learner.isprintable()


def _released(name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)


def test_another_lessons_notebook_is_the_learners_mistake():
    lessons = ["nb01_group_advantages", "nb02_grpo_objective", "nb04_verifiable_rewards"]
    notebooks = {name: _released(name) for name in lessons}
    released = {name: grade_ids(nb) for name, nb in notebooks.items()}
    assert released["nb01_group_advantages"] & released["nb02_grpo_objective"], "they share the bootstrap cell"
    reason = other_assignment(notebooks["nb02_grpo_objective"], "nb01_group_advantages", released)
    assert reason and "nb02_grpo_objective" in reason and "wrong assignment" in reason
    # the lesson's own notebook, and a damaged copy of it, are no mistake
    assert other_assignment(notebooks["nb01_group_advantages"], "nb01_group_advantages", released) is None
    edited = copy.deepcopy(notebooks["nb01_group_advantages"])
    ids = [c for c in edited.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")]
    for cell in ids[: len(ids) // 3]:  # a third of the ids renamed (m1 renames and duplicates some)
        cell.metadata.nbgrader.grade_id += "_renamed"
    assert other_assignment(edited, "nb01_group_advantages", released) is None
    stripped = copy.deepcopy(notebooks["nb02_grpo_objective"])
    for cell in stripped.cells:
        cell.metadata.pop("nbgrader", None)
    assert other_assignment(stripped, "nb01_group_advantages", released) is None, "no metadata: graded by position"
    # the mutation: a notebook whose ids are mostly nb01's is not called nb02's
    mixed = copy.deepcopy(notebooks["nb01_group_advantages"])
    mixed.cells += notebooks["nb02_grpo_objective"].cells[:2]
    assert other_assignment(mixed, "nb01_group_advantages", released) is None
