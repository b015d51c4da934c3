"""Notebooks 4 (verifiable rewards) and 5 (log-probs and masks): the graded tests judge answers correctly.

* the reference solutions run green (every graded test cell passes);
* an independently written correct implementation (below, not copied from the solutions) passes every
  visible and hidden test;
* common wrong answers each fail at least one *hidden* test: they run against copies of the cells whose test
  cells hold only their hidden part, so a failure there cannot come from the visible tests.

Executions are shared through the ``notebook_runs`` fixture (tests/conftest.py): the reference solution is the
one execution ``test_notebooks.py`` also uses, and every other case of a notebook runs in ONE warm kernel
(``_warm_kernel_notebook``): the independent answers first, then each wrong variant on the cells from its
answer through its target test, each followed by the correct answers again, then every hidden test alone.
"""

from __future__ import annotations

import pytest
import warm_kernel  # tests/warm_kernel.py

import tools.chain.notebooks as chain

NB4 = "nb04_verifiable_rewards"
NB5 = "nb05_logprobs_masks"

# ----------------------------------------------------------------------------- independent answers
# Written for these tests from the notebooks' stated contracts, in a different style from solutions/.

INDEPENDENT_NB4 = {
    "verify_integer_response": r"""
import math
import re


def _weight_ok(value):
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def verify_integer_response(response, expected_answer, correctness_weight=1.0, format_weight=0.1):
    if type(response) is not str:
        raise ValueError("response 必须是 str")
    if type(expected_answer) is not int:
        raise ValueError("expected_answer 必须是 int")
    if not (_weight_ok(correctness_weight) and _weight_ok(format_weight)):
        raise ValueError("权重必须是有限的非负实数")
    text = response.strip()
    integers = re.findall(r"-?[0-9]+", text)
    answer = int(integers[-1]) if len(integers) > 0 else None
    correctness = float(answer is not None and answer == expected_answer)
    format_pass = float(bool(re.fullmatch(r"-?[0-9]+", text)))
    return dict(
        verifier_id="integer-answer-v1",
        status="unjudgeable" if answer is None else "ok",
        parsed_answer=answer,
        correctness=correctness,
        format_pass=format_pass,
        total_reward=correctness * correctness_weight + format_pass * format_weight,
    )
""",
    "rewards_per_func_from_lists": r"""
import math


def rewards_per_func_from_lists(outputs, dtype=torch.float32):
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError("dtype 必须是浮点类型")
    if type(outputs) not in (list, tuple) or not outputs:
        raise ValueError("outputs 必须是非空列表")
    if any(type(column) not in (list, tuple) or not column for column in outputs):
        raise ValueError("每个奖励函数的输出必须是非空列表")
    if len({len(column) for column in outputs}) != 1:
        raise ValueError("各奖励函数输出的长度必须相同")
    rows = []
    for values in zip(*outputs):
        row = []
        for value in values:
            if value is None:
                row.append(float("nan"))
            elif type(value) in (int, float) and math.isfinite(value):
                row.append(value)
            else:
                raise ValueError(f"非法奖励值 {value!r}")
        rows.append(row)
    return torch.tensor(rows, dtype=dtype)
""",
    "combine_rewards": r"""
def combine_rewards(rewards_per_func, weights):
    if not torch.is_tensor(rewards_per_func) or not torch.is_floating_point(rewards_per_func):
        raise ValueError("rewards_per_func 必须是浮点张量")
    if rewards_per_func.ndim != 2 or rewards_per_func.size(1) < 1:
        raise ValueError("rewards_per_func 必须是 [N, F]，F >= 1")
    if rewards_per_func.isinf().any():
        raise ValueError("rewards_per_func 含 inf")
    w = torch.tensor(weights, dtype=torch.float64) if not torch.is_tensor(weights) else weights.to(torch.float64)
    if w.ndim != 1 or w.numel() != rewards_per_func.size(1) or not w.isfinite().all():
        raise ValueError("weights 必须是 F 个有限数")
    missing = rewards_per_func.isnan()
    filled = torch.where(missing, torch.zeros_like(rewards_per_func), rewards_per_func)
    total = (filled.to(torch.float64) @ w).to(rewards_per_func.dtype)
    return torch.where(missing.all(dim=1), torch.full_like(total, float("nan")), total)
""",
}

