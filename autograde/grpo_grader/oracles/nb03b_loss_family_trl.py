"""Oracle of lesson 3b (nb03b_loss_family_trl): TRL's loss family - the reduction per loss_type, the
importance ratio (token / sequence level), the per-token policy loss, and check question Q9.

References: ``_policy_losses`` (float64, autograd).
"""

from __future__ import annotations

import torch

from ..vocabulary import Case, Close, Raises, Satisfies, as_number, close_number
from . import _policy_losses as ref_impl
from ._common import choice, normal, randint, uniform

TESTS = {
    "test_reduce_per_token_loss": "reduce_per_token_loss",
    "test_importance_ratio": "importance_ratio",
    "test_per_token_policy_loss": "per_token_policy_loss",
    "test_q9": "q9_answer",
}
# where each case family comes from: (regex over a case's ``what``, the line of the released notebook - TODO
# text, docstring, provided check or visible test - that states it); a case no family matches is an orphan
CASE_SOURCES = [
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
    (r"^Q9($|（)", "检查 Q9"),
]
FLAGS = {
    "mask_values_checked": False,  # C1: a mask value other than 0/1 -> ValueError
}


def _tol(dtype):
    return 1e-9 if dtype == torch.float64 else 2e-5


def _reduce_cases(gen, flags):
    test, out = "test_reduce_per_token_loss", []
    for dtype, n, t in [
        (torch.float64, randint(gen, 4, 6), randint(gen, 6, 8)),
        (torch.float32, randint(gen, 8, 10), 12),
        (torch.float64, 1, 1),
        (torch.float32, randint(gen, 14, 18), randint(gen, 25, 32)),
    ]:
        ptl = normal(gen, (n, t), 2.0, dtype=dtype)
        lengths = torch.randint(0, t + 1, (n,), generator=gen)
        lengths[0] = max(1, int(lengths[0]))
        mask = torch.arange(t)[None, :] < lengths[:, None]
        lmax = t + randint(gen, 0, 4)
        nitems = int(mask.sum()) + randint(gen, 0, 40)
        weights = torch.rand(n, t, generator=gen, dtype=torch.float64)
        for loss_type in ref_impl.LOSS_TYPES:
            for items in (nitems, torch.tensor(nitems)):
                kwargs = {"max_completion_length": lmax, "num_items_in_batch": items}
                value, grad = ref_impl.evaluate(
                    lambda p, **r: ref_impl.reduce(p, r["mask"], loss_type, lmax, nitems), {"policy": ptl, "mask": mask}
                )
                out.append(
                    Case(
                        test,
                        "reduce_per_token_loss",
                        (ptl, ref_impl.mask_as(gen, mask), loss_type),
                        kwargs,
                        Close(value.to(dtype), atol=_tol(dtype), rtol=_tol(dtype), dtype=dtype),
                        what=f"loss_type={loss_type} 的归约（{dtype}, {n}x{t}）",
                        grads={
                            0: Close(
                                grad.to(dtype),
                                atol=_tol(dtype),
                                rtol=_tol(dtype),
                                dtype=dtype,
                                what="每个 token 的梯度权重",
                            )
                        },
                    )
                )
        del weights
    z = normal(gen, (3, 4))
    zm = torch.zeros(3, 4, dtype=torch.bool)
    for loss_type in ref_impl.LOSS_TYPES:
        out.append(
            Case(
                test,
                "reduce_per_token_loss",
                (z, zm, loss_type),
                {"max_completion_length": 4, "num_items_in_batch": 0},
                Close(torch.tensor(0.0, dtype=torch.float64), atol=0.0),
                what=f"全部被 mask 时 {loss_type} 的归约为 0",
            )
        )
    ptl = normal(gen, (2, 4))
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    contracts = [
        ((ptl, mask, "ppo"), {}, "未知 loss_type"),
        ((ptl, mask, "GRPO"), {}, "loss_type 大小写错误"),
        ((ptl, mask, "dr_grpo"), {}, "dr_grpo 缺少 max_completion_length"),
        ((ptl, mask, "dr_grpo"), {"max_completion_length": 3}, "max_completion_length 小于 T"),
        ((ptl, mask, "dr_grpo"), {"max_completion_length": 0}, "max_completion_length 不是正整数"),
        ((ptl, mask, "dapo"), {}, "dapo 缺少 num_items_in_batch"),
        ((ptl, mask, "cispo"), {}, "cispo 缺少 num_items_in_batch"),
        ((ptl, mask, "dapo"), {"num_items_in_batch": -1}, "num_items_in_batch < 0"),
        ((ptl, mask[:, :2], "grpo"), {}, "mask 形状不一致"),
        ((ptl[0], mask[0], "grpo"), {}, "per_token_loss 不是二维"),
    ]
    if flags.get("mask_values_checked"):
        contracts.append(((ptl, mask * 2, "grpo"), {}, "completion_mask 含 0/1 以外的值"))
    out += [Case(test, "reduce_per_token_loss", a, k, Raises("ValueError"), what=w) for a, k, w in contracts]
    return out


