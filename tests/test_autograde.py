"""The instructor pipeline: oracles, submissions read without trust, hidden tests kept from kernels and feedback,
the kernel sandbox. The graded sample class is tests/test_autograde_class.py, the slot's zygotes (bubblewrap as root)
tests/test_autograde_slot.py (helpers shared by the three: tests/autograde_helpers.py).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest
import torch
from autograde_helpers import ASSIGNMENTS, ROOT, pipeline_env, run_pipeline, run_probe  # tests/autograde_helpers.py
from nbformat.notebooknode import NotebookNode

from autograde.grpo_grader.course import load_settings
from autograde.grpo_grader.learner_grading import check_notebook_file, pick_files
from autograde.grpo_grader.outcomes import summarise
from autograde.grpo_grader.preprocessors import HideHiddenTests, SafeExecute, is_demo_cell
from autograde.grpo_grader.review import compare_with_release
from autograde.sample_class import build as sample_class


# ----------------------------------------------------------------------------- fast checks
def test_sample_class_is_up_to_date_and_complete():
    assert sample_class.check() == [], "run `python -m autograde.pipeline sample --rebuild`"
    expected = sample_class.expected()
    cases = sample_class.load_cases()
    assert sorted(expected) == sorted(cases), "expected.json must name exactly the learners of cases/"
    for learner, rows in expected.items():
        assert sorted(rows) == sorted(ASSIGNMENTS), f"{learner}: one expected row per notebook"
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


def test_runnable_notebooks_counts_the_files_that_will_be_executed(tmp_path):
    """What a run counts before it starts nbgrader's forkserver and the zygotes: the notebooks that pass the file
    checks (a renamed single notebook counts, invalid JSON and a missing file do not); counting stops at ``enough``."""
    from autograde.grpo_grader.course import GradingPipeline
    from autograde.grpo_grader.learner_grading import runnable_notebooks

    info = {a: {"notebooks": [a]} for a in ASSIGNMENTS}

    def work(learner, assignments):
        return (learner, [(a, sample_class.SUBMITTED / learner / a, "") for a in assignments])

    settings = GradingPipeline(course=tmp_path)
    invalid = [
        work("s14_invalid_json", [ASSIGNMENTS[0]]),
        work("m3_deeply_nested_json", [ASSIGNMENTS[0]]),
        work("s15_wrong_file_name", [ASSIGNMENTS[0]]),
    ]  # s15 submitted nb02 only: no nb01 file
    assert runnable_notebooks(settings, info, invalid) == 0
    renamed = [work("s15_wrong_file_name", ["nb02_grpo_objective"])]
    assert runnable_notebooks(settings, info, invalid + renamed) == 1
    full = [work("s01_worked_answers", ASSIGNMENTS)]
    assert runnable_notebooks(settings, info, full) == len(ASSIGNMENTS)
    assert runnable_notebooks(settings, info, full, enough=2) == 2


def test_learners_with_more_assignments_are_graded_first():
    """The slots take the learners with the most assignments first, by name among equals: in the sample class the
    four seven-lesson learners, then f02 (three), then s06 (two, both waiting out a time limit) - not s06 twentieth,
    whose waits once ended the class run on one busy slot while the other stood idle."""
    from autograde.pipeline import grading_order

    todo = [
        (learner.name, sorted(p.name for p in learner.iterdir()))
        for learner in sorted(sample_class.SUBMITTED.iterdir())
    ]
    order = [learner for learner, _ in grading_order(todo)]
    assert order[:6] == [
        "s01_worked_answers",
        "s02_independent_answers",
        "s03_untouched",
        "s04_bug_only_hidden_tests_catch",
        "f02_uses_the_notebooks_own_names",
        "s06_infinite_loops",
    ], order
    assert sorted(order) == [learner for learner, _ in todo] and order[6:] == sorted(order[6:])
    assert [len(work) for _, work in grading_order(todo)] == sorted((len(work) for _, work in todo), reverse=True)


def test_compare_with_release_finds_edited_and_deleted_locked_cells():
    def cell(gid, source, locked=True, solution=False):
        return nbformat.v4.new_code_cell(
            source,
            metadata={"nbgrader": {"grade_id": gid, "locked": locked, "solution": solution, "grade": not solution}},
        )

    release = nbformat.v4.new_notebook(
        cells=[
            cell("f", "raise NotImplementedError", False, True),
            cell("t1", "assert f(1) == 2"),
            cell("t2", "assert f(2) == 3"),
        ]
    )
    submitted = nbformat.v4.new_notebook(cells=[cell("f", "def f(x): return x + 1", False, True), cell("t1", "pass")])
    edited, deleted, written = compare_with_release(submitted, release)
    assert edited == ["t1"] and deleted == ["t2"] and "def f(x)" in written and "pass" in written


def test_summary_names_failed_tests():
    tests = [
        {"grade_id": "t1", "outcome": "passed", "message": ""},
        {"grade_id": "t2", "outcome": "failed", "message": "AssertionError: 不符"},
    ]
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
        metadata={"nbgrader": {"grade": True, "grade_id": "t", "locked": True, "solution": False, "points": 1}},
    )
    cell.outputs = [
        NotebookNode(
            output_type="error",
            ename="AssertionError",
            evalue="不符",
            traceback=["---> 4 assert f(5) == 6  # secret", "AssertionError: 不符"],
        )
    ]
    restore = nbformat.v4.new_code_cell("restore", metadata={"tags": ["grader-restore"]})
    nb = nbformat.v4.new_notebook(cells=[restore, cell])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert len(nb.cells) == 1
    assert "secret" not in nb.cells[0].source and "assert f(1) == 2" in nb.cells[0].source
    assert nb.cells[0].outputs[0]["traceback"] == ["AssertionError: 不符"]


def test_hidden_tests_of_oracle_graded_cells_never_reach_the_kernel():
    """StripHiddenTests (the pipeline's slots): an oracle-graded test cell runs without its hidden region, other
    cells keep theirs; empty by default, so a plain `nbgrader autograde` keeps nbgrader's hidden tests. The slot
    names the oracle's test cells on nbgrader's command line (``Slot.nbgrader_options``), one option per cell."""
    from traitlets.config import Application

    from autograde.grpo_grader.oracle import load_oracle
    from autograde.grpo_grader.preprocessors import STRIPPED_NOTE, StripHiddenTests, strip_hidden
    from autograde.grpo_grader.slots import Slot

    text, found = strip_hidden(
        "a = 1\n    ### BEGIN HIDDEN TESTS\n    def _h_ref(): pass\n    ### END HIDDEN TESTS\nb = 2\n"
        "### BEGIN HIDDEN TESTS\nsecret = 3\n"
    )  # the second region is never closed
    assert found and "_h_ref" not in text and "secret" not in text
    assert text == f"a = 1\n    {STRIPPED_NOTE}\nb = 2\n{STRIPPED_NOTE}\n"
    assert strip_hidden("x = 1\n") == ("x = 1\n", False)

    def cell(gid, grade=True, solution=False):
        meta = {
            "nbgrader": {"grade": grade, "grade_id": gid, "locked": not solution, "solution": solution, "points": 1}
        }
        return nbformat.v4.new_code_cell(
            '"""检查"""\nassert f(1) == 2\n### BEGIN HIDDEN TESTS\nassert f(5) == 6\n### END HIDDEN TESTS\n',
            metadata=meta,
        )

    def run(arguments):
        """StripHiddenTests configured as nbgrader's command line configures it."""
        app = Application(classes=[StripHiddenTests])
        app.parse_command_line(arguments)
        nb = nbformat.v4.new_notebook(
            cells=[
                cell("test_compute_group_advantages_hidden"),
                cell("not_an_oracle_test"),
                cell("compute_group_advantages", grade=False, solution=True),
            ]
        )
        resources = {"nbgrader": {"assignment": "nb01_group_advantages"}}
        return StripHiddenTests(config=app.config).preprocess(nb, resources)

    tests = sorted(load_oracle("nb01_group_advantages").tests)
    slot = types.SimpleNamespace(  # what Slot.nbgrader_options reads of a slot
        nbgrader=Path("/course"),
        settings=types.SimpleNamespace(cell_timeout=10),
        sandbox=types.SimpleNamespace(mode="none"),
    )
    options = [o for o in Slot.nbgrader_options(slot, tests) if "StripHidden" in o]
    assert len(options) == len(tests) > 1
    nb, resources = run(options)
    assert "f(5)" not in nb.cells[0].source and "assert f(1) == 2" in nb.cells[0].source
    assert "f(5)" in nb.cells[1].source and "f(5)" in nb.cells[2].source
    assert resources["grading"]["hidden_stripped"] == ["test_compute_group_advantages_hidden"]
    nb, _ = run([])
    assert all("f(5)" in c.source for c in nb.cells)


def test_nbgrader_forkserver_children_import_nbgrader_but_not_torch(tmp_path):
    """nbgrader's forkserver preloads nbgrader, not the oracles: by the time a pipeline grades it has loaded an oracle
    (and torch), and a forkserver that preloaded what the parent had imported paid ~1.9 CPU-s for torch that no
    nbgrader child uses. A child forked from it has nbgrader's apps and no torch."""
    out = tmp_path / "modules.json"
    code = """
import sys
from autograde.grpo_grader.oracle import load_oracle
from autograde.grpo_grader import nbgrader_forkserver
assert load_oracle("nb01_group_advantages") is not None and "torch" in sys.modules
probe = f"import json, sys; json.dump(sorted(sys.modules), open({sys.argv[1]!r}, 'w'))"
child = nbgrader_forkserver._get_context().Process(target=exec, args=(probe,))
child.start()
child.join()
assert child.exitcode == 0, child.exitcode
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=ROOT, env=pipeline_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    modules = set(json.loads(out.read_text()))
    assert {"nbgrader.apps.autogradeapp", "autograde.grpo_grader.preprocessors", "sqlalchemy"} <= modules
    assert "torch" not in modules and "autograde.grpo_grader.oracle" not in modules


@pytest.mark.slow
def test_a_run_without_a_runnable_notebook_imports_no_torch(tmp_path, released_course):
    """A run whose submissions are all invalid files executes nothing: it starts no zygote, so it does not read the
    oracles' zygote imports either (they import torch: ~3 CPU-s per run, in two of the three shards of
    test_three_shards_merge_into_the_same_grades), and still writes the invalid grade."""
    course = tmp_path / "autograde"
    shutil.copytree(released_course["course"], course)
    sample_class.install(course / "submitted")
    for folder in (course / "submitted").iterdir():
        if folder.name != "s14_invalid_json":
            shutil.rmtree(folder)
    out = tmp_path / "modules.json"
    code = """
