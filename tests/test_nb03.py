"""Notebook 3 (CISPO and the GRPO loss family): the solution runs green, the TRL conformance section passes for
every loss type, an independently written correct implementation passes every visible and hidden test, and
common wrong implementations are caught by the hidden tests alone.

Nothing is written into the repository: notebooks are built in memory and executed with the course root as
working directory; the TRL result is read from the executed cell's output.
"""
from __future__ import annotations

import copy
import json
import re
import sys
import textwrap

import pytest

import tools.chain.notebooks as chain

ASSIGNMENT = "nb03_cispo_loss_family"
LOSS_CASES = {"grpo", "grpo_clip_higher", "bnpo", "dr_grpo", "dapo", "cispo", "gspo_sequence", "dapo_two_micro_batches"}
TEST_CELLS = ["test_grpo_policy_loss", "test_cispo_policy_loss", "test_gradient_answers", "test_reduce_per_token_loss",
              "test_importance_ratio", "test_per_token_policy_loss", "test_q2", "test_q3", "test_q5", "test_q8", "test_q9"]
_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n(.*?)^[ \t]*### END HIDDEN TESTS[ \t]*$", re.M | re.S)

# ----------------------------------------------------------------------------- an independent implementation
# Written for this test from the notebook's stated contracts (not copied from the solution cells).
INDEPENDENT = {
    "grpo_policy_loss": '''
def grpo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon=0.2, beta=0.0, ref_logps=None):
    check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta, ref_logps)
    if epsilon < 0 or epsilon >= 1:
        raise ValueError("epsilon 越界")
    log_r = policy_logps - old_logps
    r = log_r.exp()
    a = advantages[:, None].to(r.dtype)
    unclipped = r * a
    clipped = r.clamp(min=1 - epsilon, max=1 + epsilon) * a
    objective = torch.where(unclipped < clipped, unclipped, clipped)
    if beta:
        d = ref_logps - policy_logps
        objective = objective - beta * (d.exp() - d - 1)
    m = completion_mask.float().to(r.dtype)
    counts = torch.maximum(m.sum(-1), torch.ones_like(m[:, 0]))
    return -((objective * m).sum(-1) / counts).sum() / m.shape[0]
''',
    "cispo_policy_loss": '''
def cispo_policy_loss(policy_logps, old_logps, advantages, completion_mask, epsilon_high=5.0, beta=0.0, ref_logps=None):
    check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta, ref_logps)
    if epsilon_high <= 0:
        raise ValueError("epsilon_high 必须为正")
    with torch.no_grad():
        w = (policy_logps - old_logps).exp().clamp(max=epsilon_high)
    objective = w * advantages[:, None] * policy_logps
    if beta:
        d = ref_logps - policy_logps
        objective = objective - beta * (d.exp() - d - 1)
    m = completion_mask.to(policy_logps.dtype)
    counts = m.sum(-1).clamp(min=1)
    return (-(objective * m).sum(-1) / counts).mean()
''',
    "gradient_answers": 'gradient_answers = {"a": (0, -1.5), "b": (0, 0.5), "c": (1.5, 1.5), "d": (-0.5, -0.5)}',
    "reduce_per_token_loss": '''
def reduce_per_token_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    if not torch.is_tensor(per_token_loss) or per_token_loss.ndim != 2:
        raise ValueError("per_token_loss 不是二维张量")
    if not torch.is_tensor(completion_mask) or tuple(completion_mask.shape) != tuple(per_token_loss.shape):
        raise ValueError("mask 形状不对")
    m = completion_mask.to(per_token_loss.dtype)
    total = (per_token_loss * m).sum()
    if loss_type == "grpo":
        return ((per_token_loss * m).sum(1) / m.sum(1).clamp(min=1)).mean()
    if loss_type == "bnpo":
        return total / m.sum().clamp(min=1)
    if loss_type == "dr_grpo":
        ok = isinstance(max_completion_length, int) and not isinstance(max_completion_length, bool)
        if not ok or max_completion_length < per_token_loss.shape[1]:
            raise ValueError("max_completion_length 不合法")
        return total / (per_token_loss.shape[0] * max_completion_length)
    if loss_type in ("dapo", "cispo"):
        if num_items_in_batch is None:
            raise ValueError("缺少 num_items_in_batch")
        n = num_items_in_batch.item() if torch.is_tensor(num_items_in_batch) else num_items_in_batch
        if n < 0:
            raise ValueError("num_items_in_batch 为负")
        return total / max(n, 1)
    raise ValueError(f"未知 loss_type {loss_type}")
''',
    "importance_ratio": '''
def importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level="token"):
    if policy_logps.ndim != 2 or old_logps.shape != policy_logps.shape or completion_mask.shape != policy_logps.shape:
        raise ValueError("形状不一致")
    if importance_sampling_level == "token":
        return (policy_logps - old_logps).exp()
    if importance_sampling_level != "sequence":
        raise ValueError("未知的 importance_sampling_level")
    m = completion_mask.to(policy_logps.dtype)
    mean = ((policy_logps - old_logps) * m).sum(1) / m.sum(1).clamp(min=1)
    return mean.exp().unsqueeze(1)
''',
    "per_token_policy_loss": '''
def per_token_policy_loss(policy_logps, old_logps, advantages, completion_mask, loss_type="grpo", epsilon_low=0.2,
                          epsilon_high=0.28, importance_sampling_level="token", beta=0.0, ref_logps=None):
    check_policy_inputs(policy_logps, old_logps, advantages, completion_mask, beta, ref_logps)
    if loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo"):
        raise ValueError("未知 loss_type")
    if not (0 <= epsilon_low < 1) or epsilon_high < 0 or (loss_type == "cispo" and epsilon_high == 0):
        raise ValueError("裁剪参数越界")
    r = importance_ratio(policy_logps, old_logps, completion_mask, importance_sampling_level)
    a = advantages.view(-1, 1)
    if loss_type == "cispo":
        out = -(torch.clamp(r, max=epsilon_high).detach() * a) * policy_logps
    else:
        c = torch.clamp(r, 1 - epsilon_low, 1 + epsilon_high)
        out = torch.maximum(-r * a, -c * a) + torch.zeros_like(policy_logps)
    if beta != 0:
        out = out + beta * token_kl_penalty(policy_logps, ref_logps)
    return out
''',
    "q2_answer": "q2_flat_index = 6",
    "q3_answer": 'q3_choice = "A"',
    "q5_answer": 'q5_choice = "B"',
    "q8_answer": 'q8_unchanged = set("abcdefh")',
    "q9_answer": 'q9_ratio = {"grpo": 3 / 30, "dapo": 1}',
}

