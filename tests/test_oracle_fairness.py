"""Verdicts that judge what the learner wrote: trivial answers score 0 on every test cell, the
oracle's comparisons cannot be fooled by NaN or ±inf, and the return-type contract names what arrived.

The trivial answers are called in this process on the oracle's own cases (the case runner turns what they return
into the plain data the grader judges, as in a grading kernel), so every lesson is checked in seconds without
nbgrader.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from autograde_helpers import nb01_answers  # tests/autograde_helpers.py

from autograde.grpo_grader import judging, wire
from autograde.grpo_grader import oracle as oracle_lib
from autograde.grpo_grader.case_runner import make_runner
from autograde.grpo_grader.oracles._nb07_update import STEP_METRICS
from autograde.grpo_grader.vocabulary import Close, Mismatch, Number, Raises, close_number, close_tensor
from autograde.sample_class.build import LESSONS

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
    "grpo_step": (*STEP_METRICS, "num_iterations"),
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
    "answer_conventions": ("course", "minimind", "trl_group", "trl_batch", "trl_none", "cs336", "dr_grpo"),
    "q9_ratio": ("grpo", "dapo"),
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
        if name == "answer_conventions":
            answers["(0, 0) pairs"] = lambda *a, **k: {key: (0.0, 0.0) for key in DICT_KEYS[name]}
            answers["(nan, nan) pairs"] = lambda *a, **k: {key: (NAN, NAN) for key in DICT_KEYS[name]}
    return answers


# (a constant letter of a multiple-choice question is a guess, not a trivial answer)
TRIVIAL_VALUES = {"None": None, "0": 0, "nan": NAN, "empty set": set(), "empty dict": {}}


def _record(case, namespace) -> dict:
    """The case runner's record of one case, computed in this process."""
    lines: list[bytes] = []
    make_runner({"cases": [dict(case.wire(), after=case.test)]}, lines.append)(case.test, namespace)
    return json.loads(lines[0])