import json, sys
from autograde import pipeline
status = pipeline.main(["autograde", "--course", sys.argv[1]])
json.dump({"status": status, "torch": "torch" in sys.modules}, open(sys.argv[2], "w"))
"""
    env = {**pipeline_env(), "GRPO_GRADING_SEED": secrets.token_hex(12)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(course), str(out)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "invalid 1" in done.stdout, done.stdout[-3000:]
    assert json.loads(out.read_text()) == {"status": 0, "torch": False}


def test_feedback_exporter_matches_nbconvert_without_its_soup_pass():
    """FeedbackExporter (feedback pages without nbconvert's BeautifulSoup pass) renders what HTMLExporter renders:
    the same text, the same tags, the same alternative texts; `<img` inside a script or a comment stays as it was."""
    import base64

    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter

    from autograde.grpo_grader.preprocessors import _MATHJAX_BLOCK, NO_ALT, FeedbackExporter, add_missing_alt

    png = base64.b64encode(bytes.fromhex("89504e470d0a1a0a")).decode()
    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "pygments_lexer": "ipython3"}})
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "### 自动评分说明（note）\n\n![](data:image/png;base64,AAAA) and ![a badge](x.svg) "
            "<img src='y.png'> &#60;b&#62; &#33258;"
        ),
        nbformat.v4.new_code_cell(
            "plot()",
            outputs=[
                nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
                nbformat.v4.new_output(
                    "display_data",
                    data={
                        "text/html": "<div><img src='z.png' alt='kept'>"
                        "<script>var s = '<img src=q>';</script><!-- <img src=c> --></div>"
                    },
                ),
                nbformat.v4.new_output("stream", name="stdout", text="<img src=not-a-tag>\n"),
            ],
        ),
    ]
    theirs, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(nb)
    assert "MathJax.Hub" in theirs and "MathJax.Hub" not in ours  # feedback pages load no MathJax (MathML)
    theirs = _MATHJAX_BLOCK.sub("", theirs, count=1)
    a, b = BeautifulSoup(theirs, "html.parser"), BeautifulSoup(ours, "html.parser")
    assert a.get_text() == b.get_text()
    assert [t.name for t in a.find_all()] == [t.name for t in b.find_all()]
    alts = [i.get("alt") for i in b.find_all("img")]
    assert alts == [i.get("alt") for i in a.find_all("img")] and NO_ALT in alts and "kept" in alts and None not in alts
    assert "var s = '<img src=q>';" in ours and "<!-- <img src=c> -->" in ours
    assert "自动评分说明（note）" in ours  # nbconvert's heading anchors write non-ASCII as references: written back
    assert add_missing_alt('<IMG src="a"><img alt="" src="b">') == (
        f'<img alt="{NO_ALT}" src="a"><img alt="" src="b">',
        1,
    )


def test_feedback_pages_reuse_rendered_cells_only_for_the_same_source():
    """The exporter memoises highlighted code and rendered Markdown across pages (a class shares most cells): a
    page renders as it does without the memo, and a changed source or language renders afresh."""
    import autograde.grpo_grader.preprocessors as pre

    def page(code: str, text: str, lexer: str = "ipython3") -> str:
        nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "pygments_lexer": lexer}})
        nb.cells = [nbformat.v4.new_markdown_cell(text, id="m"), nbformat.v4.new_code_cell(code, id="c")]
        return pre.FeedbackExporter(template_name="classic").from_notebook_node(nb)[0]

    pre.clear_rendered()
    first = page("x = compute(1)  # 一", "**粗体** $a^2$")
    assert pre._RENDERED, "nothing was memoised"
    assert page("x = compute(1)  # 一", "**粗体** $a^2$") == first
    other = page("y = compute(2)  # 二", "*斜体* $b^2$")
    assert "二" in other and "斜体" in other and "粗体" not in other and "一" not in other
    assert page("x = compute(1)  # 一", "**粗体** $a^2$", lexer="text") != first  # another lexer: no highlight spans
    kept, pre._RENDERED_MAX = pre._RENDERED_MAX, 0
    try:
        pre.clear_rendered()
        assert page("x = compute(1)  # 一", "**粗体** $a^2$") == first  # the same page without the memo
    finally:
        pre._RENDERED_MAX = kept


def test_feedback_pages_carry_formulas_as_mathml_and_never_hidden_tests():
    """Feedback pages need no network for maths (MathML written in the page, no MathJax from a CDN) and never show
    hidden-test source, even for a notebook that still holds it (plain `nbgrader autograde`, another config);
    nbconvert's own exporter does both wrong on the same notebook (the check can fail)."""
    from nbconvert.exporters import HTMLExporter

    from autograde.grpo_grader.preprocessors import HIDDEN_BEGIN, FeedbackExporter

    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "pygments_lexer": "ipython3"}})
    hidden = "assert reference_secret(3) == 42"
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            r"组内优势 $\hat{A}_i = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r)}$："
            "\n\n$$\\mathcal{L} = -\\frac{1}{G}\\sum_{i=1}^{G} \\min(\\rho_i \\hat{A}_i, \\text{clip})$$"
        ),
        nbformat.v4.new_code_cell(
            f"assert f(1) == 2\n{HIDDEN_BEGIN}\n{hidden}\n### END HIDDEN TESTS",
            metadata={
                "nbgrader": {
                    "grade": True,
                    "solution": False,
                    "grade_id": "t1",
                    "points": 1,
                    "locked": True,
                    "schema_version": 3,
                }
            },
        ),
    ]
    theirs, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(nb)
    assert (
        "libs/mathjax" in theirs and "\\hat{A}_i" in theirs and "reference_secret" in theirs
    )  # what the check catches
    assert "MathJax.Hub" not in ours and "libs/mathjax" not in ours
    assert ours.count("<math") == 2 and 'display="block"' in ours and "<mfrac>" in ours and "\\hat" not in ours
    assert "reference_secret" not in ours and "BEGIN HIDDEN TESTS" not in ours and "hidden tests are not shown" in ours
    assert nb.cells[1].source.count("reference_secret") == 1  # the notebook handed in is left as it was