INDEPENDENT_NB5 = {
    "completion_mask_from_eos": r"""
def completion_mask_from_eos(completion_ids, eos_token_id, pad_mask=None):
    integer_types = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
    if not torch.is_tensor(completion_ids) or completion_ids.ndim != 2 or completion_ids.dtype not in integer_types:
        raise ValueError("completion_ids 必须是 [B, T] 整数张量")
    if type(eos_token_id) is not int:
        raise ValueError("eos_token_id 必须是 int")
    if pad_mask is None:
        pad_mask = torch.ones(completion_ids.shape, dtype=torch.bool)
    elif not torch.is_tensor(pad_mask) or pad_mask.shape != completion_ids.shape:
        raise ValueError("pad_mask 形状不对")
    elif pad_mask.dtype != torch.bool:
        if pad_mask.is_complex() or not bool(((pad_mask == 0) | (pad_mask == 1)).all()):
            raise ValueError("pad_mask 只能是布尔或 0/1 数值张量")
        pad_mask = pad_mask != 0
    batch, length = completion_ids.shape
    is_eos = (completion_ids == eos_token_id) & pad_mask
    eos_index = torch.full((batch,), length - 1, dtype=torch.long)
    has_eos = is_eos.any(dim=1)
    eos_index[has_eos] = is_eos.int().argmax(dim=1)[has_eos]
    positions = torch.arange(length).expand(batch, length)
    return (positions <= eos_index.unsqueeze(1)) & pad_mask
""",
    "shifted_token_logps": r"""
def shifted_token_logps(logits, input_ids):
    if not torch.is_tensor(logits) or logits.ndim != 3 or not logits.dtype.is_floating_point:
        raise ValueError("logits 必须是 [B, T, V] 浮点张量")
    if not torch.is_tensor(input_ids) or input_ids.dtype not in (torch.int16, torch.int32, torch.int64, torch.uint8):
        raise ValueError("input_ids 必须是整数张量")
    if input_ids.shape != logits.shape[:2] or logits.size(1) < 2:
        raise ValueError("形状不匹配或 T < 2")
    if bool((input_ids < 0).any()) or bool((input_ids >= logits.size(2)).any()):
        raise ValueError("词元越界")
    predictors = logits[:, :-1]  # [B, T-1, V]
    picked = predictors.gather(2, input_ids[:, 1:].long().unsqueeze(2)).squeeze(2)  # [B, T-1]
    return picked - predictors.logsumexp(dim=2)  # [B, T-1]
""",
}


def _wrong(answers: dict[str, str], grade_id: str, old: str, new: str) -> dict[str, str]:
    source = answers[grade_id]
    assert source.count(old) == 1, f"mutation anchor {old!r} not found exactly once in {grade_id}"
    return {grade_id: source.replace(old, new)}


# Common mistakes, each a one-line change of the independent answer.
WRONG_NB4 = {
    "first_integer_instead_of_last": _wrong(
        INDEPENDENT_NB4, "verify_integer_response", "int(integers[-1])", "int(integers[0])"
    ),
    "format_without_strip": _wrong(
        INDEPENDENT_NB4,
        "verify_integer_response",
        'format_pass = float(bool(re.fullmatch(r"-?[0-9]+", text)))',
        'format_pass = float(bool(re.fullmatch(r"-?[0-9]+", response)))',
    ),
    "unscorable_row_becomes_zero": _wrong(
        INDEPENDENT_NB4,
        "combine_rewards",
        'return torch.where(missing.all(dim=1), torch.full_like(total, float("nan")), total)',
        "return total",
    ),
    "reward_table_transposed": _wrong(
        INDEPENDENT_NB4,
        "rewards_per_func_from_lists",
        "return torch.tensor(rows, dtype=dtype)",
        "return torch.tensor(rows, dtype=dtype).T.contiguous()",
    ),
}
WRONG_NB5 = {
    "eos_excluded_from_mask": _wrong(
        INDEPENDENT_NB5,
        "completion_mask_from_eos",
        "(positions <= eos_index.unsqueeze(1))",
        "(positions < eos_index.unsqueeze(1))",
    ),
    "eos_inside_padding_counted": _wrong(
        INDEPENDENT_NB5,
        "completion_mask_from_eos",
        "is_eos = (completion_ids == eos_token_id) & pad_mask",
        "is_eos = completion_ids == eos_token_id",
    ),
    "logps_not_shifted": _wrong(
        INDEPENDENT_NB5,
        "shifted_token_logps",
        "predictors.gather(2, input_ids[:, 1:]",
        "predictors.gather(2, input_ids[:, :-1]",
    ),
}
# Which graded test each wrong answer targets (the notebook is cut after the last target of a run).
TARGET_TEST = {
    "first_integer_instead_of_last": "test_verify_integer_response_visible",
    "format_without_strip": "test_verify_integer_response_visible",
    "unscorable_row_becomes_zero": "test_combine_rewards_visible",
    "reward_table_transposed": "test_rewards_per_func_from_lists_visible",
    "eos_excluded_from_mask": "test_completion_mask_from_eos_visible",
    "eos_inside_padding_counted": "test_completion_mask_from_eos_visible",
    "logps_not_shifted": "test_shifted_token_logps_visible",
}
# Wrong answers to different functions run together: one execution per group.
WRONG_GROUPS = {
    "nb04_first_integer+transposed+unscorable": (
        NB4,
        ["first_integer_instead_of_last", "reward_table_transposed", "unscorable_row_becomes_zero"],
    ),
    "nb04_format_without_strip": (NB4, ["format_without_strip"]),
    "nb05_eos_excluded+not_shifted": (NB5, ["eos_excluded_from_mask", "logps_not_shifted"]),
    "nb05_eos_inside_padding": (NB5, ["eos_inside_padding_counted"]),
}
assert sorted(n for _, names in WRONG_GROUPS.values() for n in names) == sorted(TARGET_TEST)


