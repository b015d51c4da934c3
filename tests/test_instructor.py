"""The instructor's side in small: the pipeline's own checks of what an instructor types (a learner id, a
``c.GradingPipeline`` option), the roster's names, the formgrader guard's answers. Fast: no notebook runs."""

from __future__ import annotations

import collections
import re
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

    assert load_settings().sandbox == "auto"
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
    from tools.chain.notebooks import alembic_in_process

    toml = tmp_path / "course.toml"
    toml.write_text(
        '[course]\nid = "x"\n[roster]\nalice = "Alice Wang"\ns1 = { first_name = "小明", last_name = "王" }\n',
        encoding="utf-8",
    )
    with alembic_in_process(), Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", "x") as gb:
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


def test_a_learner_is_shown_by_name_or_id_never_none_or_a_trailing_comma():
    """roster.display_name: "last, first" when both are given, the one given, else the id (nbgrader's formgrader
    showed "None, None" and "Alice Wang, ")."""
    from autograde.grpo_grader.roster import display_name, learner_name

    names = {
        "s1": {"first_name": "小明", "last_name": "王"},
        "alice": {"first_name": "", "last_name": "Alice Wang"},
        "solo": {"first_name": "Ann", "last_name": " "},
    }
    shown = {learner: display_name(learner, names) for learner in ("s1", "alice", "solo", "bob")}
    assert shown == {"s1": "王, 小明", "alice": "Alice Wang", "solo": "Ann", "bob": "bob"}
    assert display_name("bob", {"bob": learner_name("bob", {})}) == "bob"  # what the pipeline writes for "no entry"


@pytest.mark.slow  # a real nbgrader gradebook (its migrations take seconds on a busy machine)
def test_lab_instructor_names_the_learners_it_finds_in_submitted(tmp_path):
    """make lab-instructor puts every learner folder of submitted/ into the gradebook with its roster name or id
    (the formgrader showed "None, None" for a learner not graded yet); a folder that is no learner id is left out."""
    from nbgrader.api import Gradebook

    from tools.chain.notebooks import alembic_in_process
    from tools.cli.lab import name_gradebook_learners

    (tmp_path / "course.toml").write_text(
        '[course]\nid = "x"\n[roster]\ns1 = { first_name = "小明", last_name = "王" }\n', encoding="utf-8"
    )
    for folder in ("s1", "carol", "bad name"):
        (tmp_path / "autograde" / "submitted" / folder / "nb01").mkdir(parents=True)
    (tmp_path / "autograde" / "submitted" / "linked").symlink_to(tmp_path / "autograde" / "submitted" / "carol")
    with alembic_in_process(), Gradebook(f"sqlite:///{tmp_path / 'autograde' / 'gradebook.db'}", "x"):
        pass
    name_gradebook_learners(tmp_path)
    with Gradebook(f"sqlite:///{tmp_path / 'autograde' / 'gradebook.db'}", "x") as gb:
        people = {s.id: (s.first_name, s.last_name) for s in gb.students}
    assert people == {"s1": ("小明", "王"), "carol": ("", "carol")}


def test_formgrader_lists_show_the_same_names(tmp_path):
    """The formgrader's three lists of learners are nbgrader's scripts with their `last_name + ", " + first_name`
    replaced by grpoDisplayName (it must apply to the installed nbgrader), and grpoDisplayName, run by node, shows
    what roster.display_name shows (null and empty names included)."""
    import json
    import shutil
    import subprocess

    from autograde.grpo_grader import formgrader_guard as guard
    from autograde.grpo_grader.roster import display_name

    for name in guard.NAMED_SCRIPTS:
        text = guard.named_script(name)
        assert 'last_name + ", " + first_name' not in text and text.count("grpoDisplayName(") == 2, name
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the script's function is not run here")
    cases = [("王", "小明"), (None, None), ("", "bob"), ("Alice Wang", ""), (None, "Ann"), (" ", " ")]
    script = (
        guard.NAME_DISPLAY_JS
        + f"console.log(JSON.stringify({json.dumps(cases)}.map(c => grpoDisplayName(c[0], c[1], 'id7'))));"
    )
    (tmp_path / "names.js").write_text(script, encoding="utf-8")
    shown = json.loads(
        subprocess.run(["node", str(tmp_path / "names.js")], capture_output=True, text=True, check=True).stdout
    )
    expected = [
        display_name("id7", {"id7": {"last_name": last or "", "first_name": first or ""}}) for last, first in cases
    ]
    assert shown == expected == ["王, 小明", "id7", "bob", "Alice Wang", "Ann", "id7"]


