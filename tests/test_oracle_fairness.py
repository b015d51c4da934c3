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
from autograde.sample_class.build import LESSONS

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
# {lesson: [(regex over a case's ``what``, the lesson line it comes from)]}: the line is quoted from what the
# learner sees (the released notebook: TODO text, docstrings, provided checks, visible tests). A case whose ``what``
# no family matches is an orphan: a check the lesson never states (issue 25, item 2).
CASE_SOURCES = {
    "nb01_group_advantages": [
        (r"^多组|^随机输入|^eps=.*精确标准化|^近零方差组", r"每组 $(r-\mu_g)/\max(\sigma_g,\varepsilon)$，总体标准差"),
        (r"^全等奖励组", "单元素组和全等奖励组的优势**严格为 0**"),
        (r"^rewards 不是一维$|^二维 rewards$", "`rewards` 不是一维"),
        (r"^group_ids 与 rewards 形状不同$", "两者形状不同"),
        (r"^rewards 为空$", "`rewards` 为空"),
        (r"^rewards 含 (NaN|inf|-inf)$", "`rewards` 含 NaN 或 inf"),
        (r"^eps = ", "`eps` 不是正的有限数"),
        (r"^group_ids 不是整数$", "`group_ids` 不是整数类型"),
        (
            r"^平铺布局|^随机平铺输入|^eps=.*应为 std \+ eps|^按行（连续的 G 个）分组|^全等奖励的行",
            r"$(r-\mu)/(\sigma+\varepsilon)$，$\sigma$ 是**总体**标准差",
        ),
        (r"^G=1 时优势应为 0$", "G=1 与输入契约"),
        (r"^num_generations (= 0|为负|不是整数|是 bool)$", "必须是不小于 1 的整数"),
        (r"整数倍$", "的长度不是 `num_generations` 的整数倍"),
        (r"^计分问题的答案格式$|^七种约定对 \[0, 0, 0, 1\] 的优势$", "同一组 [0, 0, 0, 1]，七种约定各给出什么？"),
    ],
    "nb02_grpo_objective": [
        (r"^k3 惩罚|^两策略相同时惩罚应严格为 0", "k3 的数值、非负、两策略相同时为 0"),
        (
            r"形状不同（不允许广播）$|^policy_logps 与 ref_logps 形状不同$",
            "两个输入形状不同时抛出中文说明的 `ValueError`（不要依赖广播）",
        ),
        (r"^两个候选、比率|^多组且含单元素组", "组内优势与一个可以手算的损失值"),
        (r"^beta=0 时忽略给出的参考策略|^参考 KL", "`beta == 0` 时不计算 KL"),
        (r"^长短候选先各自|^response_mask=None", "长短不同的候选先各自求均值再等权；response_mask=None 表示全部有效"),
        (
            r"^随机批次|^改变无效位置的值不应改变结果|^新旧策略是同一个张量的值时",
            "旧策略不接收梯度（`detach`）。**先用掩码把无效位置的对数概率比换成 0，再取 `exp`**",
        ),
        (r"^某个候选没有有效 token$", "某个候选一个有效词元都没有"),
        (r"^(beta|clip_range|eps) (<|为 inf|=)", "必须是有限的实数"),
        (r"^log_probs_new 不是二维$", "log_probs_new 必须是非空的二维张量 [N, T]"),
        (r"^新旧对数概率形状不同$", "log_probs_old 必须与 log_probs_new 同形状 [N, T]"),
        (r"^rewards 长度不等于候选数$", "rewards 必须是长度为候选数"),
        (r"^group_ids 与 rewards 形状不同$", "group_ids 必须与 rewards 同形状 [N]"),
        (r"^rewards 含 NaN$", "rewards 必须是浮点张量，且全部是有限数"),
        (r"^对数概率含 -inf$", "无效位置请填 0，而不是 -inf"),
        (r"^参考策略形状不同", "给出的 `log_probs_ref` 即使 `beta == 0` 也要与 `log_probs_new` 同形状"),
        (r"的 0/1 掩码（章节契约", "response_mask 必须是同形布尔张量"),
        (r"^response_mask 形状不同$", "response_mask 必须是与 log_probs_new 同形状 [N, T] 的布尔张量"),
        (r"^response_mask 含 0/1 以外的值$", "response_mask 必须是同形布尔张量"),
        (r"^beta > 0 却没有参考策略$", "`beta > 0` 却没有给 `log_probs_ref`"),
        (r"^无效位置的对数比为 800", "无效位置上的大数值不影响损失与梯度"),
    ],
    "nb03a_cispo_trace_lab": [
        (
            r"^手算规模的例子|^随机批次|^回答等权归约|^全被 mask 的回答|^带参考 KL|^beta=0 时忽略给出的 ref_logps",
            "手算的裁剪案例、按回答等权的归约、KL 项、全 mask 行、padding 上的极端值",
        ),
        (r"^改变 padding 位置的数值后损失不应变化|^无效位置的对数比为 800", "padding 上的极端值"),
        (r"^policy_logps 不是二维$", "policy_logps 必须是形状为 [B*G, T] 的二维浮点张量"),
        (r"^old_logps 形状不一致$", "old_logps 的形状必须与 policy_logps 相同"),
        (r"^advantages (不是一维|长度不是 B\*G)$", "advantages 必须是长度为 B*G="),
        (r"^completion_mask (形状不一致|含 0/1 以外的值)$", "的形状必须是"),
        (r"^beta < 0$", "beta 必须 >= 0"),
        (r"^beta > 0 但没有 ref_logps$", "beta > 0 时必须给出 ref_logps"),
        (r"^ref_logps 形状不一致$", "ref_logps 的形状必须与 policy_logps 相同"),
        (r"^epsilon (< 0|不在 \[0, 1\))$", "再检查 `0 <= epsilon < 1`"),
        (r"^epsilon_high (= 0|< 0)$", "再检查 `epsilon_high > 0`"),
        (r"^“梯度在哪里消失”", "梯度在哪里消失"),
        (r"^Q[2358]$", "检查 Q"),
    ],
    "nb03b_loss_family_trl": [
        (r"^loss_type=\w+ 的归约|^全部被 mask 时", "全被掩码掉的回答贡献 0"),
        (r"^per_token_loss 不是二维$|^mask 形状不一致$", "`per_token_loss` 是二维张量，`completion_mask` 形状与它相同"),
        (
            r"^未知 loss_type$|^loss_type 大小写错误$",
            '`loss_type` 是 `"grpo"`、`"bnpo"`、`"dr_grpo"`、`"dapo"`、`"cispo"` 之一',
        ),
        (
            r"^dr_grpo 缺少 max_completion_length$|^max_completion_length (不是正整数|小于 T)$",
            "`dr_grpo` 需要正整数 `max_completion_length`，且不小于 `T`",
        ),
        (
            r"^(dapo|cispo) 缺少 num_items_in_batch$|^num_items_in_batch < 0$",
            "`dapo` / `cispo` 需要 `num_items_in_batch`",
        ),
        (r"^token 级比率|^序列级比率|^默认 importance_sampling_level", "**TODO 2 `importance_ratio`**"),
        (r"^policy_logps 不是二维$|^old_logps 形状不一致$", "三个张量形状必须相同"),
        (r"^未知 importance_sampling_level$", "未知 `loss_type` 或 `importance_sampling_level` 抛出 `ValueError`"),
        (r"的逐 token 损失", "**TODO 3 `per_token_policy_loss`**"),
        (r"^advantages 长度不是 B\*G$|^beta > 0 但没有 ref_logps$", "契约：`check_policy_inputs(...)`"),
        (r"^epsilon_low (< 0|不在 \[0, 1\))$", "`0 <= epsilon_low < 1`"),
        (r"^epsilon_high < 0$|^cispo 的 epsilon_high <= 0$", "`epsilon_high >= 0`（`cispo` 时 `> 0`）"),
        (r"^mask 含 0/1 以外的值$|^completion_mask 含 0/1 以外的值$", "取值是 bool 或 0/1"),
        (r"^Q9$", "检查 Q9"),
    ],
    "nb04_verifiable_rewards": [
        (r"^回答 ", "integer-answer-v1 的解析（最后一个整数）、状态、正确性、格式分与加权总分"),
        (r"^response=", "`response` 必须是 `str`"),
        (r"^expected_answer=", "`expected_answer` 必须是 `int`"),
        (r"^(correctness|format)_weight=", "两个权重必须是有限、非负的实数（同样拒绝 `bool`）"),
        (r"的 rewards_per_func（None -> NaN）$", "`None` 的位置是 `NaN`"),
        (r"^outputs=|^dtype 为整数类型$", "输入契约（`ValueError`）：`outputs` 为空、不是列表/元组"),
        (r"的加权奖励（跳过 NaN 列，全 NaN 行保持 NaN）$", "加权和跳过 NaN 列、全 NaN 行保持 NaN"),
        (r"^rewards_per_func 不合法$", "`rewards_per_func` 不是浮点张量或不是二维"),
        (r"^weights=", "权重个数与 `F` 不一致、不是一维、含有 NaN/inf"),
    ],
    "nb05_logprobs_masks": [
        (
            r"的掩码（保留到第一个真实 EOS，含 EOS）$|^0/1 浮点 pad_mask",
            "保留到第一个 EOS（含）、无 EOS 保留整个 pad_mask、填充位上的 EOS 不算数",
        ),
        (r"^completion_ids |^eos_token_id |^pad_mask ", "形状或 dtype 不对时抛出带中文说明的 `ValueError`"),
        (
            r"的词元对数概率（logits\[:, :-1\] 预测 input_ids\[:, 1:\]）$",
            "第 `t` 列是 `log p(input_ids[:, t+1] | 前文)`，dtype 与 `logits` 相同，并且能对 `logits` 反向传播",
        ),
        (
            r"^(B 不一致|T = 1|T 不一致|input_ids 是三维|input_ids 是浮点|logits 不是(三维|张量|浮点)|词元(越界|为负))$",
            "输入不合法（维度、dtype、形状不匹配、`T < 2`、词元越界）时抛出 `ValueError`",
        ),
    ],
    "nb07_online_grpo": [
        (r"个提示 × G=", "sample_group 的形状与排列、EOS 掩码、旧对数概率与重算一致"),
        (r"^采样分布|下的采样分布$", "给定 `seed` 时，在调用 `generate` 之前 `torch.manual_seed(seed)`"),
        (r"^同一 seed 可复现、不同 seed 得到不同的样本$", "同一个种子得到同样的样本"),
        (
            r"^num_generations < 2$|^prompts 为空$|^temperature 为 0$|^top_p > 1$|^max_new_tokens 为 0$",
            "输入契约（`ValueError`）：`prompts` 为空或不是字符串列表",
        ),
        (r"^loss_type=\w+，μ=", "返回这次更新的指标"),
        (r"^beta > 0 而没有参考对数概率$", "β > 0 却没有 `ref_per_token_logps` → `ValueError`"),
        (r"^未知的 loss_type$|^num_iterations 为 0$|^epsilon 为负$", "其余输入契约"),
        (r"^completion_mask 含 0/1 之外的值$", "`completion_mask` 接受 bool 或任意实数 dtype 的 0/1 张量"),
        (r"的指标$", "所有值都是 Python 的 `int` / `float`（`kl_ref` 可以是 `None`），可以直接写进 JSON"),
        (r"^奖励含 NaN$|^N 不是 G 的整数倍$|^掩码含 0/1 之外的值$", "`rewards` 是一维有限浮点张量"),
    ],
}


