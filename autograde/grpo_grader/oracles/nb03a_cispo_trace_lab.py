"""Oracle of lesson 3a (nb03a_cispo_trace_lab): MiniMind's GRPO and CISPO policy losses, the gradient
question and the check questions Q2, Q3, Q5, Q8 (Q1, Q4, Q6, Q7 are graded by hand).

References: ``_policy_losses`` (float64, autograd).
"""

from __future__ import annotations

import torch

from ..vocabulary import Case, Close, Exact, Raises, Satisfies, as_number, close_number
from . import _policy_losses as ref_impl
from ._common import choice, randint, uniform

TESTS = {
    "test_grpo_policy_loss": "grpo_policy_loss",
    "test_cispo_policy_loss": "cispo_policy_loss",
    "test_gradient_answers": "gradient_answers",
    "test_q2": "q2_answer",
    "test_q3": "q3_answer",
    "test_q5": "q5_answer",
    "test_q8": "q8_answer",
}
# where each case family comes from: (regex over a case's ``what``, the line of the released notebook - TODO
# text, docstring, provided check or visible test - that states it); a case no family matches is an orphan
CASE_SOURCES = [
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
    (r"^“梯度在哪里消失”", "评分时还会用别的 `A` 与 `r` 检查同一个函数"),
    (r"^Q[2358]($|（)", "检查 Q"),
]
FLAGS = {
    "masked_large_log_ratio": False,  # C3: log-ratio 800 at masked positions leaves loss and grad finite, unchanged
    "mask_values_checked": False,  # C1: a mask value other than 0/1 -> ValueError
}


def grpo_ref(policy, old, adv, mask, epsilon=0.2, beta=0.0, ref=None):
    return ref_impl.reduce(
        ref_impl.per_token(policy, old, adv, mask, "grpo", epsilon, epsilon, "token", beta, ref), mask, "grpo"
    )


def cispo_ref(policy, old, adv, mask, epsilon_high=5.0, beta=0.0, ref=None):
    return ref_impl.reduce(
        ref_impl.per_token(policy, old, adv, mask, "cispo", 0.2, epsilon_high, "token", beta, ref), mask, "grpo"
    )


def _loss_case(test, call, reference, what, policy, old, adv, mask, mask_arg=None, grads=True, **kwargs):
    """kwargs: the function's keyword arguments (epsilon / epsilon_high, beta, ref_logps)."""
    ref_kwargs = {("ref" if k == "ref_logps" else k): v for k, v in kwargs.items()}
    value, grad = ref_impl.evaluate(
        lambda p, **rest: reference(p, rest["old"], rest["adv"], rest["mask"], **ref_kwargs),
        {"policy": policy, "old": old, "adv": adv, "mask": mask},
    )
    dtype = policy.dtype
    tol = 1e-9 if dtype == torch.float64 else 2e-5
    return Case(
        test,
        call,
        (policy, old, adv, mask if mask_arg is None else mask_arg),
        kwargs,
        Close(value.to(dtype), atol=tol, rtol=tol, dtype=dtype, what="损失"),
        what=what,
        grads={0: Close(grad.to(dtype), atol=tol, rtol=tol, dtype=dtype, what="对 policy_logps 的梯度")}
        if grads
        else {},
    )


