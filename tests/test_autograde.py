"""The instructor pipeline: submissions read without trust, hidden tests kept from kernels, the kernel sandbox, the
commands. The oracles are tests/test_autograde_oracles.py, the feedback pages tests/test_autograde_feedback.py, the
graded sample class tests/test_autograde_class.py, the slot's zygotes (bubblewrap as root) tests/test_autograde_slot.py
(helpers shared by them: tests/autograde_helpers.py).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest
from autograde_helpers import ASSIGNMENTS, ROOT, pipeline_env, run_pipeline, run_probe  # tests/autograde_helpers.py

from autograde.grpo_grader.course import load_settings
from autograde.grpo_grader.learner_grading import check_notebook_file, pick_files
from autograde.grpo_grader.outcomes import summarise
from autograde.grpo_grader.preprocessors import SafeExecute, is_demo_cell
from autograde.grpo_grader.review import compare_with_release
from autograde.grpo_grader.submission import read_notebook, rebuild_metadata
from autograde.sample_class import build as sample_class


# ----------------------------------------------------------------------------- fast checks
def test_sample_class_is_up_to_date_and_complete():
    assert sample_class.check() == [], "run `python -m autograde.pipeline sample --rebuild`"
    expected = sample_class.expected()
    cases = sample_class.load_cases()
    skipped = sample_class.expected_skipped()
    assert sorted([*expected, *skipped]) == sorted(cases), "expected.json must name exactly the learners of cases/"
    for learner, row in skipped.items():  # a skipped folder: one row, every lesson's file outside its folder
        assert row["status"] == "skipped" and row["reason"], learner
        assert all(spec.get("layout") == "flat" for spec in cases[learner].values()), learner
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
    five seven-lesson learners, then f02 (three), then s06 (two, both waiting out a time limit) - not s06 twentieth,
    whose waits once ended the class run on one busy slot while the other stood idle."""
    from autograde.pipeline import grading_order

    todo = [
        (learner.name, sorted(p.name for p in learner.iterdir()))
        for learner in sorted(sample_class.SUBMITTED.iterdir())
    ]
    order = [learner for learner, _ in grading_order(todo)]
    assert order[:7] == [
        "f07_debug_prints_of_setup_names",
        "s01_worked_answers",
        "s02_independent_answers",
        "s03_untouched",
        "s04_bug_only_hidden_tests_catch",
        "f02_uses_the_notebooks_own_names",
        "s06_infinite_loops",
    ], order
    assert sorted(order) == [learner for learner, _ in todo] and order[7:] == sorted(order[7:])
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


def test_hidden_tests_of_oracle_graded_cells_never_reach_the_kernel():
    """StripHiddenTests (the pipeline's slots): an oracle-graded test cell runs without its hidden region and starts
    with the case runner's call of that test (its cases run first, whatever the visible part does), with the extra
    seconds for its cases; other cells keep theirs; empty by default, so a plain `nbgrader autograde` keeps nbgrader's
    hidden tests. The slot names the oracle's test cells on nbgrader's command line (``Slot.nbgrader_options``), one
    option per cell."""
    from traitlets.config import Application

    from autograde.grpo_grader.case_runner import ENTRY
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
    options = [o for o in Slot.nbgrader_options(slot, tests, case_seconds=45) if "StripHidden" in o]
    assert len(options) == len(tests) + 1 > 2
    nb, resources = run(options)
    assert "f(5)" not in nb.cells[0].source and "assert f(1) == 2" in nb.cells[0].source
    assert nb.cells[0].source.splitlines()[1] == f"{ENTRY}('test_compute_group_advantages_hidden', globals())"
    assert ENTRY not in nb.cells[1].source + nb.cells[2].source
    assert "f(5)" in nb.cells[1].source and "f(5)" in nb.cells[2].source
    assert resources["grading"]["hidden_stripped"] == ["test_compute_group_advantages_hidden"]
    assert resources["grading"]["case_cells"] == ["test_compute_group_advantages_hidden"]
    assert resources["grading"]["case_seconds"] == 45
    nb, _ = run([])
    assert all("f(5)" in c.source and ENTRY not in c.source for c in nb.cells)


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