# ----------------------------------------------------------------------------- wrong implementations
WRONG_GRPO_TOKEN_MEAN = {
    "grpo_policy_loss": INDEPENDENT["grpo_policy_loss"].replace(
        "return -((objective * m).sum(-1) / counts).sum() / m.shape[0]",
        "return -(objective * m).sum() / m.sum().clamp(min=1)"),
    "reduce_per_token_loss": INDEPENDENT["reduce_per_token_loss"].replace(
        "return ((per_token_loss * m).sum(1) / m.sum(1).clamp(min=1)).mean()",
        "return total / m.sum().clamp(min=1)"),
}
WRONG_CISPO_NOT_DETACHED = {
    "cispo_policy_loss": INDEPENDENT["cispo_policy_loss"].replace(
        "    with torch.no_grad():\n        w = ", "    w = "),
    "per_token_policy_loss": INDEPENDENT["per_token_policy_loss"].replace(
        "torch.clamp(r, max=epsilon_high).detach()", "torch.clamp(r, max=epsilon_high)"),
}
WRONG_CISPO_ONE_PLUS_EPS = {
    "cispo_policy_loss": INDEPENDENT["cispo_policy_loss"].replace(".clamp(max=epsilon_high)", ".clamp(max=1 + epsilon_high)"),
    "per_token_policy_loss": INDEPENDENT["per_token_policy_loss"].replace(
        "torch.clamp(r, max=epsilon_high)", "torch.clamp(r, max=1 + epsilon_high)"),
}