def _token_ratio(policy, old, mask):
    """The lesson's token-level ratio: exp of the log-ratio masked to 0 first (1 at masked positions, C3)."""
    return torch.exp(torch.where(mask.bool(), policy - old, torch.zeros_like(policy)))


def _ratio_cases(gen, flags):
    test, out = "test_importance_ratio", []
    for dtype, n, t in [
        (torch.float64, randint(gen, 3, 5), randint(gen, 5, 7)),
        (torch.float32, randint(gen, 6, 8), 11),
        (torch.float64, 3, 1),
        (torch.float32, randint(gen, 10, 14), randint(gen, 20, 30)),
    ]:
        policy, old, adv, mask, ref = ref_impl.batch(gen, n, t, dtype, empty_row=n % 2 == 1, prefix=bool(n % 3))
        value, _ = ref_impl.evaluate(
            lambda p, **r: _token_ratio(p, r["old"], r["mask"]), {"policy": policy, "old": old, "mask": mask}
        )
        out.append(
            Case(
                test,
                "importance_ratio",
                (policy, old, ref_impl.mask_as(gen, mask), "token"),
                {},
                Close(value.to(dtype), atol=_tol(dtype), rtol=_tol(dtype), dtype=dtype),
                what=f"token 级比率（{dtype}, {n}x{t}）",
            )
        )
        value, grad = ref_impl.evaluate(
            lambda p, **r: ref_impl.ratio(p, r["old"], r["mask"], "sequence"),
            {"policy": policy, "old": old, "mask": mask},
        )
        out.append(
            Case(
                test,
                "importance_ratio",
                (policy, old, ref_impl.mask_as(gen, mask), "sequence"),
                {},
                Close(value.to(dtype), atol=_tol(dtype), rtol=_tol(dtype), dtype=dtype),
                what=f"序列级比率（只看有效 token 的几何平均，{dtype}, {n}x{t}）",
                grads={0: Close(grad.to(dtype), atol=_tol(dtype), rtol=_tol(dtype), dtype=dtype)},
            )
        )
    policy, old, adv, mask, ref = ref_impl.batch(gen, 2, 3, torch.float64)
    value, _ = ref_impl.evaluate(
        lambda p, **r: _token_ratio(p, r["old"], r["mask"]), {"policy": policy, "old": old, "mask": mask}
    )
    out.append(
        Case(
            test,
            "importance_ratio",
            (policy, old, mask),
            {},
            Close(value, atol=1e-9, rtol=1e-9),
            what="默认 importance_sampling_level 为 token",
        )
    )
    contracts = [
        ((policy, old, mask, "segment"), "未知 importance_sampling_level"),
        ((policy, old[:1], mask), "old_logps 形状不一致"),
        ((policy, old, mask[:, :1], "sequence"), "mask 形状不一致"),
        ((policy[0], old[0], mask[0]), "policy_logps 不是二维"),
    ]
    out += [Case(test, "importance_ratio", a, {}, Raises("ValueError"), what=w) for a, w in contracts]
    return out