def _policy_cases(gen, flags, test, call, reference, clip_name, default_clip):
    out = []
    # a hand-sized case: one ratio above the band, one below, one inside; a padded position; A = +-1
    ratios = torch.tensor(
        [
            uniform(gen, 1.3, 1.8) if clip_name == "epsilon" else uniform(gen, 5.5, 8.0),
            uniform(gen, 0.3, 0.7),
            uniform(gen, 0.9, 1.1),
        ],
        dtype=torch.float64,
    )
    policy = -torch.rand(2, 3, generator=gen, dtype=torch.float64) - 0.1
    old = policy - torch.log(ratios).repeat(2, 1)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64) * uniform(gen, 0.5, 2.0)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out.append(
        _loss_case(
            test,
            call,
            reference,
            f"手算规模的例子（比率 {[round(x, 3) for x in ratios.tolist()]}）",
            policy,
            old,
            adv,
            mask.bool(),
            mask_arg=mask,
            **{clip_name: default_clip},
        )
    )
    ref = policy - uniform(gen, 0.1, 0.5)
    beta = round(uniform(gen, 0.05, 0.5), 3)
    out.append(
        _loss_case(
            test,
            call,
            reference,
            f"带参考 KL（beta={beta}）",
            policy,
            old,
            adv,
            mask.bool(),
            mask_arg=mask,
            grads=False,
            **{clip_name: default_clip, "beta": beta, "ref_logps": ref},
        )
    )
    out.append(
        _loss_case(
            test,
            call,
            reference,
            "beta=0 时忽略给出的 ref_logps",
            policy,
            old,
            adv,
            mask.bool(),
            mask_arg=mask,
            grads=False,
            **{"beta": 0.0, "ref_logps": ref},
        )
    )
    empty = torch.tensor([[1, 1, 1], [0, 0, 0]])
    out.append(
        _loss_case(
            test,
            call,
            reference,
            "全被 mask 的回答贡献 0、仍计入回答条数",
            policy,
            old,
            adv,
            empty.bool(),
            mask_arg=empty,
            grads=False,
            **{clip_name: default_clip},
        )
    )
    lengths = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])
    short = torch.log(torch.tensor([[1.1] * 4, [0.9] * 4], dtype=torch.float64))
    out.append(
        _loss_case(
            test,
            call,
            reference,
            "回答等权归约（不是所有 token 的均值）",
            short,
            torch.zeros(2, 4, dtype=torch.float64),
            torch.tensor([1.0, 1.0], dtype=torch.float64),
            lengths.bool(),
            mask_arg=lengths,
            grads=False,
        )
    )
    # random batches: dtypes, mask kinds (bool / 0-1 int / 0-1 float), KL, empty rows
    big = clip_name == "epsilon_high"
    for dtype, n, t, beta, empty_row in [
        (torch.float64, randint(gen, 5, 8), randint(gen, 7, 10), 0.0, False),
        (torch.float32, randint(gen, 7, 9), randint(gen, 4, 6), 0.04, True),
        (torch.float64, randint(gen, 10, 13), randint(gen, 12, 18), 0.1, False),
        (torch.float32, 3, 1, 0.0, False),
        (torch.float64, randint(gen, 14, 18), randint(gen, 25, 32), 0.02, True),
    ]:
        clip = choice(gen, [5.0, 1.5, 2.0]) if big else choice(gen, [0.2, 0.1, 0.3])
        policy, old, adv, mask, ref = ref_impl.batch(gen, n, t, dtype, spread=2.2 if big else 0.9, empty_row=empty_row)
        kwargs = {clip_name: clip, "beta": beta}
        if beta:
            kwargs["ref_logps"] = ref
        label = f"{dtype}, {n}x{t}, {clip_name}={clip}, beta={beta}"
        out.append(
            _loss_case(
                test,
                call,
                reference,
                f"随机批次（{label}）",
                policy,
                old,
                adv,
                mask,
                mask_arg=ref_impl.mask_as(gen, mask),
                **kwargs,
            )
        )
        moved = torch.where(mask, policy, policy + uniform(gen, 0.3, 0.9))
        out.append(
            _loss_case(
                test,
                call,
                reference,
                f"改变 padding 位置的数值后损失不应变化（{label}）",
                moved,
                old,
                adv,
                mask,
                grads=False,
                **kwargs,
            )
        )
    if flags.get("masked_large_log_ratio"):
        policy, old, adv, mask, ref = ref_impl.batch(gen, 6, 5, torch.float64)
        mask[:, 0], mask[:, -1] = True, False
        policy = policy.clone()
        policy[:, -1] = old[:, -1] + 800.0
        # the expectation is that of the same batch with log-ratio 0 at the masked positions (they must not count)
        case = _loss_case(
            test,
            call,
            reference,
            "无效位置的对数比为 800：损失与梯度有限且不变",
            torch.where(mask, policy, old),
            old,
            adv,
            mask,
            **{clip_name: default_clip},
        )
        case.args = (policy,) + tuple(case.args[1:])
        out.append(case)
    policy, old, adv, mask, ref = ref_impl.batch(gen, 4, 3, torch.float64)
    contracts = [
        ((policy, old[:, :2], adv, mask), {}, "old_logps 形状不一致"),
        ((policy, old, adv[:1], mask), {}, "advantages 长度不是 B*G"),
        ((policy, old, adv, mask[:, :2]), {}, "completion_mask 形状不一致"),
        ((policy, old, adv[None, :], mask), {}, "advantages 不是一维"),
        ((policy[0], old[0], adv, mask[0]), {}, "policy_logps 不是二维"),
        ((policy, old, adv, mask), {"beta": -0.1}, "beta < 0"),
        ((policy, old, adv, mask), {"beta": 0.1}, "beta > 0 但没有 ref_logps"),
        ((policy, old, adv, mask), {"beta": 0.1, "ref_logps": ref[:, :1]}, "ref_logps 形状不一致"),
    ]
    if clip_name == "epsilon":
        contracts += [
            ((policy, old, adv, mask), {"epsilon": 1.5}, "epsilon 不在 [0, 1)"),
            ((policy, old, adv, mask), {"epsilon": -0.1}, "epsilon < 0"),
        ]
    else:
        contracts += [
            ((policy, old, adv, mask), {"epsilon_high": 0.0}, "epsilon_high = 0"),
            ((policy, old, adv, mask), {"epsilon_high": -1.0}, "epsilon_high < 0"),
        ]
    if flags.get("mask_values_checked"):
        contracts.append(((policy, old, adv, mask.long() * 2), {}, "completion_mask 含 0/1 以外的值"))
    for args, kwargs, what in contracts:
        out.append(Case(test, call, args, kwargs, Raises("ValueError"), what=what))
    return out


