"""Lesson 3, split into 3A (``nb03a_cispo_trace_lab``: CISPO, the trace lab, the check questions) and 3B
(``nb03b_loss_family_trl``: the loss family, GSPO, the TRL conformance).

For each lesson: the solution runs green (3B: its TRL conformance section passes for every case), an independently
written correct implementation passes every visible and hidden test, and common wrong implementations are caught by
the hidden tests alone. The wrong variants are grouped so that each lesson needs two executions for all of them
(variants in different cells do not interfere). Notebooks are built in memory and executed through the session
fixture ``notebook_runs`` with the course root as working directory; nothing is written into the repository.
"""

from __future__ import annotations

import copy
import json
import textwrap

import pytest
import warm_kernel  # tests/warm_kernel.py

import tools.chain.notebooks as chain
from autograde.sample_class import build as sample_class

NB3A = "nb03a_cispo_trace_lab"
NB3B = "nb03b_loss_family_trl"
TEST_CELLS = {
    NB3A: [
        "test_grpo_policy_loss",
        "test_cispo_policy_loss",
        "test_gradient_answers",
        "test_q2",
        "test_q3",
        "test_q5",
        "test_q8",
    ],
    NB3B: ["test_reduce_per_token_loss", "test_importance_ratio", "test_per_token_policy_loss", "test_q9"],
}
POINTS = {  # grade_id -> points, unchanged by the split
    NB3A: {
        "test_grpo_policy_loss": 4,
        "test_cispo_policy_loss": 4,
        "test_gradient_answers": 2,
        "q1_no_critic": 2,
        "test_q2": 1,
        "test_q3": 1,
        "q4_broadcast": 2,
        "test_q5": 1,
        "q6_ppo_similarity": 2,
        "q7_cispo_detach": 2,
        "test_q8": 1,
    },
    NB3B: {"test_reduce_per_token_loss": 4, "test_importance_ratio": 3, "test_per_token_policy_loss": 4, "test_q9": 1},
}

# ----------------------------------------------------------------------------- independent implementations
# The independent implementations (written from the notebooks' stated contracts, not copied from the solution
# cells) have one home: the sample class's independent learner, whose graded submission uses the same sources.
_S02 = sample_class.load_cases()["s02_independent_answers"]
INDEPENDENT = {NB3A: dict(_S02[NB3A]["cells"]), NB3B: dict(_S02[NB3B]["cells"])}


def _wrong(assignment, grade_id, old, new):
    source = INDEPENDENT[assignment][grade_id]
    assert old in source, f"{grade_id}: the wrong variant does not apply"
    return {grade_id: source.replace(old, new)}