@pytest.mark.filterwarnings("ignore:Your element with mimetype")  # (nbconvert's own page, on the widget)
def test_formgrader_submission_page_runs_nothing_of_the_learner():
    """The formgrader's page of a submission (nbgrader's formgrade template) is rendered by SafeHTMLExporter: its
    own scripts (the grading buttons) stay, none of the learner's payloads stand anywhere they would run; nbgrader's
    exporter puts them there (the check can fail)."""
    import nbformat
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from page_attacks import active_marks, attack_notebook

    from autograde.grpo_grader import formgrader_guard as guard
    from autograde.grpo_grader.feedback_pages import SafeHTMLExporter

    assert guard.VIEW_ROUTES[0] == (
        next(p for p, h, *_ in handlers.default_handlers if h is handlers.SubmissionHandler),
        guard.SanitisedSubmission,
    )
    nb = attack_notebook()
    # elements of the learner's named like the page's own (the formgrader's scripts find elements by id)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell('<div id="statusmessage">fake</div>\n\n## notebook-container'))
    resources = {
        "assignment_id": "a",
        "notebook_id": "n",
        "submission_id": "1",
        "index": 0,
        "total": 1,
        "base_url": "",
        "student": "s1",
        "last_name": "王",
        "first_name": "小明",
        "notebook_path": "x.ipynb",
    }
    settings = {"template_name": "formgrade", "extra_template_basedirs": [handlers.template_path]}
    theirs, _ = HTMLExporter(**settings).from_notebook_node(nb, resources=dict(resources))
    ours, _ = SafeHTMLExporter(**settings).from_notebook_node(nb, resources=dict(resources))
    assert {"markdown-script", "onerror", "html-script", "srcdoc", "javascript-link"} <= active_marks(theirs)
    assert not active_marks(ours), sorted(active_marks(ours))
    for page_id in ("statusmessage", "notebook-container"):
        assert ours.count(f'id="{page_id}"') == theirs.count(f'id="{page_id}"') - 1, page_id  # not the learner's
    assert "formgrade.js" in ours and "王, 小明" in ours


def test_formgrader_guard_takes_the_grading_routes_and_names_the_fix():
    """The guard's routes are the formgrader's Autograde, both Generate Feedback and Collect routes (nbgrader's own
    patterns, so no button escapes it), and the Autograde answer points to make autograde for that learner."""
    from nbgrader.server_extensions.formgrader.apihandlers import default_handlers

    from autograde.grpo_grader import formgrader_guard as guard

    theirs = {pattern: handler.__name__ for pattern, handler in default_handlers}
    taken = {theirs[pattern] for pattern, _ in guard.API_ROUTES}
    assert taken == {"AutogradeHandler", "GenerateAllFeedbackHandler", "GenerateFeedbackHandler", "CollectHandler"}
    answer = guard.autograde_refusal("alice")
    assert answer["success"] is False and 'make autograde ARGS="--learner alice"' in answer["log"]


