"""Verdicts that judge what the learner wrote (issue 25): trivial answers score 0 on every test cell, the
oracle's comparisons cannot be fooled by NaN or ±inf, and the return-type contract names what arrived.

The trivial answers are called in this process on the oracle's own cases (the driver's codec turns what they
return into the plain data the grader judges), so every lesson is checked in seconds without nbgrader.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from autograde.grpo_grader import oracle as oracle_lib
from autograde.grpo_grader.driver import make_codec
from autograde.grpo_grader.oracle import Close, Mismatch, Number, Raises, close_number, close_tensor
from autograde.grpo_grader.sample import LESSONS

ENCODE, _ = make_codec(torch)
NAN = float("nan")
# keys of the dicts a lesson's functions return (their TODO text and visible tests name them)
DICT_KEYS = {
    "sample_group": (
        "prompt_ids",
        "prompt_mask",
        "completion_ids",
        "completion_mask",
        "old_per_token_logps",
        "ref_per_token_logps",
        "completions",
        "group_ids",
    ),
    "grpo_step": (
        "loss",
        "losses",
        "clip_ratio_low",
        "clip_ratio_high",
        "approx_kl",
        "kl_ref",
        "entropy",
        "grad_norm",
        "num_iterations",
    ),
    "log_step_metrics": (
        "step",
        "reward_mean",
        "reward_std",
        "frac_reward_zero_std",
        "completion_length",
        "strict_accuracy",
        "seconds",
        "loss",
        "clip_ratio_low",
        "clip_ratio_high",
        "approx_kl",
        "entropy",
        "grad_norm",
        "kl_ref",
    ),
    "verify_integer_response": ("verifier_id", "status", "parsed_answer", "correctness", "format_pass", "total_reward"),
    "answer_conventions_0001": ("course", "minimind", "trl_group", "trl_batch", "trl_none", "cs336", "dr_grpo"),
}
# what a function of nb07 receives from the oracle's harness, and the harness's name for it
HARNESS = {"_oracle_sample": "sample_group", "_oracle_sample_seeds": "sample_group", "_oracle_step": "grpo_step"}


def _first_tensor(args):
    for value in args:
        if torch.is_tensor(value):
            return value
        if isinstance(value, dict):  # nb07's rollout
            found = _first_tensor(list(value.values()))
            if found is not None:
                return found
    return None


def _like(args, fill):
    first = _first_tensor(args)
    if first is None:
        return fill
    dtype = first.dtype if first.is_floating_point() else torch.float32
    return torch.full(first.shape, fill, dtype=dtype)


def _raise(*_args, **_kwargs):
    raise ValueError("trivial answer: always ValueError")


def _checks_then(lesson: str, name: str, fill):
    """The lesson's own function (``tools.lessons``) for its input checks only: it raises where the contract
    says ValueError, and otherwise the answer returns ``fill`` shaped like the first tensor argument."""
    import importlib

    try:
        real = getattr(importlib.import_module(f"tools.lessons.{lesson}"), name, None)
    except ImportError:
        return None
    if real is None or name in HARNESS.values():  # a model-backed function: its checks cost a real rollout
        return None

    def answer(*args, **kwargs):
        real(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        return _like(args, fill)

    return answer


def trivial_answers(lesson: str, name: str) -> dict:
    """{label: function} of answers that do no work, for the graded function ``name``."""
    answers = {
        "zeros": lambda *a, **k: _like(a, 0.0),
        "ones": lambda *a, **k: _like(a, 1.0),
        "nan": lambda *a, **k: _like(a, NAN),
        "inf": lambda *a, **k: _like(a, math.inf),
        "input unchanged": lambda *a, **k: a[0] if a else None,
        "constant 0.0": lambda *a, **k: 0.0,
        "constant 1": lambda *a, **k: 1,
        "always ValueError": _raise,
        "the lesson's checks, then zeros": _checks_then(lesson, name, 0.0),
        "the lesson's checks, then NaN": _checks_then(lesson, name, NAN),
    }
    answers = {label: function for label, function in answers.items() if function is not None}
    if name in DICT_KEYS:
        for label, fill in (("dict of zeros", 0.0), ("dict of NaN", NAN), ("dict of None", None)):
            answers[label] = lambda *a, _f=fill, **k: dict.fromkeys(DICT_KEYS[name], _f)
        if name == "answer_conventions_0001":
            answers["(0, 0) pairs"] = lambda *a, **k: {key: (0.0, 0.0) for key in DICT_KEYS[name]}
            answers["(nan, nan) pairs"] = lambda *a, **k: {key: (NAN, NAN) for key in DICT_KEYS[name]}
    return answers


# (a constant letter of a multiple-choice question is a guess, not a trivial answer: item 6 of issue 25)
TRIVIAL_VALUES = {"None": None, "0": 0, "nan": NAN, "empty set": set(), "empty dict": {}}


def _record(case, namespace) -> dict:
    """The driver's record of one case, computed in this process (no grads: a trivial answer has none)."""
    if case.read:
        if case.call not in namespace:
            return {"case": case.id, "status": "missing", "message": "not defined"}
        return {"case": case.id, "status": "returned", "value": ENCODE(namespace[case.call])}
    args = copy.deepcopy(list(case.args))
    kwargs = copy.deepcopy(dict(case.kwargs))
    try:
        value = namespace[case.call](*args, **kwargs)
    except BaseException as error:  # noqa: BLE001 (recorded as the driver does)
        return {
            "case": case.id,
            "status": "raised",
            "type": type(error).__name__,
            "mro": [c.__name__ for c in type(error).__mro__],
            "message": str(error),
        }
    return {"case": case.id, "status": "returned", "value": ENCODE(value), "grads": {}, "mutated": []}