# ----------------------------------------------------------------------------- wrong implementations
# (label, assignment, answers, test cells whose hidden part must catch it); two executions per lesson
WRONG_RUNS = {
    NB3A: [
        [
            (
                "grpo reduced as a token mean",
                _wrong(
                    NB3A,
                    "grpo_policy_loss",
                    "return -((objective * m).sum(-1) / counts).sum() / m.shape[0]",
                    "return -(objective * m).sum() / m.sum().clamp(min=1)",
                ),
                ["test_grpo_policy_loss"],
            ),
            (
                "CISPO weight not detached",
                _wrong(NB3A, "cispo_policy_loss", "    with torch.no_grad():\n        w = ", "    w = "),
                ["test_cispo_policy_loss"],
            ),
        ],
        [
            (
                "GRPO: exp before the mask (multiply by the mask afterwards)",
                _wrong(
                    NB3A,
                    "grpo_policy_loss",
                    "log_r = (policy_logps - old_logps).masked_fill(~keep, 0.0)",
                    "log_r = policy_logps - old_logps",
                ),
                ["test_grpo_policy_loss"],
            ),
            (
                "CISPO cap 1 + epsilon_high",
                _wrong(NB3A, "cispo_policy_loss", ".clamp(max=epsilon_high)", ".clamp(max=1 + epsilon_high)"),
                ["test_cispo_policy_loss"],
            ),
        ],
    ],
    NB3B: [
        [
            (
                "grpo reduced as a token mean",
                _wrong(
                    NB3B,
                    "reduce_per_token_loss",
                    "return (v.sum(1) / m.sum(1).clamp(min=1)).mean()",
                    "return total / m.sum().clamp(min=1)",
                ),
                ["test_reduce_per_token_loss"],
            ),
            (
                "CISPO weight not detached",
                _wrong(
                    NB3B,
                    "per_token_policy_loss",
                    "torch.clamp(r, max=epsilon_high).detach()",
                    "torch.clamp(r, max=epsilon_high)",
                ),
                ["test_per_token_policy_loss"],
            ),
        ],
        [
            (
                "token ratio: exp before the mask",
                _wrong(
                    NB3B,
                    "importance_ratio",
                    'if importance_sampling_level == "token":\n        return log_r.exp()',
                    'if importance_sampling_level == "token":\n        return (policy_logps - old_logps).exp()',
                ),
                ["test_importance_ratio"],
            ),
            (
                "CISPO cap 1 + epsilon_high",
                _wrong(
                    NB3B,
                    "per_token_policy_loss",
                    "torch.clamp(r, max=epsilon_high)",
                    "torch.clamp(r, max=1 + epsilon_high)",
                ),
                ["test_per_token_policy_loss"],
            ),
        ],
    ],
}


def _answers(mapping):
    return {k: textwrap.dedent(v).strip() + "\n" for k, v in mapping.items()}


def _without_trl_section(nb):
    """Drop the cells from the TRL section on (the hidden-test runs do not need it)."""
    out = copy.deepcopy(nb)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    if "trl_conformance_code" in ids:
        out.cells = out.cells[: ids.index("trl_conformance_code")]
    return out


def _cell_stdout(nb, grade_id):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return "".join(
                o.get("text", "")
                for o in cell.get("outputs", [])
                if o.get("output_type") == "stream" and o.get("name") == "stdout"
            )
    raise KeyError(grade_id)


def _trl_result(nb):
    lines = [l for l in _cell_stdout(nb, "trl_conformance_run").splitlines() if l.startswith("trl_conformance = ")]
    assert len(lines) == 1, "the TRL cell must print exactly one `trl_conformance = {json}` line"
    return json.loads(lines[0][len("trl_conformance = ") :])


def _assert_trl_passed(result):
    assert result["status"] == "passed", result.get("failed", result)
    assert result["trl_version"] == "1.16.0" and result["written_for"] == "1.16.0"
    for section in ("loss", "extended", "advantages"):
        for name, entry in result[section].items():
            assert entry.get("passed", True), (section, name, entry)
    assert result["loss"]["cispo"]["absolute_cap_confirmed"] is True
    assert result["use_bias_correction_kl_default"] is True and result["bias_correction_kl_effect"]["changes_loss"]


# ----------------------------------------------------------------------------- structure
def test_grade_ids_and_points_survive_the_split():
    for assignment, points in POINTS.items():
        nb = chain.build_notebook(assignment)
        found = {
            c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"].get("points")
            for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")
        }
        assert found == points, assignment
    ids_b = {c.metadata.get("nbgrader", {}).get("grade_id") for c in chain.build_notebook(NB3B).cells}
    assert {
        "length_bias_example",
        "accumulation_example",
        "family_demo",
        "clip_higher_example",
        "trl_conformance_code",
        "trl_conformance_run",
    } <= ids_b
    ids_a = {c.metadata.get("nbgrader", {}).get("grade_id") for c in chain.build_notebook(NB3A).cells}
    assert {"gradient_figure", "trace_lab", "shared_helpers"} <= ids_a