def _answered(check):
    def run(value):
        if value is None:
            return "尚未作答（值仍为 None）"
        return check(value)

    return run


def _gradient_answers(advantage, ratio):
    """dL/d log pi of one token, one answer, epsilon 0.2, epsilon_high 5.0: GRPO's min(rA, clip(r)A) is constant
    (0) where the clipped branch is chosen, else -A r; CISPO's detached capped weight gives -A min(r, 5)."""
    clipped = (advantage > 0 and ratio > 1.2) or (advantage < 0 and ratio < 0.8)
    want = (0.0 if clipped else -advantage * ratio, -advantage * min(ratio, 5.0))

    def check(value):
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            return "应返回两个数 (GRPO 导数, CISPO 导数)"
        got = [as_number(v, tensor_ok=False) for v in value]
        if any(g is None for g in got):
            return "应返回两个数 (GRPO 导数, CISPO 导数)"
        for name, g, w in (("GRPO", got[0], want[0]), ("CISPO", got[1], want[1])):
            if not close_number(g, w, 1e-6, 1e-6):
                return f"A={advantage:.4g}、r={ratio:.4g} 时 {name} 的导数不对"
        return None

    return check


def _q2(i, j, g):
    def check(value):
        if type(value) is not int:
            return f"q2_flat_index 应返回 Python 整数，实际 {type(value).__name__}"
        return None if value == i * g + j else f"平铺布局中 (i={i}, j={j}, G={g}) 的下标不对"

    return check


def cases(gen: torch.Generator, flags: dict) -> list[Case]:
    out = _policy_cases(gen, flags, "test_grpo_policy_loss", "grpo_policy_loss", grpo_ref, "epsilon", 0.2)
    out += _policy_cases(gen, flags, "test_cispo_policy_loss", "cispo_policy_loss", cispo_ref, "epsilon_high", 5.0)
    situations = [(1.0, 1.5), (-1.0, 0.5), (-1.0, 1.5), (1.0, 0.5)]  # the table's, then one per region, drawn
    for low, high in ((0.3, 0.7), (0.85, 1.15), (1.3, 4.5), (5.5, 8.0)):
        situations.append((choice(gen, [1.0, -1.0]) * uniform(gen, 0.5, 2.0), uniform(gen, low, high)))
    for advantage, ratio in situations:
        out.append(
            Case(
                "test_gradient_answers",
                "gradient_answers",
                (advantage, ratio),
                {},
                Satisfies(_gradient_answers(advantage, ratio)),
                what=f"“梯度在哪里消失”（A={advantage:.3g}，r={ratio:.3g}）",
            )
        )
    for i, j, g in [(1, 2, 4)] + [(randint(gen, 1, 9), 0, randint(gen, 2, 16)) for _ in range(2)]:
        j = j or randint(gen, 1, g - 1)  # the question's own (1, 2, 4), then two drawn positions
        out.append(
            Case("test_q2", "q2_flat_index", (i, j, g), {}, Satisfies(_q2(i, j, g)), what=f"Q2（i={i}, j={j}, G={g}）")
        )
    for test, name, answer in (("test_q3", "q3_choice", "A"), ("test_q5", "q5_choice", "B")):
        out.append(
            Case(
                test,
                name,
                read=True,
                what=test[5:].upper(),
                expect=Satisfies(
                    _answered(
                        lambda v, a=answer: (
                            None
                            if v == a
                            else ("应是 'A'、'B'、'C'、'D' 之一" if v not in ("A", "B", "C", "D") else "选项不对")
                        )
                    )
                ),
            )
        )
    out.append(
        Case(
            "test_q8",
            "q8_unchanged",
            read=True,
            what="Q8",
            expect=Satisfies(
                _answered(
                    lambda v: (
                        None
                        if isinstance(v, set) and v == set("abcdefh")
                        else ("q8_unchanged 应是 'a'～'h' 组成的集合" if not isinstance(v, set) else "集合不对")
                    )
                )
            ),
        )
    )
    for case in out:
        case.inputs_unchanged = True
    return out


__all__ = ["TESTS", "FLAGS", "cases", "Exact"]