def test_settings_are_defined_once_and_the_readme_tables_are_generated(tmp_path):
    """Each grading setting is a traitlets trait of GradingPipeline (or SafeExecute) with an English help and a
    Chinese ``zh`` text; nbgrader_config.py sets none of them to its default (one home for each default); the
    README's two settings tables are what ``pipeline settings --write`` generates, and a changed help text makes
    them stale (the check can fail)."""
    from traitlets.config.loader import PyFileConfigLoader

    from autograde import pipeline
    from autograde.grpo_grader.course import GradingPipeline, load_settings
    from autograde.grpo_grader.preprocessors import SafeExecute

    traits = {
        **GradingPipeline.class_traits(config=True),
        **{n: t for n, t in SafeExecute.class_traits(config=True).items() if n in SafeExecute.__dict__},
    }
    assert {"notebook_timeout", "sandbox", "kernel_files", "demo_cells"} <= set(traits)
    for name, trait in traits.items():
        assert trait.help.strip() and trait.metadata.get("zh", "").strip(), f"{name}: help and zh text needed"
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT / "autograde")).load_config()
    for section, cls in (("GradingPipeline", GradingPipeline), ("SafeExecute", SafeExecute)):
        for name, value in config.get(section, {}).items():
            assert value != cls.class_traits()[name].default(), f"c.{section}.{name} repeats its default"
    settings = load_settings()
    assert not hasattr(settings, "grading_seed"), "the seed is run state, not a setting"
    readme = pipeline.README.read_text(encoding="utf-8")
    assert pipeline.readme_with_settings_tables(readme, settings) == readme, "run `make release`"
    assert "`c.GradingPipeline.notebook_timeout` | `900`" in readme and "`c.Execute.timeout` | `180`" in readme
    original = GradingPipeline.class_traits()["workers"].help
    try:
        GradingPipeline.class_traits()["workers"].help = original + " (changed)"
        assert pipeline.readme_with_settings_tables(readme, settings) != readme
    finally:
        GradingPipeline.class_traits()["workers"].help = original
    assert load_settings(workers=3, cell_timeout=7).workers == 3 and load_settings(cell_timeout=7).cell_timeout == 7


def _figures(text: str) -> collections.Counter:
    """The measured figures of a README half: numbers with a unit (s/秒, GiB, MiB, GB, %, x/倍), outside code spans
    and the generated settings tables."""
    text = re.sub(r"<!-- settings-table:\w+ \(generated\) -->.*?<!-- /settings-table:\w+ -->", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    units = {"秒": "s", "倍": "x"}
    return collections.Counter(
        number + units.get(unit, unit)
        for number, unit in re.findall(r"(?<![\w.\-/])(\d+(?:\.\d+)?)\s?(s\b|秒|GiB|MiB|GB|%|x\b|倍)", text)
    )


def test_the_chinese_and_english_grader_readmes_state_the_same_figures():
    """autograde/README.md is written twice (Chinese, then English): every figure with a unit appears in both halves
    as often, so the two cannot disagree on a limit or a measurement; a changed figure in one half fails."""
    text = (ROOT / "autograde" / "README.md").read_text(encoding="utf-8")
    zh, en = text.split("## A term, step by step", 1)
    assert _figures(zh) and _figures(zh) == _figures(en), (_figures(zh) - _figures(en), _figures(en) - _figures(zh))
    first = re.search(r"(?<![\w.\-/`])(\d+(?:\.\d+)?)\s?(?:s\b|GiB|MiB|GB|%|x\b)", en)
    changed = en[: first.start(1)] + "987654" + en[first.end(1) :]
    assert _figures(zh) != _figures(changed)


SAMPLE_CLASS_COUNT = re.compile(r"(示例班级|sample class)[^。.;；\n]{0,40}?\b(\d+)\s*(个学员|名学员|learners)", re.I)


def test_readmes_state_no_sample_class_size_that_can_go_stale():
    """The sample class grows (one learner per mechanism, cases/): neither README states how many learners it has
    (autograde/README.md said 30 while it had more); such a statement is found (the check can fail)."""
    for path in (ROOT / "README.md", ROOT / "autograde" / "README.md"):
        text = path.read_text(encoding="utf-8")
        assert not SAMPLE_CLASS_COUNT.search(text), (path.name, SAMPLE_CLASS_COUNT.search(text).group(0))
    for stale in ("示例班级（30 个学员、57 本）", "the sample class (30 learners, 57 notebooks)"):
        assert SAMPLE_CLASS_COUNT.search(stale), stale