def _per_token_cases(gen, flags):
    test, out = "test_per_token_policy_loss", []
    settings = [
        (torch.float64, "dapo", 0.2, 0.28, "token", 0.0),
        (torch.float32, "grpo", 0.2, 0.28, "token", 0.04),
        (torch.float64, "cispo", 0.2, 5.0, "token", 0.0),
        (torch.float32, "cispo", 0.2, 1.5, "token", 0.1),
        (torch.float64, "grpo", 3e-4, 4e-4, "sequence", 0.0),
        (torch.float64, "bnpo", 0.2, 0.28, "sequence", 0.05),
        (torch.float64, "cispo", 0.2, 1.2, "sequence", 0.0),
        (torch.float32, "dr_grpo", 0.1, 0.3, "token", 0.0),
    ]
    for dtype, loss_type, low, high, level, beta in settings:
        n, t = randint(gen, 5, 10), randint(gen, 5, 12)
        policy, old, adv, mask, ref = ref_impl.batch(gen, n, t, dtype, spread=2.0, empty_row=randint(gen, 0, 2) == 0)
        weights = torch.rand(n, t, generator=gen, dtype=torch.float64) * mask
        kwargs = {
            "loss_type": loss_type,
            "epsilon_low": low,
            "epsilon_high": high,
            "importance_sampling_level": level,
            "beta": beta,
        }
        if beta:
            kwargs["ref_logps"] = ref
        rk = dict(loss_type=loss_type, epsilon_low=low, epsilon_high=high, level=level, beta=beta, ref=ref)
        value, grad = ref_impl.evaluate(
            lambda p, **r: ref_impl.per_token(p, r["old"], r["adv"], r["mask"], **{**rk, "ref": r["ref"]}),
            {"policy": policy, "old": old, "adv": adv, "mask": mask, "ref": ref},
            weights=weights,
        )
        tol = 1e-9 if dtype == torch.float64 else 3e-5
        out.append(
            Case(
                test,
                "per_token_policy_loss",
                (policy, old, adv, ref_impl.mask_as(gen, mask)),
                kwargs,
                Close(value.to(dtype), atol=tol, rtol=tol, dtype=dtype, where=mask),
                what=f"{loss_type}/{level} 的逐 token 损失（{dtype}, {n}x{t}, ε=({low}, {high}), beta={beta}）",
                grads={0: Close(grad.to(dtype), atol=tol, rtol=tol, dtype=dtype)},
                backward_weights=weights,
            )
        )
    # hand-sized: clip-higher bounds on both sides, the CISPO branch, sequence ratios broadcast over T
    r = torch.tensor(
        [[uniform(gen, 1.21, 1.27), uniform(gen, 1.3, 1.4), uniform(gen, 0.72, 0.79), uniform(gen, 0.6, 0.7)]],
        dtype=torch.float64,
    )
    p, o, m = torch.log(r), torch.zeros(1, 4, dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool)
    for adv, loss_type, kwargs in [
        (1.0, "dapo", {"epsilon_low": 0.2, "epsilon_high": 0.28}),
        (-1.0, "grpo", {"epsilon_low": 0.2, "epsilon_high": 0.28}),
        (2.0, "cispo", {"epsilon_high": 1.3}),
        (1.0, "grpo", {"importance_sampling_level": "sequence"}),
    ]:
        a = torch.tensor([adv], dtype=torch.float64)
        rk = {
            "loss_type": loss_type,
            "epsilon_low": kwargs.get("epsilon_low", 0.2),
            "epsilon_high": kwargs.get("epsilon_high", 0.28),
            "level": kwargs.get("importance_sampling_level", "token"),
        }
        value, _ = ref_impl.evaluate(
            lambda q, **z: ref_impl.per_token(q, z["old"], z["adv"], z["mask"], **rk),
            {"policy": p, "old": o, "adv": a, "mask": m},
        )
        out.append(
            Case(
                test,
                "per_token_policy_loss",
                (p, o, a, m),
                {"loss_type": loss_type, **kwargs},
                Close(value, atol=1e-9, rtol=1e-9),
                what=f"{loss_type}、A={adv:g}、{kwargs} 的逐 token 损失",
            )
        )
    if flags.get("mask_values_checked"):
        out.append(
            Case(
                test,
                "per_token_policy_loss",
                (p, o, torch.tensor([1.0], dtype=torch.float64), m.long() * 2),
                {},
                Raises("ValueError"),
                what="completion_mask 含 0/1 以外的值",
            )
        )
    policy, old, adv, mask, ref = ref_impl.batch(gen, 4, 3, torch.float64)
    contracts = [
        ({"loss_type": "ppo"}, "未知 loss_type"),
        ({"epsilon_low": 1.0}, "epsilon_low 不在 [0, 1)"),
        ({"epsilon_low": -0.1}, "epsilon_low < 0"),
        ({"epsilon_high": -0.1}, "epsilon_high < 0"),
        ({"loss_type": "cispo", "epsilon_high": 0.0}, "cispo 的 epsilon_high <= 0"),
        ({"importance_sampling_level": "seq"}, "未知 importance_sampling_level"),
        ({"beta": 0.1}, "beta > 0 但没有 ref_logps"),
    ]
    out += [
        Case(test, "per_token_policy_loss", (policy, old, adv, mask), k, Raises("ValueError"), what=w)
        for k, w in contracts
    ]
    out.append(
        Case(
            test,
            "per_token_policy_loss",
            (policy, old, adv[:-1], mask),
            {},
            Raises("ValueError"),
            what="advantages 长度不是 B*G",
        )
    )
    return out


def _q9(short_len, long_len):
    """grpo: each answer's tokens share 1/len of its weight, so a long token weighs short/long of a short one;
    dapo (and bnpo): every token weighs 1/(all tokens): ratio 1."""

    def check(value):
        if not isinstance(value, dict) or set(value) != {"grpo", "dapo"}:
            return "q9_ratio 应返回键为 'grpo'、'dapo' 的字典"
        for key, want in (("grpo", short_len / long_len), ("dapo", 1.0)):
            got = as_number(value[key], tensor_ok=False)
            if got is None or not close_number(got, want, 1e-6):
                return f"{key} 归约下长短回答的单 token 权重之比不对（{short_len} 与 {long_len} 个词元）"
        return None

    return check


def cases(gen: torch.Generator, flags: dict) -> list[Case]:
    out = _reduce_cases(gen, flags) + _ratio_cases(gen, flags) + _per_token_cases(gen, flags)
    lengths = [(3, 30)]  # the question's own, then two drawn pairs of different ratios
    while len(lengths) < 3:
        short = randint(gen, 1, 20)
        pair = (short, short + randint(gen, 1, 60))
        if all(pair[0] * b != a * pair[1] for a, b in lengths):
            lengths.append(pair)
    for short, long in lengths:
        out.append(
            Case(
                "test_q9",
                "q9_ratio",
                (short, long),
                {},
                Satisfies(_q9(short, long)),
                what=f"Q9（{short} 与 {long} 个词元）",
            )
        )
    return out


__all__ = ["TESTS", "FLAGS", "cases", "choice"]
