"""The instructor's side in small: the pipeline's own checks of what an instructor types (a learner id, a
``c.GradingPipeline`` option), the roster's names, the formgrader guard's answers. Fast: no notebook runs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _course_with_config(tmp_path: Path, extra: str = "") -> Path:
    course = tmp_path / "course" / "autograde"
    course.mkdir(parents=True)
    text = (ROOT / "autograde" / "nbgrader_config.py").read_text(encoding="utf-8")
    (course / "nbgrader_config.py").write_text(text + extra, encoding="utf-8")
    return course


def test_a_typo_in_a_grading_pipeline_option_is_named(tmp_path, capsys):
    """nbgrader ignores the GradingPipeline section, so a misspelt option used to leave the default in force
    silently: it is now an error naming the option and the closest real one; the course's own config passes."""
    from autograde import pipeline
    from autograde.grpo_grader.course import load_settings

    assert load_settings().sandbox in ("auto", "bwrap", "none")
    course = _course_with_config(tmp_path, '\nc.GradingPipeline.sandbx = "none"\nc.GradingPipeline.workerz = 3\n')
    with pytest.raises(ValueError) as error:
        load_settings(course)
    message = str(error.value)
    assert "c.GradingPipeline.sandbx" in message and "did you mean sandbox" in message, message
    assert "c.GradingPipeline.workerz" in message and "did you mean workers" in message, message
    assert pipeline.main(["grades", "--course", str(course)]) == 2
    assert "sandbx" in capsys.readouterr().err


def test_autograde_of_an_unknown_learner_says_so(tmp_path, capsys):
    """`make autograde ARGS="--learner nobody"`: "no such learner" and the learners there are, exit 2
    (it used to say "nothing new to grade")."""
    from autograde import pipeline

    course = _course_with_config(tmp_path)
    (course / "submitted" / "alice" / "nb01_group_advantages").mkdir(parents=True)
    assert pipeline.main(["autograde", "--course", str(course), "--learner", "nobody"]) == 2
    err = capsys.readouterr().err
    assert "no such learner" in err and "nobody" in err and "alice" in err, err


def test_roster_names_learners_and_keeps_typed_names(tmp_path):
    """[roster] of course.toml names learners in the gradebook (a string or first/last names); learners without an
    entry get their id, names already in the gradebook stay; a malformed entry is an error naming it."""
    from nbgrader.api import Gradebook

    from autograde.grpo_grader.roster import name_learners, roster

    toml = tmp_path / "course.toml"
    toml.write_text(
        '[course]\nid = "x"\n[roster]\nalice = "Alice Wang"\ns1 = { first_name = "小明", last_name = "王" }\n',
        encoding="utf-8",
    )
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", "x") as gb:
        gb.add_student("typed", first_name="Ty", last_name="Ped")
        gb.add_student("bob")
        named = name_learners(gb, toml, ["alice", "s1"])
        people = {s.id: (s.first_name, s.last_name) for s in gb.students}
    assert people == {"alice": ("", "Alice Wang"), "s1": ("小明", "王"), "typed": ("Ty", "Ped"), "bob": ("", "bob")}
    assert named == ["bob"]  # (alice and s1 were added with their names)
    toml.write_text("[roster]\nalice = 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="alice"):
        roster(toml)
    assert roster(tmp_path / "missing.toml") == {}


def test_formgrader_guard_takes_the_grading_routes_and_names_the_fix():
    """The guard's routes are the formgrader's Autograde, both Generate Feedback and Collect routes (nbgrader's own
    patterns, so no button escapes it), and the Autograde answer points to make autograde for that learner."""
    from nbgrader.server_extensions.formgrader.apihandlers import default_handlers

    from autograde.grpo_grader import formgrader_guard as guard

    theirs = {pattern: handler.__name__ for pattern, handler in default_handlers}
    taken = {theirs[pattern] for pattern, _ in guard.ROUTES}
    assert taken == {"AutogradeHandler", "GenerateAllFeedbackHandler", "GenerateFeedbackHandler", "CollectHandler"}
    answer = guard.autograde_refusal("alice")
    assert answer["success"] is False and 'make autograde ARGS="--learner alice"' in answer["log"]