def test_hidden_tests_are_the_oracles_and_no_copied_helpers():
    """Both halves' hidden tests are calls of their oracle's cases (which draw the batches with the grader's
    ``_policy_losses.batch``; tests/test_one_home.py checks every lesson), neither defines a batch helper of its
    own, and neither copies an earlier lesson's graded function."""
    for assignment in (NB3A, NB3B):
        source = (chain.SOLUTIONS / f"{assignment}.py").read_text(encoding="utf-8")
        assert "def _h_case(" not in source, assignment
        assert source.count(f'run_in_kernel("{assignment}", ') == len(TEST_CELLS[assignment]), assignment
        assert "def token_kl_penalty" not in source and "def group_relative_advantages" not in source, assignment


# ----------------------------------------------------------------------------- executions
@pytest.mark.slow
def test_solution_a_runs_green(notebook_runs):
    done = notebook_runs.solution(NB3A)
    assert chain.cell_errors(done) == []
    assert "秒" in _cell_stdout(done, "runtime_report")  # the measured runtime is printed, not promised


@pytest.mark.slow
def test_solution_b_runs_green_and_trl_conformance_passes(notebook_runs):
    pytest.importorskip("trl")
    done = notebook_runs.solution(NB3B)
    assert chain.cell_errors(done) == []
    _assert_trl_passed(_trl_result(done))
    assert "1.40 倍" in _cell_stdout(done, "clip_higher_example")  # (0.0128 - 0.01) / (0.012 - 0.01), computed


def _warm(notebook_runs, assignment):
    """One execution per lesson (tests/warm_kernel.py): the independent answers with every visible and hidden test
    (the TRL section left out: test_independent_implementation_passes_the_trl_check runs it in process), then each
    wrong run in the same kernel, its test cells cut to their hidden tests, then the correct answers again.
    Returns (executed notebook, base notebook, {grade_id: result})."""
    base = warm_kernel.without_demo_cells(
        chain.substitute_answers(
            _without_trl_section(chain.build_notebook(assignment)), _answers(INDEPENDENT[assignment])
        ),
        assignment,
    )
    variants = []
    for run, wrong_run in enumerate(WRONG_RUNS[assignment]):
        answers = {}
        for _, wrong, _ in wrong_run:
            answers.update(_answers(wrong))
        variants.append(
            warm_kernel.Variant(tag=f"run{run}", answers=answers, last=TEST_CELLS[assignment], hidden_only=True)
        )
    done = notebook_runs.run(warm_kernel.warm_notebook(base, variants), cwd=chain.ROOT)
    return done, base, chain.cell_results(done)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", [NB3A, NB3B])
def test_independent_implementation_passes_every_visible_and_hidden_test(assignment, notebook_runs):
    if assignment == NB3B:
        pytest.importorskip("trl")
    done, base, results = _warm(notebook_runs, assignment)
    assert {gid: results[gid] for gid in TEST_CELLS[assignment]} == {gid: None for gid in TEST_CELLS[assignment]}
    assert chain.cell_errors(warm_kernel.base_part(done, base)) == []
    # the guard of the warm kernel: with the correct answers put back, the hidden tests pass again
    restored = {
        gid: r for gid, r in results.items() if "@restore-" in gid and gid.split("@")[0] in TEST_CELLS[assignment]
    }
    for run in range(len(WRONG_RUNS[assignment])):
        assert any(gid.endswith(f"@restore-run{run}") for gid in restored), f"run {run} was not restored"
    assert all(r is None for r in restored.values()), restored


_FAMILY = """
def grpo_family_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                     epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None,
                     max_completion_length=None, num_items_in_batch=None):
    per_token = per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type, epsilon_low,
                                      epsilon_high, importance_sampling_level, beta, ref_logps)
    return reduce_per_token_loss(per_token, completion_mask, loss_type, max_completion_length=max_completion_length,
                                 num_items_in_batch=num_items_in_batch)
"""