def test_every_formula_of_the_course_converts_to_mathml():
    """Every Markdown formula of the learner notebooks becomes MathML (none left as TeX source in a feedback page)."""
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    from autograde.grpo_grader import preprocessors

    renderer = preprocessors._mathml_renderer_class()
    pages = [
        MarkdownWithMath(renderer=renderer(escape=False)).render(cell.source)
        for path in sorted((ROOT / "notebooks").glob("*/*.ipynb"))
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "markdown"
    ]
    page = "".join(pages)
    assert page.count("<math") > 100, page.count("<math")
    left = re.findall(rf'<code class="{preprocessors.TEX_FALLBACK_CLASS}">(.*?)</code>', page)
    assert not left, left
    assert preprocessors.TEX_FALLBACK_CLASS in preprocessors.tex_to_mathml(r"\frac{1}{", display=False)


@pytest.mark.slow
def test_sandbox_hides_the_course_sources():
    """The kernel sandbox (`pipeline.py probe --json`): solutions, gradebook, sources, .git unreadable from a kernel or
    the oracle's driver; both find what grading imports inside it (``--imports find``, a grading run's own pre-flight:
    importing it all costs ~10-30 s here, done by the integration tests, tests/test_probe.py)."""
    result, _done = run_probe("--imports", "find", seed="probe-seed-" + secrets.token_hex(4), timeout=300)
    assert result["problems"] == [] and result["ok"], result["problems"]
    assert not result["seed_visible"], "the grading seed reached a sandboxed process's environment"
    assert result["readable"] == [], (
        "a grading kernel can read answers or hidden tests: bubblewrap's view must hold only its allow-list "
        "(autograde/README.md)"
    )
    kernel, oracle = result["kernel"], result["oracle"]
    assert kernel["readable"] and oracle["readable"] and kernel["rlimit_as"] > 0
    for report in (kernel, oracle):
        assert report["import_mode"] == "find" and set(report["imports"].values()) == {"ok"}, report["imports"]
    assert {"torch", "ipykernel", "nbformat"} <= set(kernel["imports"]) and "torch" in oracle["imports"]
    # the oracle's driver runs beside the kernel: IPC namespaces not the grader's, as root its own uid, no view of
    # the kernel's socket folder (a path of oracle["readable"], checked above)
    assert result["ipc_own"], "the two sandboxes (and the grader) must not share an IPC namespace"
    assert not kernel["network"] and not oracle["network"]
    assert result["sandbox"] == "bwrap", "auto picks bubblewrap"
    if os.geteuid() == 0:
        assert oracle["uid"] != kernel["uid"], "as root the oracle's driver runs as a uid of its own"
        assert oracle["zygote"], "as root the probe checks a job of the driver's zygote"
        assert kernel["zygote"], "as root the probe checks a kernel zygote's job"