# ----------------------------------------------------------------------------- helpers
def _test_cells(nb) -> list[str]:
    return [warm_kernel.grade_id(c) for c in nb.cells if warm_kernel.is_test(c)]


def _warm_kernel_notebook(assignment: str):
    """One notebook that checks every answer variant of ``assignment`` in one kernel (one execution):

    1. the notebook with the independent correct answers, visible and hidden tests (original grade_ids);
    2. for each wrong answer ``name``: the cells from its answer cell through its target test cell, the answer
       replaced by the wrong one and the test cells cut to their hidden tests (``<grade_id>@<name>``), then the
       same cells with the correct answers again (``<grade_id>@restore-<name>``), so the next variant starts
       from correct state;
    3. every test cell cut to its hidden tests, with the correct answers in place (``<grade_id>@hidden-only``).
    """
    independent = INDEPENDENT_NB4 if assignment == NB4 else INDEPENDENT_NB5
    wrong_answers = WRONG_NB4 if assignment == NB4 else WRONG_NB5
    base = warm_kernel.without_demo_cells(
        chain.substitute_answers(chain.build_notebook(assignment), independent), assignment
    )
    variants = [
        warm_kernel.Variant(tag=name, answers=wrong, last=[TARGET_TEST[name]], hidden_only=True)
        for name, wrong in wrong_answers.items()
    ]
    out = warm_kernel.warm_notebook(base, variants, correct=independent)
    out.cells += [
        warm_kernel.tagged(c, "hidden-only", independent, hidden_only=True)
        for c in base.cells
        if warm_kernel.is_test(c)
    ]
    return out


def _warm_results(notebook_runs, assignment: str) -> dict[str, str | None]:
    """{grade_id: None or "EName: message"} of the one warm-kernel execution of ``assignment`` (shared)."""
    return chain.cell_results(notebook_runs.run(_warm_kernel_notebook(assignment), cwd=chain.ROOT, timeout=900))


# ----------------------------------------------------------------------------- tests
@pytest.mark.slow
@pytest.mark.parametrize("assignment", [NB4, NB5])
def test_reference_solution_passes_every_test(assignment, executed_solution):
    results = chain.cell_results(executed_solution(assignment))
    tests = [grade_id for grade_id in results if grade_id.startswith("test_")]
    assert len(tests) >= 2
    failed = {grade_id: results[grade_id] for grade_id in tests if results[grade_id] is not None}
    assert not failed, f"{assignment}: graded tests failed: {failed}"
    errors = {grade_id: error for grade_id, error in results.items() if error is not None}
    assert not errors, f"{assignment}: cells raised: {errors}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", [NB4, NB5])
def test_independent_correct_answers_pass_every_visible_and_hidden_test(assignment, notebook_runs):
    results = _warm_results(notebook_runs, assignment)
    original = {grade_id: error for grade_id, error in results.items() if "@" not in grade_id}
    tests = _test_cells(chain.build_notebook(assignment))
    assert len(tests) >= 2
    failed = {
        grade_id: original.get(grade_id, "not executed") for grade_id in tests if original.get(grade_id) is not None
    }
    assert not failed, f"{assignment}: graded tests failed: {failed}"
    errors = {grade_id: error for grade_id, error in original.items() if error is not None}
    assert not errors, f"{assignment}: cells raised: {errors}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "assignment,name",
    [(NB4, n) for n in WRONG_NB4] + [(NB5, n) for n in WRONG_NB5],
    ids=list(WRONG_NB4) + list(WRONG_NB5),
)
def test_wrong_answer_fails_a_hidden_test(assignment, name, notebook_runs):
    results = _warm_results(notebook_runs, assignment)
    target = f"{TARGET_TEST[name]}@{name}"
    assert target in results, f"{target} was not executed"
    assert results[target] is not None, f"wrong answer {name!r} passed the hidden tests of {TARGET_TEST[name]}"
    assert "AssertionError" in results[target], f"{name}: expected a failed assertion, got {results[target]}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", [NB4, NB5])
def test_hidden_tests_alone_accept_the_independent_answers(assignment, notebook_runs):
    """Guard for the check above: the hidden-only cut of each test cell passes with correct answers, also right
    after each wrong variant was put back (so a variant's failure comes from that variant alone)."""
    results = _warm_results(notebook_runs, assignment)
    tests = _test_cells(chain.build_notebook(assignment))
    hidden_only = {f"{grade_id}@hidden-only" for grade_id in tests}
    assert hidden_only <= set(results), sorted(hidden_only - set(results))
    restored = {grade_id for grade_id in results if "@restore-" in grade_id}
    assert restored, "no wrong variant was restored"
    failed = {grade_id: results[grade_id] for grade_id in hidden_only | restored if results[grade_id] is not None}
    assert not failed, failed