_CASES: dict = {}


def lesson_cases(lesson: str) -> list:
    if lesson not in _CASES:
        _CASES[lesson] = oracle_lib.load_oracle(lesson).cases("trivial-answers-seed", {})
    return _CASES[lesson]


def _graded_names(cases) -> set[str]:
    return {HARNESS.get(c.call, c.call) for c in cases if not c.read}


def _trivial_passes(oracle, cases) -> list[str]:
    """The test cells of ``oracle`` that some trivial answer passes, as "function / answer: test"."""
    lesson = oracle.assignment
    passed = []
    namespace: dict = {}
    if oracle.prelude:  # the oracle's own harness, run once as the driver runs it (it builds nb07's policy)
        exec(oracle.prelude, namespace)  # noqa: S102
    for name in sorted(_graded_names(cases)):
        mine = [c for c in cases if HARNESS.get(c.call, c.call) == name]
        tests = {c.test for c in mine}
        for label, function in trivial_answers(lesson, name).items():
            namespace[name] = function
            results = {c.id: _record(c, namespace) for c in mine}
            verdicts = oracle_lib.verdicts(oracle, mine, results, "not run")
            passed += [f"{name} / {label}: {gid}" for gid in tests if verdicts[gid].passed]
    for case in [c for c in cases if c.read]:
        for label, value in TRIVIAL_VALUES.items():
            results = {case.id: _record(case, {case.call: value})}
            if oracle_lib.verdicts(oracle, [case], results, "not run")[case.test].passed:
                passed.append(f"{case.call} = {label}: {case.test}")
    return passed


@pytest.mark.parametrize(
    "lesson",
    [pytest.param(lesson, marks=pytest.mark.slow) if lesson == "nb07_online_grpo" else lesson for lesson in LESSONS],
)
def test_trivial_answers_score_zero_on_every_test_cell(lesson):
    """Zeros, ones, NaN, inf, the input unchanged, a constant, always ValueError, the lesson's own input checks
    followed by zeros or NaN (and, for a function that returns a dict, the right keys filled with zeros, NaN or None):
    for every graded function of every lesson, each one fails every test cell of that function."""
    passed = _trivial_passes(oracle_lib.load_oracle(lesson), lesson_cases(lesson))
    assert not passed, passed