# ----------------------------------------------------------------------------- oracles (trusted side, fast)
from autograde.grpo_grader import judging, wire  # noqa: E402
from autograde.grpo_grader import oracle as oracle_lib  # noqa: E402
from autograde.grpo_grader.oracles import oracle_assignments  # noqa: E402
from autograde.grpo_grader.submission import read_notebook, rebuild_metadata  # noqa: E402

ORACLES = oracle_assignments()


def _test_cells(assignment: str) -> set[str]:
    nb = nbformat.read(ROOT / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.cell_type == "code"
        and c.metadata.get("nbgrader", {}).get("grade")
        and not c.metadata["nbgrader"].get("solution")
    }


def test_every_test_cell_has_an_oracle_and_cases_come_from_the_seed():
    """Each oracle covers exactly its notebook's test cells, draws its
    inputs from the seed (two seeds differ, one seed repeats) and keeps every flag off by default."""
    covered: dict[str, set[str]] = {}
    for name in ORACLES:
        oracle = oracle_lib.load_oracle(name)
        assert oracle is not None, name
        covered.setdefault(name, set()).update(oracle.tests)
        one, again, other = (oracle.cases(seed) for seed in ("seed-a", "seed-a", "seed-b"))
        for index in range(8):  # every seed must give well-formed cases
            oracle.cases(f"seed-{index}", {k: True for k in getattr(oracle.module, "FLAGS", {})})
        wire = lambda cases: json.dumps([c.wire() for c in cases], sort_keys=True)  # noqa: E731
        assert wire(one) == wire(again), f"{name}: cases must be a function of the seed"
        assert wire(one) != wire(other), f"{name}: cases must change with the seed"
        assert {c.test for c in one} == set(oracle.tests), f"{name}: every test cell has cases"
        assert not any(getattr(oracle.module, "FLAGS", {}).values()), f"{name}: flags are off by default"
        flagged = oracle.cases("seed-a", {k: True for k in getattr(oracle.module, "FLAGS", {})})
        assert len(flagged) >= len(one)
        for case in one:  # the expectations never travel to the kernel
            assert "expect" not in case.wire() and "grads" not in case.wire()
    for notebook, tests in covered.items():
        assert tests == _test_cells(notebook), f"{notebook}: oracle tests != the notebook's test cells"
    assert oracle_lib.load_oracle("nb99_no_such_lesson") is None