def test_independent_implementation_passes_the_trl_check():
    """The conformance accepts any correct implementation, not just the solution: the independent answers, in process."""
    pytest.importorskip("trl")
    import torch

    from tools import trl_conformance
    from tools.lessons import nb01_group_advantages as nb01
    from tools.lessons import nb03a_cispo_trace_lab as nb03a
    from tools.lessons import nb03b_loss_family_trl as nb03b

    namespace = {
        "torch": torch,
        "check_policy_inputs": nb03a.check_policy_inputs,
        "token_kl_penalty": nb03a.token_kl_penalty,
    }
    for assignment in (NB3A, NB3B):
        for grade_id, source in INDEPENDENT[assignment].items():
            if grade_id.endswith("_loss") or grade_id == "importance_ratio":
                exec(textwrap.dedent(source), namespace)
    exec(_FAMILY, namespace)
    result = trl_conformance.check_trl_conformance(
        grpo_family_loss=namespace["grpo_family_loss"],
        grpo_policy_loss=namespace["grpo_policy_loss"],
        cispo_policy_loss=namespace["cispo_policy_loss"],
        importance_ratio=namespace["importance_ratio"],
        group_relative_advantages=nb01.group_relative_advantages,
        extended_loss=nb03b.extended_loss,
        advantages=nb03b.trl_layout_advantages,
    )
    _assert_trl_passed(result)


@pytest.mark.slow
@pytest.mark.parametrize("assignment, run", [(NB3A, 0), (NB3A, 1), (NB3B, 0), (NB3B, 1)])
def test_wrong_implementations_fail_the_hidden_tests(assignment, run, notebook_runs):
    variants = WRONG_RUNS[assignment][run]
    _, _, all_results = _warm(notebook_runs, assignment)
    results = {gid.split("@")[0]: r for gid, r in all_results.items() if gid.endswith(f"@run{run}")}
    caught_by = [gid for _, _, cells in variants for gid in cells]
    for label, _, cells in variants:
        for grade_id in cells:
            assert results[grade_id] is not None and results[grade_id].startswith("AssertionError"), (
                f"{label}: hidden tests of {grade_id} did not catch it ({results[grade_id]})"
            )
    # test cells before the run's first answer cell ran with the correct answers, as in the base part
    results = {gid: all_results[gid] for gid in TEST_CELLS[assignment]} | results
    untouched = [gid for gid in TEST_CELLS[assignment] if gid not in caught_by]
    assert [gid for gid in untouched if results[gid] is not None] == [], f"run {run}: unrelated tests failed {results}"


# ----------------------------------------------------------------------------- grading
def test_grading_kernel_sees_the_earlier_lessons_modules_only(tmp_path):
    """Lesson 3A imports nb01/nb02's saved functions and 3B also 3A's: the grading kernel of a lesson gets the
    tools/lessons/ modules of the lessons before it, never its own (its answers) nor later ones."""
    from types import SimpleNamespace

    from autograde.grpo_grader import slots

    assert slots.visible_lessons(NB3A) == ["nb01_group_advantages", "nb02_grpo_objective"]
    assert slots.visible_lessons(NB3B) == ["nb01_group_advantages", "nb02_grpo_objective", NB3A]
    assert slots.visible_lessons("nb01_group_advantages") == []
    kernel = tmp_path / "kernel"
    (kernel / "tools" / "lessons").mkdir(parents=True)
    (kernel / "tools" / "lessons" / f"{NB3B}.py").write_text("leaked = True\n")  # e.g. left from another lesson
    fake_slot = SimpleNamespace(kernel=kernel)
    assert slots.Slot.stage_lessons(fake_slot, NB3B) == ["nb01_group_advantages", "nb02_grpo_objective", NB3A]
    staged = sorted(p.name for p in (kernel / "tools" / "lessons").iterdir())
    assert staged == ["__init__.py", "nb01_group_advantages.py", "nb02_grpo_objective.py", f"{NB3A}.py"]
    slots.Slot.stage_lessons(fake_slot, NB3A)
    assert sorted(p.name for p in (kernel / "tools" / "lessons").iterdir()) == [
        "__init__.py",
        "nb01_group_advantages.py",
        "nb02_grpo_objective.py",
    ]