@pytest.mark.slow
def test_sandbox_hides_the_course_sources():
    """The kernel sandbox (`pipeline.py probe --json`): solutions, gradebook, sources, .git unreadable from a kernel; it
    finds what grading imports inside it (``--imports find``, a grading run's own pre-flight: importing it all costs
    ~10-30 s here, done by the integration tests, tests/test_probe.py)."""
    result, _done = run_probe("--imports", "find", seed="probe-seed-" + secrets.token_hex(4), timeout=300)
    assert result["problems"] == [] and result["ok"], result["problems"]
    assert not result["seed_visible"], "the grading seed reached a sandboxed process's environment"
    assert result["readable"] == [], (
        "a grading kernel can read answers or hidden tests: bubblewrap's view must hold only its allow-list "
        "(autograde/README.md)"
    )
    kernel = result["kernel"]
    assert kernel["readable"] and kernel["rlimit_as"] > 0
    assert kernel["import_mode"] == "find" and set(kernel["imports"].values()) == {"ok"}, kernel["imports"]
    assert {"torch", "ipykernel", "nbformat"} <= set(kernel["imports"])
    assert result["ipc_own"], "the sandbox and the grader must not share an IPC namespace"
    assert not kernel["network"]
    assert result["sandbox"] == "bwrap", "auto picks bubblewrap"
    if os.geteuid() == 0:
        assert kernel["zygote"], "as root the probe checks a kernel zygote's job"


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


def _reads_of_skipped_names(cells: list, skipped: set[int]) -> list[str]:
    """Where a cell that still runs reads a name whose latest definition, in notebook order, is a skipped cell."""
    provider: dict[str, int] = {}
    found = []
    for index, cell in enumerate(cells):
        reads, binds = _reads_and_binds(cell.source)
        if index not in skipped:
            hits = sorted(name for name in reads if provider.get(name) in skipped)
            found += [f"cell {index} reads {name!r} from left-out cell {provider[name]}" for name in hits]
        provider.update(dict.fromkeys(binds, index))
    return found


@pytest.mark.parametrize("lesson", ASSIGNMENTS)
def test_cells_left_out_of_grading_define_nothing_that_runs_later(lesson):
    """One execution per notebook: the grading kernel runs every cell but the lesson's demonstrations
    (``SafeExecute.demo_cells``), and the oracle's cases run in it at each test cell, so an answer finds every name a
    released cell defines - setup cells included (nb07's ``tokenizer``, nb03a's ``trace``, nb04's
    ``code_records``: sample learner ``f07``). The demonstrations define no name that a later cell reads (answers and
    tests included), so skipping them changes nothing; every marker names a locked setup cell. The check finds a read
    of a demonstration's name (a mutation of the lesson)."""
    from tools.chain.notebooks import build_notebook

    code = [c for c in build_notebook(lesson).cells if c.cell_type == "code"]  # the source: solutions and tests
    markers = load_settings().demo_cells.get(lesson, [])
    demo = {i for i, c in enumerate(code) if is_demo_cell(c, markers)}
    for marker in markers:
        assert any(is_demo_cell(c, [marker]) and c.metadata["nbgrader"].get("locked") for c in code), marker
    assert not _reads_of_skipped_names(code, demo), (lesson, _reads_of_skipped_names(code, demo))
    if demo:  # the check can fail: a cell after a demonstration that reads what it binds
        first = min(demo)
        name = sorted(_reads_and_binds(code[first].source)[1])[0]
        mutated = [*code[: first + 1], nbformat.v4.new_code_cell(f"print({name})"), *code[first + 1 :]]
        assert _reads_of_skipped_names(mutated, demo), (lesson, name)


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
    from autograde.grpo_grader.oracles import oracle_assignments

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