def _orphans(lesson: str, cases) -> tuple[list[str], list[str]]:
    """(whats that no family of ``lesson`` matches, families whose lesson line is not in the released notebook)."""
    import re

    import nbformat

    from autograde.grpo_grader.course import ROOT

    nb = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    text = "\n".join(cell.source for cell in nb.cells)
    families = CASE_SOURCES.get(lesson, [])
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
    """The check fails where it should: nb01's former "整数 rewards" case (no contract of the lesson) is an orphan,
    and a quote the notebook does not contain is reported."""
    from autograde.grpo_grader.oracle import Case

    orphan = Case("test_compute_group_advantages_hidden", "compute_group_advantages", what="整数 rewards")
    assert _orphans("nb01_group_advantages", [orphan])[0] == ["整数 rewards"]
    CASE_SOURCES["nb01_group_advantages"].append((r"^never$", "这句话不在笔记本里"))
    try:
        assert _orphans("nb01_group_advantages", [])[1] == ["这句话不在笔记本里"]
    finally:
        CASE_SOURCES["nb01_group_advantages"].pop()


# ----------------------------------------------------------------------------- the submission as written
def test_the_driver_runs_the_learners_notebook_as_written():
    """job_cells: every code cell of the learner in the learner's order (an added cell, an edited unlocked setup cell
    as edited), locked cells as released, test cells as markers where they stand, demonstrations left out by grade_id
    only (a learner's cell that contains a demo's text still runs), a moved bootstrap first."""
    import nbformat

    from autograde.grpo_grader.course import ROOT, load_settings
    from autograde.grpo_grader.oracle_job import job_cells
    from autograde.grpo_grader.submission import rebuild_metadata

    lesson = "nb01_group_advantages"
    release = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    sub = nbformat.reads(nbformat.writes(release), as_version=4)

    def gid(cell):
        return cell.metadata.get("nbgrader", {}).get("grade_id")

    answer = next(i for i, c in enumerate(sub.cells) if gid(c) == "compute_group_advantages")
    imports = next(c for c in sub.cells if c.cell_type == "code" and gid(c) is None and "import math" in c.source)
    imports.source = imports.source.replace("import math\n", "import math\nimport numpy as np\n", 1)
    demo = next(c for c in sub.cells if gid(c) == "demo_timing")
    sub.cells.insert(answer, nbformat.v4.new_code_cell("def _helper():\n    return 1\n"))
    sub.cells.insert(answer + 2, nbformat.v4.new_code_cell("# copied from the demo\n" + demo.source))
    bootstrap = next(c for c in sub.cells if gid(c) == "bootstrap")
    bootstrap.source += "\n# edited by the learner"
    sub.cells.remove(bootstrap)
    sub.cells.append(bootstrap)  # moved to the end
    rebuilt, _ = rebuild_metadata(sub, release)
    oracle = oracle_lib.load_oracle(lesson)
    cells = job_cells(release, rebuilt, oracle, load_settings().demo_cells[lesson])
    ids = [c["id"] for c in cells]
    sources = [c.get("source", "") for c in cells]
    released_bootstrap = next(c for c in release.cells if gid(c) == "bootstrap").source
    assert ids[0] == "bootstrap" and sources[0] == released_bootstrap and ids.count("bootstrap") == 1
    assert "def _helper():\n    return 1\n" in sources
    assert ids.index("compute_group_advantages") == sources.index("def _helper():\n    return 1\n") + 1
    assert any("import numpy as np" in s for s in sources), "the edited imports cell runs as the learner wrote it"
    assert "demo_timing" not in ids and "demo_pipeline_answers" not in ids
    assert any(s.startswith("# copied from the demo") for s in sources), "a learner's cell is never a demo"
    markers = [c["id"] for c in cells if c.get("test")]
    assert markers == [t for t in oracle.tests if t in markers] and set(markers) == set(oracle.tests)
    assert ids.index("test_compute_group_advantages_visible") > ids.index("compute_group_advantages")
    assert all(c.after == c.test for c in oracle.cases("job-cells-seed", {}))