def _source_notebook():
    return chain.build_notebook(ASSIGNMENT)


def _without_trl_section(nb):
    """Drop the cells from the TRL section on (the hidden-test runs do not need it)."""
    out = copy.deepcopy(nb)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    out.cells = out.cells[: ids.index("trl_conformance_code")]
    return out


def _hidden_only(nb, grade_ids):
    """Replace each named test cell by its hidden part alone (plus the helper import the hidden code relies on)."""
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in grade_ids:
            hidden = _HIDDEN.search(cell.source)
            assert hidden, f"{cell.metadata['nbgrader']['grade_id']} has no hidden tests"
            cell.source = "from tools.grading import assert_close, expect_value_error\n" + hidden.group(1)
    return out


def _run(nb, notebook_runs):
    """(executed notebook, seconds), once per test run (shared through the ``notebook_runs`` fixture)."""
    return notebook_runs.run_timed(nb, chain.ROOT, timeout=300)


def _cell_stdout(nb, grade_id):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
                           and o.get("name") == "stdout")
    raise KeyError(grade_id)


def _trl_result(nb):
    lines = [l for l in _cell_stdout(nb, "trl_conformance_run").splitlines() if l.startswith("trl_conformance = ")]
    assert len(lines) == 1, "the TRL cell must print exactly one `trl_conformance = {json}` line"
    return json.loads(lines[0][len("trl_conformance = "):])


def _assert_trl_passed(result):
    assert result["status"] == "passed", result
    assert result["trl_version"] == "1.16.0" and result["written_for"] == "1.16.0"
    assert set(result["loss"]) == LOSS_CASES
    for name, entry in result["loss"].items():
        assert entry["passed"] and entry["abs_error"] <= 1e-6, (name, entry)
        if name != "dapo_two_micro_batches":
            assert entry["grad_max_abs_error"] <= 1e-6 and entry["clipped_tokens"] > 0, (name, entry)
    assert all(result["rewards"]["checks"].values()), result["rewards"]
    assert result["loss"]["cispo"]["absolute_cap_confirmed"] is True
    assert result["loss"]["cispo"]["one_plus_epsilon_high_abs_error"] > 1e-6
    assert result["use_bias_correction_kl_default"] is True and result["bias_correction_kl_effect"]["changes_loss"]
    dapo_reads = set(result["loss"]["dapo"]["trl_reads"])
    assert {"model.training", "args.delta", "args.steps_per_generation", "accelerator.num_processes",
            "inputs['num_items_in_batch']"} <= dapo_reads
    assert "inputs['num_items_in_batch']" not in result["loss"]["grpo"]["trl_reads"]


# ----------------------------------------------------------------------------- tests
@pytest.mark.slow
def test_solution_runs_green_and_trl_conformance_passes(notebook_runs):
    pytest.importorskip("trl")
    done, seconds = notebook_runs.solution_timed(ASSIGNMENT)  # the execution test_notebooks.py uses too
    assert chain.cell_errors(done) == []
    _assert_trl_passed(_trl_result(done))
    print(f"{ASSIGNMENT}: solution executed in {seconds:.1f} s (kernel start included)")


@pytest.mark.slow
def test_independent_implementation_passes_every_visible_and_hidden_test(notebook_runs):
    pytest.importorskip("trl")
    nb = chain.substitute_answers(_source_notebook(), {k: textwrap.dedent(v).strip() + "\n" for k, v in INDEPENDENT.items()})
    done, _ = _run(nb, notebook_runs)
    results = chain.cell_results(done)
    assert {gid: results[gid] for gid in TEST_CELLS} == {gid: None for gid in TEST_CELLS}
    assert chain.cell_errors(done) == []
    _assert_trl_passed(_trl_result(done))