def _sent(value):
    """``value`` as the case runner sends a learner's value (the plain data format)."""
    read = {"id": "v", "call": "v", "read": True, "after": "t", "args": [], "kwargs": {}}
    lines: list[bytes] = []
    make_runner({"cases": [read]}, lines.append)("t", {"v": value})
    return json.loads(lines[0])["value"]


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
    if oracle.prelude:  # the oracle's own harness, run as the case runner runs it (it builds nb07's policy)
        harness = {}
        exec(oracle.prelude, harness)  # noqa: S102
        harness["_NOTEBOOK"] = namespace
        namespace.update({k: v for k, v in harness.items() if k.startswith("_oracle")})
    for name in sorted(_graded_names(cases)):
        mine = [c for c in cases if HARNESS.get(c.call, c.call) == name]
        tests = {c.test for c in mine}
        for label, function in trivial_answers(lesson, name).items():
            namespace[name] = function
            results = {c.id: _record(c, namespace) for c in mine}
            verdicts = judging.verdicts(oracle, mine, results, "not run")
            passed += [f"{name} / {label}: {gid}" for gid in tests if verdicts[gid].passed]
    for case in [c for c in cases if c.read]:
        for label, value in TRIVIAL_VALUES.items():
            results = {case.id: _record(case, {case.call: value})}
            if judging.verdicts(oracle, [case], results, "not run")[case.test].passed:
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

    from autograde.grpo_grader.oracle import Oracle
    from autograde.grpo_grader.vocabulary import Case, Satisfies

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
    """A number may be a Python int/float, a NumPy scalar or 0-d array (the runner sends its ``.item()``) or a 0-d
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
        check.check(wire.decode(_sent(value)))
    for value, named in (
        (torch.tensor([0.25]), "torch.Tensor[float32]，形状 (1,)"),
        ("0.25", "str"),
        (True, "bool"),
        (numpy.array([0.25]), "numpy.ndarray"),
    ):
        with pytest.raises(Mismatch) as caught:
            check.check(wire.decode(_sent(value)))
        assert named in str(caught.value) and "0 维浮点张量" in str(caught.value), str(caught.value)
    assert not isinstance(wire.decode(_sent(numpy.array([1.0, 2.0]))), float)


@pytest.mark.parametrize(
    "lesson",
    [pytest.param(lesson, marks=pytest.mark.slow) if lesson == "nb07_online_grpo" else lesson for lesson in LESSONS],
)
def test_raises_cases_alone_never_make_a_test_cell(lesson):
    """A test cell whose every case expects ValueError would give "always raise ValueError" its points: every
    test cell of every lesson has at least one case that expects a value."""
    oracle = oracle_lib.load_oracle(lesson)
    cases = lesson_cases(lesson)
    lonely = [gid for gid in oracle.tests if {isinstance(c.expect, Raises) for c in cases if c.test == gid} == {True}]
    assert not lonely, lonely


# ----------------------------------------------------------------------------- every case comes from the lesson
# Each oracle module's ``CASE_SOURCES`` lists its case families: [(regex over a case's ``what``, the lesson line it
# comes from)]; the line is quoted from what the learner sees (the released notebook: TODO text, docstrings, provided
# checks, visible tests). A case whose ``what`` no family matches is an orphan: a check the lesson never states.


def _orphans(lesson: str, cases) -> tuple[list[str], list[str]]:
    """(whats that no family of ``lesson`` matches, families whose lesson line is not in the released notebook)."""
    import re

    import nbformat

    from autograde.grpo_grader.course import ROOT

    nb = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    text = "\n".join(cell.source for cell in nb.cells)
    families = oracle_lib.load_oracle(lesson).module.CASE_SOURCES
    orphans = sorted({c.what for c in cases if not any(re.search(rx, c.what) for rx, _ in families)})
    unstated = [quote for _, quote in families if quote not in text]
    return orphans, unstated


@pytest.mark.parametrize(
    "lesson",
    [pytest.param(lesson, marks=pytest.mark.slow) if lesson == "nb07_online_grpo" else lesson for lesson in LESSONS],
)
def test_every_oracle_case_comes_from_a_line_of_the_lesson(lesson):
    """Each case the oracle draws (two seeds, every flag of the course's config on) belongs to a family listed
    above with the line of the released notebook that states it; the line is really there."""
    from autograde.grpo_grader.course import load_settings

    oracle = oracle_lib.load_oracle(lesson)
    flags = load_settings().oracle_flags.get(lesson, {})
    cases = [c for seed in ("orphan-seed-1", "orphan-seed-2") for c in oracle.cases(seed, flags)]
    orphans, unstated = _orphans(lesson, cases)
    assert not orphans, f"{lesson}: oracle cases no lesson line states: {orphans}"
    assert not unstated, f"{lesson}: lesson lines not in the released notebook: {unstated}"


def test_an_orphan_case_is_reported():
    """The check fails where it should: a case no contract of the lesson states ("rewards 必须是 float64": the
    lesson asks for a floating tensor, of any precision) is an orphan, and a quote the notebook does not contain is
    reported."""
    from autograde.grpo_grader.vocabulary import Case

    orphan = Case("test_compute_group_advantages_hidden", "compute_group_advantages", what="rewards 必须是 float64")
    assert _orphans("nb01_group_advantages", [orphan])[0] == ["rewards 必须是 float64"]
    sources = oracle_lib.load_oracle("nb01_group_advantages").module.CASE_SOURCES
    sources.append((r"^never$", "这句话不在笔记本里"))
    try:
        assert _orphans("nb01_group_advantages", [])[1] == ["这句话不在笔记本里"]
    finally:
        sources.pop()


# ----------------------------------------------------------------------------- the submission as written
def test_demonstrations_are_left_out_by_release_grade_id_only():
    """``is_demo_cell`` on a rebuilt submission: the released demonstration cells are left out of grading, a cell the
    learner added that contains a demo's text is the learner's and runs; every oracle case runs at its test cell."""
    import nbformat

    from autograde.grpo_grader.course import ROOT, load_settings
    from autograde.grpo_grader.preprocessors import is_demo_cell
    from autograde.grpo_grader.submission import rebuild_metadata

    lesson = "nb01_group_advantages"
    release = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    sub = nbformat.reads(nbformat.writes(release), as_version=4)
    demo = next(c for c in sub.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "demo_timing")
    sub.cells.append(nbformat.v4.new_code_cell("# copied from the demo\n" + demo.source))
    rebuilt, _ = rebuild_metadata(sub, release)
    markers = load_settings().demo_cells[lesson]
    left_out = [c for c in rebuilt.cells if is_demo_cell(c, markers)]
    ids = {c.metadata["nbgrader"]["grade_id"] for c in left_out}
    assert ids == {"demo_timing", "demo_pipeline_answers"}, ids
    assert not is_demo_cell(rebuilt.cells[-1], markers), "a learner's cell is never a demo"
    assert all(c.after == c.test for c in oracle_lib.load_oracle(lesson).cases("job-cells-seed", {}))


# ----------------------------------------------------------------------------- one specification per check
def test_run_in_kernel_grades_a_test_cell_with_the_oracles_cases(monkeypatch):
    """The hidden tests' call (plain nbgrader, formgrader): ``run_in_kernel`` runs the oracle's cases of one test
    cell on the notebook's namespace, passes honest answers, and fails zeros with the oracle's Chinese message - the
    same verdict the pipeline's ``oracle.verdicts`` gives on the same records; its cases come from fresh entropy,
    never from the instructor's seed (two runs call the function on different inputs)."""
    from autograde.grpo_grader.oracles import run_in_kernel

    lesson = "nb01_group_advantages"
    namespace = nb01_answers()
    for test in oracle_lib.load_oracle(lesson).tests:
        assert (
            run_in_kernel(lesson, test, namespace, seed="in-kernel-test") is None
        )  # None: nbgrader would read a value as partial credit
    monkeypatch.delenv("GRPO_KERNEL_CASES_SEED", raising=False)  # the test session's public seed
    seen = []
    honest = namespace["answer_conventions"]
    namespace["answer_conventions"] = lambda group, other: seen.append(group.tolist()) or honest(group, other)
    run_in_kernel(lesson, "test_conventions_question_visible", namespace)
    run_in_kernel(lesson, "test_conventions_question_visible", namespace)
    assert seen[:2] != seen[2:], "fresh draws for every in-kernel run"
    namespace["compute_group_advantages"] = lambda rewards, ids, eps=1e-6: torch.zeros_like(rewards)
    with pytest.raises(AssertionError) as caught:
        run_in_kernel(lesson, "test_compute_group_advantages_hidden", namespace, seed="in-kernel-test")
    oracle = oracle_lib.load_oracle(lesson)
    cases = [c for c in oracle.cases("in-kernel-test") if c.test == "test_compute_group_advantages_hidden"]
    records = {c.id: _record(c, namespace) for c in cases}
    want = judging.verdicts(oracle, cases, records, "not run")["test_compute_group_advantages_hidden"]
    assert not want.passed and str(caught.value) == want.message and "第" in want.message
    with pytest.raises(ValueError):
        run_in_kernel(lesson, "test_no_such_cell", namespace)


def test_nb07_rejects_an_over_long_sample_before_any_model_work(monkeypatch):
    """Lesson 7's sample check reruns the model over the tokens a learner returns; a return
    wider than ``max_new_tokens`` (here a million tokens a row) is rejected by its shape alone, before the policy is
    built or a log-prob computed. The check can fail: a return of allowed width does reach the model."""
    from autograde.grpo_grader.oracles import nb07_online_grpo as nb07

    def model_work(*_args, **_kwargs):
        raise AssertionError("model work")

    monkeypatch.setattr(nb07, "_policy", model_work)
    monkeypatch.setattr(nb07, "_logps", model_work)
    check = nb07._sample_check(["1+1=", "2+3="], 2, 1.0, False, 4)

    def answer(width):
        ids = torch.ones(4, width, dtype=torch.long)
        return {
            "prompt_ids": torch.ones(4, 3, dtype=torch.long),
            "prompt_mask": torch.ones(4, 3, dtype=torch.long),
            "completion_ids": ids,
            "completion_mask": torch.ones(4, width, dtype=torch.bool),
            "old_per_token_logps": torch.zeros(4, width),
            "ref_per_token_logps": None,
            "completions": [""] * 4,
            "group_ids": torch.tensor([0, 0, 1, 1]),
        }

    message = check(answer(10**6))
    assert "max_new_tokens=4" in message and "1000000" in message, message
    with pytest.raises(AssertionError, match="model work"):
        check(answer(4))


@pytest.mark.slow  # nb07's cases load the tiny policy
def test_every_seed_catches_the_population_std_in_nb07_metrics():
    """Sample learner s04's nb07 bug (the population std of the rewards for ``reward_std``) fails
    test_log_step_metrics_visible for every grading seed, not only for most: every drawn reward vector has two
    different values, so each value case alone catches it (one-group draws with equal rewards once let the bug
    through: 9/9 instead of 7/9). The
    reference passes the same cases, so the check is not failing everything."""
    from tools.lessons.nb07_online_grpo import log_step_metrics

    def population_std(step, rewards, *args, **kwargs):
        row = log_step_metrics(step, rewards, *args, **kwargs)
        return dict(row, reward_std=float(rewards.double().std(unbiased=False)))

    oracle = oracle_lib.load_oracle("nb07_online_grpo")
    test = "test_log_step_metrics_visible"
    for index in range(12):
        mine = [c for c in oracle.cases(f"std-seed-{index}", {}) if c.test == test and not isinstance(c.expect, Raises)]
        assert len(mine) >= 4
        for case in mine:  # each value case alone catches it
            for function, passes in ((log_step_metrics, True), (population_std, False)):
                results = {case.id: _record(case, {"log_step_metrics": function})}
                assert judging.verdicts(oracle, [case], results, "not run")[test].passed is passes, (
                    case.what,
                    index,
                )


def _relative_spread(rewards: torch.Tensor, ids: torch.Tensor) -> float:
    """The smallest population std of a group of more than one member, over 1 + max |r|."""
    r = rewards.double()
    stds = [float(r[ids == label].std(unbiased=False)) for label in ids.unique() if int((ids == label).sum()) > 1]
    return min(stds) / (1.0 + float(r.abs().max()))


def test_nb01_reference_answers_pass_every_drawn_case_in_float32_too():
    """For 200 grading seeds, the course's own nb01 answers pass every case of their test cells, and no drawn
    float32 group has rewards so close together (relative spread under 0.02) that rounding alone could take a
    correct answer past the 2e-5 tolerance: a B=1, G=2 row drawn 3e-3 apart cost s09's correct
    group_relative_advantages its 3 hidden points in one sample-class run (float32 rounding in r - mean is about
    1e-7 / 1.4e-3 = 9e-5 of the value there). Before the guard, 200 seeds drew such rows."""
    from tools.lessons.nb01_group_advantages import compute_group_advantages, group_relative_advantages

    namespace = {
        "compute_group_advantages": compute_group_advantages,
        "group_relative_advantages": group_relative_advantages,
    }
    oracle = oracle_lib.load_oracle("nb01_group_advantages")
    failed, spreads = [], []
    for index in range(200):
        mine = [c for c in oracle.cases(f"float32-seed-{index}", {}) if c.call in namespace]
        results = {c.id: _record(c, namespace) for c in mine}
        verdicts = judging.verdicts(oracle, mine, results, "not run")
        tests = {c.test for c in mine}
        failed += [f"seed {index}: {gid}: {v.message}" for gid, v in verdicts.items() if gid in tests and not v.passed]
        for case in mine:
            if case.what.startswith(("随机输入", "随机平铺输入")) and case.args[0].dtype == torch.float32:
                rewards, second = case.args
                ids = second if case.call == "compute_group_advantages" else torch.arange(len(rewards)) // second
                spreads.append(_relative_spread(rewards, ids))
    assert not failed, failed[:5]
    assert len(spreads) == 200 * 8 and min(spreads) >= 0.02, sorted(spreads)[:3]