@pytest.mark.slow  # builds every lesson's notebook from its source (~8 s)
def test_copies_of_the_reference_are_found_and_independent_answers_are_not(released_course):
    """Fingerprints over every lesson: the worked answer with renamed names, comments and a dead assignment keeps
    >= 80% of its fingerprint in the reference; every answer of s02 (written independently) stays below 80% of both
    the reference and s01's answer (the flags' threshold)."""
    import re

    import nbformat

    from autograde.grpo_grader.course import ROOT
    from autograde.grpo_grader.learner_grading import COPY_THRESHOLD, reference_fingerprints
    from autograde.grpo_grader.submission import MIN_PRINTS, answer_sources, containment, fingerprints, similarity
    from autograde.sample_class.build import load_cases, worked_answers

    independent = load_cases()["s02_independent_answers"]
    checked = 0
    for lesson in LESSONS:
        release = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
        stubs = {gid: fingerprints(source) for gid, source in answer_sources(release).items()}
        reference = reference_fingerprints(lesson, released_course["course"])
        for gid, source in worked_answers(lesson).items():
            if gid not in stubs:  # a markdown answer
                continue
            own = fingerprints(source) - stubs[gid]
            if len(own) < MIN_PRINTS:
                continue
            disguised = re.sub(r"\b(mask|valid|ratio|loss|rewards|values|out)\b", r"\1_renamed", source)
            disguised = disguised.replace("\n    ", "\n    _ = None  # 无用的一行\n    ", 1)
            prints = fingerprints(disguised) - stubs[gid]
            assert containment(prints, reference[gid] | reference.get("*", frozenset())) >= COPY_THRESHOLD, gid
            mine = independent.get(lesson, {}).get("cells", {}).get(gid)
            if mine is not None:
                theirs = fingerprints(mine) - stubs[gid]
                if len(theirs) >= MIN_PRINTS:
                    assert containment(theirs, reference[gid] | reference.get("*", frozenset())) < COPY_THRESHOLD, gid
                    assert similarity(theirs, own) < COPY_THRESHOLD, gid
                    checked += 1
    assert checked >= 15, checked


def test_review_flags_read_only_the_lines_the_learner_wrote():
    """``import numpy as np`` added to nb04's imports cell (which imports ``subprocess`` and ``sys`` as released)
    raises no flag; a line the learner adds that calls ``subprocess`` does."""
    import nbformat

    from autograde.grpo_grader.course import ROOT
    from autograde.grpo_grader.learner_grading import compare_with_release, scan_flags

    lesson = "nb04_verifiable_rewards"
    release = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    sub = nbformat.reads(nbformat.writes(release), as_version=4)
    imports = next(c for c in sub.cells if c.cell_type == "code" and "import subprocess" in c.source)
    assert "import subprocess" in imports.source and not imports.metadata.get("nbgrader")
    imports.source = imports.source.replace("import math\n", "import math\nimport numpy as np\n", 1)
    assert scan_flags(compare_with_release(sub, release)[2]) == []
    imports.source += "\nsubprocess.run(['ls', '/'])\n"
    assert scan_flags(compare_with_release(sub, release)[2]) == ["processes"]