@pytest.mark.slow
@pytest.mark.parametrize("label, answers, caught_by", [
    ("grpo reduced as a token mean", WRONG_GRPO_TOKEN_MEAN,
     ["test_grpo_policy_loss", "test_reduce_per_token_loss"]),
    ("CISPO weight not detached", WRONG_CISPO_NOT_DETACHED,
     ["test_cispo_policy_loss", "test_per_token_policy_loss"]),
    ("CISPO cap 1 + epsilon_high", WRONG_CISPO_ONE_PLUS_EPS,
     ["test_cispo_policy_loss", "test_per_token_policy_loss"]),
])
def test_wrong_implementations_fail_the_hidden_tests(label, answers, caught_by, notebook_runs):
    base = _without_trl_section(_source_notebook())
    base = chain.substitute_answers(base, {k: textwrap.dedent(v).strip() + "\n" for k, v in INDEPENDENT.items()})
    wrong = chain.substitute_answers(base, {k: textwrap.dedent(v).strip() + "\n" for k, v in answers.items()})
    assert wrong.cells != base.cells, f"{label}: the wrong variant did not change any answer"
    done, _ = _run(_hidden_only(wrong, caught_by), notebook_runs)
    results = chain.cell_results(done)
    for grade_id in caught_by:
        assert results[grade_id] is not None and results[grade_id].startswith("AssertionError"), \
            f"{label}: hidden tests of {grade_id} did not catch it ({results[grade_id]})"
    untouched = [gid for gid in TEST_CELLS if gid not in caught_by]
    assert [gid for gid in untouched if results[gid] is not None] == [], f"{label}: unrelated tests failed"


def _notebook_namespace():
    """Run the definition cells of the solution in-process (helpers, answers, the TRL check code)."""
    wanted = ["shared_helpers", "grpo_policy_loss", "cispo_policy_loss", "reduce_per_token_loss", "importance_ratio",
              "per_token_policy_loss", "family_demo", "trl_conformance_code"]
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in _source_notebook().cells}
    import tools.grading  # noqa: F401  (as the bootstrap cell does)

    namespace = {"__name__": "nb03_in_process"}
    for grade_id in wanted:
        exec(compile(cells[grade_id], f"<{grade_id}>", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_trl_check_reports_skipped_without_trl(monkeypatch):
    namespace = _notebook_namespace()
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` now raises ImportError
    result = namespace["check_trl_conformance"]()
    assert result["status"] == "skipped" and "PT-CPU" in result["reason"] and result["written_for"] == "1.16.0"


@pytest.mark.slow
def test_trl_check_names_the_attribute_when_the_private_api_moved(monkeypatch):
    trl = pytest.importorskip("trl")
    namespace = _notebook_namespace()
    original = trl.GRPOTrainer._compute_loss

    def renamed_attribute(self, model, inputs):
        _ = self.clip_epsilon_low  # an attribute this check does not provide
        return original(self, model, inputs)

    monkeypatch.setattr(trl.GRPOTrainer, "_compute_loss", renamed_attribute)
    result = namespace["check_trl_conformance"]()
    assert result["status"] == "api_changed" and result["attribute"] == "trainer.clip_epsilon_low"
    assert result["trl_version"] == trl.__version__ and result["written_for"] == "1.16.0"

    monkeypatch.delattr(trl.GRPOTrainer, "_compute_loss")
    result = namespace["check_trl_conformance"]()
    assert result["status"] == "api_changed" and result["attribute"] == "GRPOTrainer._compute_loss"


@pytest.mark.slow
def test_trl_check_fails_on_a_wrong_learner_loss():
    """The conformance check is not a rubber stamp: a wrong reduction makes it report failure."""
    pytest.importorskip("trl")
    namespace = _notebook_namespace()
    exec(textwrap.dedent(WRONG_GRPO_TOKEN_MEAN["reduce_per_token_loss"]), namespace)
    result = namespace["check_trl_conformance"]()
    assert result["status"] == "failed"
    assert "loss.grpo" in result["failed"] and "loss.bnpo" not in result["failed"]