def test_the_trivial_answers_find_a_comparison_that_nan_fools():
    """The check above fails where it should: a test cell compared as ``abs(got - want) > tol`` (False for NaN)
    and one whose only value case expects zeros are both reported."""
    from types import SimpleNamespace

    from autograde.grpo_grader.oracle import Case, Oracle, Satisfies

    module = SimpleNamespace(TESTS={"t_nan": "f", "t_zeros": "f", "t_fair": "f"})
    rewards = torch.tensor([1.0, 2.0, 4.0])
    fooled = Case("t_nan", "f", (rewards,), {}, Satisfies(lambda v: "wrong" if abs(float(v[0]) - 3.0) > 1e-6 else None))
    zeros = Case("t_zeros", "f", (rewards,), {}, Close(torch.zeros(3)))
    fair = Case("t_fair", "f", (rewards,), {}, Close(rewards * 2))
    for index, case in enumerate((fooled, zeros, fair)):
        case.id = f"{case.test}#{index}"
    passed = _trivial_passes(Oracle("fake_lesson", module), [fooled, zeros, fair])
    assert any("nan" in p and p.endswith("t_nan") for p in passed), passed
    assert any("zeros" in p and p.endswith("t_zeros") for p in passed), passed
    assert not any(p.endswith("t_fair") for p in passed), passed


def test_nan_and_inf_never_equal_a_finite_expectation():
    """close_number / close_tensor / Close / Number: NaN and ±inf fail against a finite value; NaN passes only
    where NaN is expected, an infinity only where the same infinity is."""
    for got in (NAN, math.inf, -math.inf):
        assert not close_number(got, 0.5, atol=1e9)
        with pytest.raises(Mismatch):
            Number(0.5, atol=1e9).check(got)
        assert not close_tensor(torch.tensor([0.5, got]), torch.tensor([0.5, 0.5]), atol=1e9)
        with pytest.raises(Mismatch):
            Close(torch.tensor([0.5, 0.5]), atol=1e9).check(torch.tensor([0.5, got]))
    assert close_number(NAN, NAN) and close_number(math.inf, math.inf) and not close_number(math.inf, -math.inf)
    assert close_tensor(torch.tensor([NAN, 1.0]), torch.tensor([NAN, 1.0]))
    assert not close_tensor(torch.tensor([1.0, 1.0]), torch.tensor([NAN, 1.0]))
    assert close_number(1.0 + 1e-10, 1.0, atol=1e-9) and not close_number(1.0 + 1e-8, 1.0, atol=1e-9)
    assert not close_tensor(torch.tensor([1.0]), torch.tensor([1.0, 1.0]))


def test_number_contract_accepts_numpy_and_0d_tensors_and_names_what_arrived():
    """A number may be a Python int/float, a NumPy scalar or 0-d array (the driver sends its ``.item()``) or a 0-d
    floating tensor; anything else fails with a message naming the type that arrived and the types expected."""
    numpy = pytest.importorskip("numpy")
    check = Number(0.25, atol=1e-12)
    for value in (
        0.25,
        numpy.float64(0.25),
        numpy.float32(0.25),
        numpy.array(0.25),
        torch.tensor(0.25),
        torch.tensor(0.25, dtype=torch.float64),
    ):
        check.check(oracle_lib.decode(ENCODE(value)))
    for value, named in (
        (torch.tensor([0.25]), "torch.Tensor[float32]，形状 (1,)"),
        ("0.25", "str"),
        (True, "bool"),
        (numpy.array([0.25]), "numpy.ndarray"),
    ):
        with pytest.raises(Mismatch) as caught:
            check.check(oracle_lib.decode(ENCODE(value)))
        assert named in str(caught.value) and "0 维浮点张量" in str(caught.value), str(caught.value)
    assert not isinstance(oracle_lib.decode(ENCODE(numpy.array([1.0, 2.0]))), float)


def test_raises_cases_alone_never_make_a_test_cell():
    """A test cell whose every case expects ValueError would give "always raise ValueError" its points: every
    test cell of every lesson has at least one case that expects a value."""
    lonely = []
    for lesson in LESSONS:
        oracle = oracle_lib.load_oracle(lesson)
        cases = oracle.cases("raises-only-seed", {})
        for gid in oracle.tests:
            kinds = {isinstance(c.expect, Raises) for c in cases if c.test == gid}
            if kinds == {True}:
                lonely.append(f"{lesson}/{gid}")
    assert not lonely, lonely