def test_ragged_masks_are_ragged_for_every_seed():
    """The oracles' masks always have two row lengths (where the shape allows it): with equal lengths a token
    mean equals the per-candidate mean, and s10's score moved with the seed (6 instead of 4 in ~5 % of seeds)."""
    from autograde.grpo_grader.oracles._common import ragged_mask

    for index in range(3000):
        gen = torch.Generator().manual_seed(index)
        rows, cols, min_valid = 2 + index % 6, 1 + index % 4, 1 + index % 2
        prefix = index % 3 == 0
        mask = ragged_mask(gen, rows, cols, prefix=prefix, min_valid=min(min_valid, cols))
        counts = mask.sum(dim=1)
        assert mask.shape == (rows, cols) and mask.dtype == torch.bool
        assert int(counts.min()) >= min(min_valid, cols)
        if prefix:  # a prefix mask: valid tokens first
            assert torch.equal(mask, torch.arange(cols).unsqueeze(0) < counts.unsqueeze(1))
        if cols > min(min_valid, cols):
            assert len(set(counts.tolist())) >= 2, (rows, cols, prefix, mask)


def test_results_are_parsed_as_plain_data_and_checked(tmp_path):
    """What the driver writes is data: wrong kinds, broken tensors, deep nesting and missing results fail
    with a reason; a tensor subclass arrives as an object and fails; the first line of a case counts."""
    from autograde.grpo_grader.judging import judge
    from autograde.grpo_grader.vocabulary import Case, Close, Raises

    case = Case("t", "f", (), {}, Close(torch.tensor([1.0, 2.0])))
    good = {"status": "returned", "value": wire.encode(torch.tensor([1.0, 2.0]))}
    assert judge(case, good, "x") == (True, "")
    for record, reason in [
        ({"status": "returned", "value": {"__object__": "__main__._Mirror"}}, "_Mirror"),
        ({"status": "returned", "value": {"__tensor__": "float32", "shape": [3], "data": [1.0, 2.0]}}, "不符"),
        ({"status": "returned", "value": {"__tensor__": "float64", "shape": [2], "data": [1.0, 2.0]}}, "dtype"),
        ({"status": "returned", "value": {"__tensor__": "float32", "shape": [2], "data": ["1", 2.0]}}, "只能是数"),
        ({"status": "returned", "value": {"__tensor__": "object", "shape": [2], "data": [1, 2]}}, "格式不对"),
        (
            {"status": "returned", "value": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
            "嵌套过深",
        ),
        ({"status": "raised", "type": "NotImplementedError", "message": "请先完成这个 TODO"}, "NotImplementedError"),
        ({"status": "missing", "message": "SyntaxError"}, "找不到函数"),
        (None, "未运行"),
    ]:
        ok, message = judge(case, record, "未运行的原因")
        assert not ok and reason in message, (record, message)
    raises = Case("t", "f", (), {}, Raises("ValueError"))
    assert judge(raises, {"status": "raised", "type": "E", "mro": ["E", "ValueError", "Exception"]}, "")[0]
    assert not judge(raises, {"status": "returned", "value": None}, "")[0]
    results = tmp_path / "results.jsonl"
    results.write_text(
        '{"case": "a", "status": "returned", "value": 1}\nnot json\n'
        '{"case": "a", "status": "returned", "value": 2}\n' + "[" * 100000 + "\n"
    )
    cases, _, problem = judging.read_results(results)
    assert cases["a"]["value"] == 1 and "malformed" in problem


def _driver_verdicts(oracle_names: list[str], notebook: str, answers: dict[str, str], tmp_path: Path) -> dict:
    """Run the driver (no sandbox: a plain subprocess) once for several oracles of one notebook."""
    from autograde.grpo_grader.oracle_job import DRIVER, job_cells

    release = nbformat.read(ROOT / "notebooks" / notebook / f"{notebook}.ipynb", as_version=4)
    sub = nbformat.reads(nbformat.writes(release), as_version=4)
    for cell in sub.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    rebuilt, _ = rebuild_metadata(sub, release)
    oracles = [oracle_lib.load_oracle(n) for n in oracle_names]
    cases = {o.assignment: o.cases("test-seed-" + notebook) for o in oracles}
    for name, group in cases.items():
        for case in group:
            case.id = f"{name}:{case.id}"
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(DRIVER, job / "driver.py")
    cells = job_cells(release, rebuilt, oracles[0], load_settings().demo_cells.get(notebook, ()))
    (job / "job.json").write_text(
        json.dumps({"cells": cells, "cases": [c.wire() for g in cases.values() for c in g], "cell_timeout": 120})
    )
    env = {**pipeline_env(), "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, str(job / "driver.py"), str(job)],
        cwd=tmp_path,
        env=env,
        timeout=600,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    results, _, _ = judging.read_results(job / "results.jsonl")
    return {o.assignment: judging.verdicts(o, cases[o.assignment], results, "not run") for o in oracles}


@pytest.mark.slow
@pytest.mark.parametrize("lesson", ["nb03a_cispo_trace_lab", "nb03b_loss_family_trl"])
def test_lesson3_oracles_accept_the_current_solution(lesson, tmp_path):
    """The nb03a/nb03b oracles on their split notebooks without the pipeline (one driver run each): the worked
    answers pass every test cell (the sample class checks every lesson end to end, in the sandbox)."""
    answers = sample_class.worked_answers(lesson)
    verdicts = _driver_verdicts([lesson], lesson, answers, tmp_path)
    failed = {f"{a}/{gid}": v.message for a, group in verdicts.items() for gid, v in group.items() if not v.passed}
    assert not failed, failed


def _reads_and_binds(source: str) -> tuple[set[str], set[str]]:
    """(global names a code cell reads that it does not bind itself, names it binds at top level), magics
    turned into Python first; a read inside a function or comprehension counts where it is an implicit global."""
    import symtable

    from IPython.core.inputtransformer2 import TransformerManager

    top = symtable.symtable(TransformerManager().transform_cell(source), "<cell>", "exec")
    binds = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    reads = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    scopes = list(top.get_children())
    while scopes:
        scope = scopes.pop()
        reads |= {s.get_name() for s in scope.get_symbols() if s.is_global() and s.is_referenced()}
        scopes.extend(scope.get_children())
    return reads - binds, binds


def _reads_of_skipped_names(cells: list, skipped: set[int], spread: bool = False) -> list[str]:
    """Where a cell that still runs reads a name whose latest definition, in notebook order, is a skipped cell.
    ``spread``: a setup cell that reads one may fail (the driver records it and goes on), so its names are as
    unreliable as a skipped cell's; only what an answer cell reads is then reported."""
    provider: dict[str, int] = {}
    unreliable = set(skipped)
    found = []
    for index, cell in enumerate(cells):
        reads, binds = _reads_and_binds(cell.source)
        if index not in skipped:
            hits = sorted(name for name in reads if provider.get(name) in unreliable)
            if spread and hits and not cell.metadata.get("nbgrader", {}).get("solution"):
                unreliable.add(index)
            else:
                found += [f"cell {index} reads {name!r} from left-out cell {provider[name]}" for name in hits]
        provider.update(dict.fromkeys(binds, index))
    return found


@pytest.mark.parametrize("lesson", ASSIGNMENTS)
def test_cells_left_out_of_grading_define_nothing_that_runs_later(lesson):
    """The lesson's demonstration cells (``SafeExecute.demo_cells``: neither the grading kernel nor the oracle's
    driver runs them) define no name that a later cell of the grading kernel reads (tests included), so skipping
    them adds no error to the graded notebook; with the cells only the driver leaves out (the oracle's
    ``SKIP_SETUP``) they define nothing an answer cell reads, even through a setup cell that then fails (a
    learner's function finds every global it would find in the learner's own run); every marker names a cell."""
    from autograde.grpo_grader.oracle import load_oracle
    from tools.chain.notebooks import build_notebook

    code = [c for c in build_notebook(lesson).cells if c.cell_type == "code"]  # the source: solutions and tests
    markers = load_settings().demo_cells.get(lesson, [])
    oracle = load_oracle(lesson)
    demo = {i for i, c in enumerate(code) if is_demo_cell(c, markers)}
    for marker in markers:
        assert any(is_demo_cell(c, [marker]) for c in code), f"{lesson}: demo marker {marker!r} names no setup cell"
    assert not _reads_of_skipped_names(code, demo), (lesson, "kernel", _reads_of_skipped_names(code, demo))

    def driver_skips(cell) -> bool:
        meta = cell.metadata.get("nbgrader", {})
        return not meta.get("solution") and not meta.get("grade") and oracle.skip_setup(meta.get("grade_id"))

    for marker in getattr(oracle.module, "SKIP_SETUP", ()):  # each names a locked setup cell by grade_id
        assert any(
            c.metadata.get("nbgrader", {}).get("grade_id") == marker
            and driver_skips(c)
            and c.metadata["nbgrader"].get("locked")
            for c in code
        ), marker
    for marker in markers:
        assert any(is_demo_cell(c, [marker]) and c.metadata["nbgrader"].get("locked") for c in code), marker
    graded = [
        c for c in code if not c.metadata.get("nbgrader", {}).get("grade") or c.metadata["nbgrader"].get("solution")
    ]  # the driver runs no test cell
    left_out = {i for i, c in enumerate(graded) if is_demo_cell(c, markers) or driver_skips(c)}
    assert not _reads_of_skipped_names(graded, left_out, spread=True), (
        lesson,
        "driver",
        _reads_of_skipped_names(graded, left_out, spread=True),
    )


def test_submission_metadata_is_rebuilt_from_the_release():
    """Duplicated, renamed, injected and edited nbgrader metadata, another kernelspec and nbformat 3 give the
    release's metadata back; deep nesting is invalid, not an error."""
    release = nbformat.read(ROOT / "notebooks" / ASSIGNMENTS[0] / f"{ASSIGNMENTS[0]}.ipynb", as_version=4)

    def meta(nb):
        return [
            (c.cell_type, c.metadata.get("nbgrader", {}).get("grade_id"), c.metadata.get("nbgrader", {}).get("points"))
            for c in nb.cells
            if c.metadata.get("nbgrader")
        ]

    for learner in ("m1_edited_metadata", "m2_nbformat3"):
        for folder in (sample_class.SUBMITTED / learner).iterdir():
            nb, problem = read_notebook(next(folder.glob("*.ipynb")).read_text(encoding="utf-8"))
            assert problem is None, problem
            release_nb = nbformat.read(ROOT / "notebooks" / folder.name / f"{folder.name}.ipynb", as_version=4)
            rebuilt, notes = rebuild_metadata(nb, release_nb)
            assert meta(rebuilt) == meta(release_nb), learner
            assert rebuilt.metadata["kernelspec"] == release_nb.metadata["kernelspec"]
            if learner == "m1_edited_metadata":
                assert any("按位置找回" in n for n in notes) and any("bonus_points" in n for n in notes), notes
    deep = next((sample_class.SUBMITTED / "m3_deeply_nested_json").glob("*/*.ipynb")).read_text(encoding="utf-8")
    assert read_notebook(deep)[0] is None and "嵌套" in read_notebook(deep)[1]
    assert release  # the release itself reads back unchanged
    assert meta(rebuild_metadata(release, release)[0]) == meta(release)


def test_commands_that_grade_nothing_import_no_torch():
    """The pipeline imports torch (and the oracles) only when it grades a notebook: `feedback`, `grades`,
    `merge-shards` and a run with nothing new start without it (each pipeline process saved ~3 s of CPU)."""
    code = "import sys, autograde.pipeline; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"importing autograde.pipeline imported {done.stdout.strip()}"
    assert "nb01_group_advantages" in oracle_assignments()  # listing the graded lessons imports no torch either


def test_empty_or_missing_submissions_say_where_they_go(tmp_path):
    """`make autograde` without submissions says so and prints the expected layout (no gradebook needed)."""
    from autograde.grpo_grader.course import GradingPipeline
    from autograde.pipeline import SUBMITTED_LAYOUT, _no_submissions

    settings = GradingPipeline(course=tmp_path)
    assert _no_submissions(settings, {"nb01_group_advantages": {}})
    (tmp_path / "submitted").mkdir()
    assert _no_submissions(settings, {"nb01_group_advantages": {}})
    assert "<学号>/<作业名>/<作业名>.ipynb" in SUBMITTED_LAYOUT


def test_prepare_builds_what_the_grading_kernels_load():
    """`python -m autograde.pipeline prepare` (what `make setup` runs) leaves every checkpoint of PREPARE on disk."""
    from autograde.grpo_grader.course import PREPARE

    done = run_pipeline("prepare", timeout=900)
    assert done.returncode == 0 and "ready" in done.stdout, done.stdout[-2000:]
    for name in PREPARE:
        assert (ROOT / name / "config.json").is_file(), f"{name} was not built"


def test_the_compiled_metadata_check_decides_as_nbgraders_own():
    """CheckCellMetadataOnce (nbgrader's schema compiled once) accepts and rejects exactly what nbgrader's
    CheckCellMetadata does, with the same error and the same underlying reason: a released lesson, and cells whose
    nbgrader metadata is broken by type, by a missing key, by an empty id (nbgrader's checks after the schema's), or
    by an old or a new schema version. The course's autograde steps use it in place of nbgrader's."""
    import copy
    import logging

    from nbgrader.preprocessors import CheckCellMetadata
    from traitlets.config.loader import PyFileConfigLoader

    from autograde.grpo_grader.preprocessors import CheckCellMetadataOnce

    released = nbformat.read(ROOT / "notebooks" / ASSIGNMENTS[0] / f"{ASSIGNMENTS[0]}.ipynb", as_version=4)
    graded = next(i for i, c in enumerate(released.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    breaks = {
        "points as text": lambda m: m.update(points="three"),
        "no grade_id": lambda m: m.pop("grade_id"),
        "locked as text": lambda m: m.update(locked="yes"),
        "grade_id as a number": lambda m: m.update(grade_id=7),
        "empty grade_id": lambda m: m.update(grade_id=""),
        "no points": lambda m: m.pop("points"),
        "schema too old": lambda m: m.update(schema_version=1),
        "schema too new": lambda m: m.update(schema_version=99),
    }
    variants = {"released lesson": released}
    for name, damage in breaks.items():
        nb = copy.deepcopy(released)
        damage(nb.cells[graded].metadata["nbgrader"])
        variants[name] = nb

    def outcome(preprocessor, nb):
        preprocessor.log = logging.getLogger("test-metadata-check")
        preprocessor.log.disabled = True
        try:
            preprocessor.preprocess(copy.deepcopy(nb), {})
        except Exception as error:  # noqa: BLE001 - the comparison is the point
            cause = error.__context__
            return (type(error).__name__, str(error), type(cause).__name__, str(cause).splitlines()[0])
        return "accepted"

    decided = {
        name: (outcome(CheckCellMetadata(), nb), outcome(CheckCellMetadataOnce(), nb)) for name, nb in variants.items()
    }
    assert all(ours == theirs for theirs, ours in decided.values()), decided
    assert decided["released lesson"][1] == "accepted"
    assert all(decided[name][1] != "accepted" for name in breaks), decided  # the check can fail: each break is caught

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT / "autograde")).load_config()
    for step in ("sanitize_preprocessors", "autograde_preprocessors"):
        names = list(config.Autograde[step])
        assert "autograde.grpo_grader.preprocessors.CheckCellMetadataOnce" in names, step
        assert "nbgrader.preprocessors.CheckCellMetadata" not in names, step
