"""Oracle of lesson 2 (nb02_grpo_objective): the k3 reference penalty and the GRPO loss.

References are the grader's own: the penalty and the loss written token by token in float64 Python, with
the gradient with respect to ``log_probs_new`` in closed form.
"""

from __future__ import annotations

import math

import torch

from ..vocabulary import Case, Close, Each, NoGrad, Raises
from ._common import conditioned, group_ids, normal, ragged_mask, randint, uniform
from .nb01_group_advantages import course_advantages

TESTS = {
    "test_token_kl_penalty_visible": "token_kl_penalty",
    "test_token_kl_penalty_hidden": "token_kl_penalty",
    "test_grpo_advantages_and_value_visible": "compute_grpo_loss",
    "test_grpo_clip_kl_gradient_visible": "compute_grpo_loss",
    "test_grpo_weighting_contract_visible": "compute_grpo_loss",
    "test_compute_grpo_loss_hidden": "compute_grpo_loss",
}
# where each case family comes from: (regex over a case's ``what``, the line of the released notebook - TODO
# text, docstring, provided check or visible test - that states it); a case no family matches is an orphan
CASE_SOURCES = [
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
]
# Conventions being rolled out (common brief C1-C3); a correct current solution fails these, so they are off
# until the lesson implements them: c.GradingPipeline.oracle_flags = {"nb02_grpo_objective": {...: True}}
FLAGS = {
    "zero_one_masks": False,  # the chapter's contract (C1's exception): a 0/1 mask of a non-bool dtype -> ValueError
    "beta_requires_ref": False,  # C2: beta > 0 without log_probs_ref -> ValueError
    "masked_large_log_ratio": False,  # C3: a masked position with log-ratio 800 leaves loss and grad finite
}


def k3(policy: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """exp(d) - d - 1 with d = ref - policy, float64."""
    d = ref.to(torch.float64) - policy.to(torch.float64)
    return torch.exp(d) - d - 1.0


def grpo_reference(new, old, rewards, ids, mask, clip_range=0.2, eps=1e-6, ref=None, beta=0.0):
    """(loss, advantages, d loss / d new), all float64: per-candidate token means, then the candidate mean."""
    adv = course_advantages(rewards, ids, eps).tolist()
    new_l, old_l = new.to(torch.float64).tolist(), old.to(torch.float64).tolist()
    ref_l = ref.to(torch.float64).tolist() if ref is not None else None
    rows = mask.bool().tolist() if mask is not None else [[True] * len(new_l[0]) for _ in new_l]
    n, t = len(new_l), len(new_l[0])
    use_kl = ref_l is not None and beta > 0
    grad = [[0.0] * t for _ in range(n)]
    per_candidate = []
    for i in range(n):
        valid = [j for j in range(t) if rows[i][j]]
        terms = []
        for j in valid:
            rho = math.exp(new_l[i][j] - old_l[i][j])
            a = adv[i]
            clipped = min(max(rho, 1.0 - clip_range), 1.0 + clip_range)
            unclipped_wins = rho * a <= clipped * a
            objective = rho * a if unclipped_wins else clipped * a
            d_objective = rho * a if (unclipped_wins or 1.0 - clip_range < rho < 1.0 + clip_range) else 0.0
            term, d_term = -objective, -d_objective
            if use_kl:
                d = ref_l[i][j] - new_l[i][j]
                term += beta * (math.exp(d) - d - 1.0)
                d_term += beta * (1.0 - math.exp(d))
            terms.append(term)
            grad[i][j] = d_term / (len(valid) * n)
        per_candidate.append(math.fsum(terms) / len(valid))
    return (
        torch.tensor(math.fsum(per_candidate) / n, dtype=torch.float64),
        torch.tensor(adv, dtype=torch.float64),
        torch.tensor(grad, dtype=torch.float64),
    )


def _tol(dtype):
    return 1e-9 if dtype == torch.float64 else 2e-5


def batch(gen, n, t, k, dtype, prefix=True, spread=0.3):
    """(new, old, ref, rewards, ids, mask), ragged masks. ``spread`` 0.3: ratios well outside the clip band
    on both sides (hidden test); ``None``: log-ratios within +-0.15, inside the band (as the notebook's
    visible fixtures, which check clipping only above 1 + epsilon)."""
    ids = group_ids(gen, n, k)
    old = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3 - 0.05
    step = normal(gen, (n, t), 0.3 if spread is None else spread)
    new = old + (step.clamp(-0.15, 0.15) * 0.5 if spread is None else step)
    ref = old + normal(gen, (n, t), 0.5)
    rewards = conditioned(lambda: normal(gen, (n,), 2.0), ids)  # float32 answers computable within tolerance
    mask = ragged_mask(gen, n, t, prefix=prefix)
    return new.to(dtype), old.to(dtype), ref.to(dtype), rewards.to(dtype), ids, mask


def loss_case(
    test, what, new, old, rewards, ids, mask, clip_range=None, eps=None, ref=None, beta=None, grads=True, check_adv=True
):
    """A call of compute_grpo_loss with its expected (loss, advantages) and gradients. With a reference policy
    every argument is passed by position (the signature's order), so that ``log_probs_ref`` can be checked
    to receive no gradient; otherwise the optional arguments are keywords."""
    clip = 0.2 if clip_range is None else clip_range
    eps_value = 1e-6 if eps is None else eps
    beta_value = 0.0 if beta is None else beta
    if ref is not None:
        args, kwargs = (new, old, rewards, ids, mask, clip, eps_value, ref, beta_value), {}
    else:
        args = (new, old, rewards, ids) + ((mask,) if mask is not None else ())
        kwargs = {k: v for k, v in (("clip_range", clip_range), ("eps", eps), ("beta", beta)) if v is not None}
    loss, adv, grad = grpo_reference(new, old, rewards, ids, mask, clip, eps_value, ref, beta_value)
    dtype, tol = new.dtype, _tol(new.dtype)
    expect = Each(
        [
            Close(loss.to(dtype), atol=tol, rtol=tol, dtype=dtype, what="损失"),
            Close(adv, atol=tol * 10, rtol=tol * 10, dtype=rewards.dtype, what="组内优势") if check_adv else None,
        ]
    )
    grad_checks = {}
    if grads:
        grad_checks[0] = Close(
            grad.to(dtype), atol=tol * 10, rtol=tol * 10, dtype=dtype, what="对 log_probs_new 的梯度"
        )
        grad_checks[1] = NoGrad("旧策略 log_probs_old")
        if ref is not None:
            grad_checks[7] = NoGrad("参考策略 log_probs_ref")
    return Case(test, "compute_grpo_loss", args, kwargs, expect, what=what, grads=grad_checks, backward_output=0)


def cases(gen: torch.Generator, flags: dict) -> list[Case]:
    out: list[Case] = []
    # ----------------------------------------------------------------- token_kl_penalty
    vis, hid = "test_token_kl_penalty_visible", "test_token_kl_penalty_hidden"
    shape = (randint(gen, 2, 3), randint(gen, 3, 5))
    policy = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3
    ref = policy + normal(gen, shape, 0.8)
    ref[0, 0] = policy[0, 0]  # one token where both agree: exactly 0
    want = k3(policy, ref)
    out.append(
        Case(
            vis,
            "token_kl_penalty",
            (policy, ref),
            {},
            Close(want, atol=1e-12, rtol=1e-12),
            what="k3 惩罚 exp(d) - d - 1（d = ref - policy）",
            grads={0: Close(1.0 - torch.exp(ref - policy), atol=1e-12, rtol=1e-12), 1: NoGrad("参考策略 ref_logps")},
        )
    )
    out.append(
        Case(
            vis,
            "token_kl_penalty",
            (torch.zeros(2, 3), torch.zeros(2, 4)),
            {},
            Raises("ValueError"),
            what="policy_logps 与 ref_logps 形状不同",
        )
    )
    for shape in (
        (randint(gen, 3, 9),),
        (randint(gen, 2, 4), randint(gen, 3, 6)),
        (2, randint(gen, 2, 4), randint(gen, 3, 7)),
    ):
        for dtype in (torch.float32, torch.float64):
            p = (-torch.rand(shape, generator=gen, dtype=torch.float64) * 4).to(dtype)
            r = (-torch.rand(shape, generator=gen, dtype=torch.float64) * 4).to(dtype)
            w = torch.rand(shape, generator=gen, dtype=torch.float64)
            tol = 1e-12 if dtype == torch.float64 else 1e-5
            out.append(
                Case(
                    hid,
                    "token_kl_penalty",
                    (p, r),
                    {},
                    Close(k3(p, r).to(dtype), atol=tol, rtol=tol, dtype=dtype),
                    what=f"k3 惩罚（形状 {shape}, {dtype}）",
                    grads={
                        0: Close(
                            (w * (1 - torch.exp(r.double() - p.double()))).to(dtype),
                            atol=tol * 10,
                            rtol=tol * 10,
                            dtype=dtype,
                        ),
                        1: NoGrad("参考策略 ref_logps"),
                    },
                    backward_weights=w,
                )
            )
    same = -torch.rand(randint(gen, 2, 6), generator=gen, dtype=torch.float64) * 3
    out.append(
        Case(
            hid,
            "token_kl_penalty",
            (same, same.clone()),
            {},
            Close(torch.zeros_like(same), atol=0.0),
            what="两策略相同时惩罚应严格为 0",
        )
    )
    out.append(
        Case(
            hid,
            "token_kl_penalty",
            (torch.zeros(3), torch.zeros(3, 1)),
            {},
            Raises("ValueError"),
            what="形状不同（不允许广播）",
        )
    )

    # ----------------------------------------------------------------- compute_grpo_loss, visible tests
    vis = "test_grpo_advantages_and_value_visible"
    n = randint(gen, 5, 7)
    new, old, ref, rewards, ids, mask = batch(gen, n, 2, 2, torch.float32, spread=None)
    ids = torch.cat([ids[:-1], torch.tensor([9999])])  # the last candidate alone in its group
    out.append(loss_case(vis, "多组且含单元素组的优势、损失与梯度", new, old, rewards, ids, mask))
    rho = uniform(gen, 1.3, 1.8)
    out.append(
        loss_case(
            vis,
            f"两个候选、比率 {rho:.3f}：A<0 照常惩罚，A>0 超出 1+epsilon 被裁剪",
            torch.full((2, 1), math.log(rho), dtype=torch.float64),
            torch.zeros(2, 1, dtype=torch.float64),
            torch.tensor([0.0, uniform(gen, 0.5, 3.0)], dtype=torch.float64),
            torch.full((2,), randint(gen, -9, 9)),
            None,
        )
    )

    vis = "test_grpo_clip_kl_gradient_visible"
    new, old, ref, rewards, ids, mask = batch(gen, randint(gen, 4, 6), 3, 2, torch.float32, spread=None)
    beta = round(uniform(gen, 0.05, 0.3), 3)
    out.append(loss_case(vis, "beta=0 时忽略给出的参考策略", new, old, rewards, ids, mask, ref=ref, beta=0.0))
    kl_case = loss_case(
        vis, f"参考 KL（beta={beta}）按候选等权汇总；无效位置没有梯度", new, old, rewards, ids, mask, ref=ref, beta=beta
    )
    out.append(kl_case)
    if flags.get("beta_requires_ref"):
        out.append(
            Case(
                vis,
                "compute_grpo_loss",
                (new, old, rewards, ids, mask),
                {"beta": beta},
                Raises("ValueError"),
                what="beta > 0 却没有参考策略",
            )
        )

    vis = "test_grpo_weighting_contract_visible"
    value = uniform(gen, 0.5, 3.0)
    zeros = torch.zeros(2, 2)
    out.append(
        loss_case(
            vis,
            "长短候选先各自在有效 token 上求均值再等权",
            zeros,
            zeros,
            torch.tensor([0.0, value]),
            torch.tensor([3, 3]),
            torch.tensor([[True, True], [True, False]]),
            grads=False,
        )
    )
    new, old, ref, rewards, ids, mask = batch(gen, 5, 2, 2, torch.float32, spread=None)
    out.append(loss_case(vis, "response_mask=None 等同于全部有效", new, old, rewards, ids, None, grads=False))
    new, old, ref, rewards, ids, mask = batch(gen, 5, 2, 2, torch.float32, prefix=True, spread=None)
    no_valid = mask.clone()
    no_valid[randint(gen, 0, 4)] = False
    with_inf = old.clone()
    with_inf[0, 0] = float("-inf")
    bad_rewards = rewards.clone()
    bad_rewards[0] = float("nan")
    bad_mask = mask.to(torch.int64)
    bad_mask[0, 0] = 2
    contracts = [
        ((new[0], old[0], rewards[:1], ids[:1]), {}, "log_probs_new 不是二维"),
        ((new, old[:-1], rewards, ids, mask), {}, "新旧对数概率形状不同"),
        ((new, old, rewards[:-1], ids[:-1], mask), {}, "rewards 长度不等于候选数"),
        ((new, old, rewards, ids[:-1], mask), {}, "group_ids 与 rewards 形状不同"),
        ((new, old, rewards, ids, mask), {"eps": 0.0}, "eps = 0"),
        ((new, old, rewards, ids, mask), {"log_probs_ref": ref[:-1], "beta": 0.1}, "参考策略形状不同"),
        (
            (new, old, rewards, ids, mask),
            {"log_probs_ref": ref[:-1]},
            "参考策略形状不同（beta = 0 时也检查，章节契约）",
        ),
        ((new, old, rewards, ids, mask), {"beta": -0.1, "log_probs_ref": ref}, "beta < 0"),
        ((new, old, rewards, ids, mask), {"clip_range": -0.2}, "clip_range < 0"),
        ((new, old, rewards, ids, mask), {"clip_range": float("inf")}, "clip_range 为 inf"),
        ((new, old, rewards, ids, bad_mask), {}, "response_mask 含 0/1 以外的值"),
        ((new, old, rewards, ids, mask[:, :1]), {}, "response_mask 形状不同"),
        ((new, old, rewards, ids, no_valid), {}, "某个候选没有有效 token"),
        ((new, old, bad_rewards, ids, mask), {}, "rewards 含 NaN"),
        ((new, with_inf, rewards, ids, mask), {}, "对数概率含 -inf"),
    ]
    for args, kwargs, what in contracts:
        out.append(Case(vis, "compute_grpo_loss", args, kwargs, Raises("ValueError"), what=what))

    # ----------------------------------------------------------------- compute_grpo_loss, hidden test
    hid = "test_compute_grpo_loss_hidden"
    settings = [
        (randint(gen, 5, 8), randint(gen, 4, 6), 2, torch.float64, True, 0.2, 0.0),
        (randint(gen, 8, 11), randint(gen, 6, 8), 4, torch.float32, True, 0.2, round(uniform(gen, 0.01, 0.1), 3)),
        (randint(gen, 12, 15), randint(gen, 3, 5), 5, torch.float64, False, 0.1, round(uniform(gen, 0.1, 0.5), 3)),
        (randint(gen, 20, 28), randint(gen, 7, 10), 6, torch.float32, False, round(uniform(gen, 0.15, 0.3), 3), 0.0),
        (randint(gen, 6, 8), 3, 7, torch.float64, True, 0.0, 0.1),
    ]
    for n, t, k, dtype, prefix, clip, beta in settings:
        new, old, ref, rewards, ids, mask = batch(gen, n, t, k, dtype, prefix=prefix)
        label = f"N={n}, T={t}, K={k}, {dtype}, clip_range={clip}, beta={beta}, {'前缀' if prefix else '非前缀'}掩码"
        out.append(
            loss_case(hid, f"随机批次（{label}）", new, old, rewards, ids, mask, clip_range=clip, ref=ref, beta=beta)
        )
        noise = normal(gen, (n, t), 1.0, dtype=dtype)
        moved = [x + torch.where(mask, torch.zeros_like(noise), noise) for x in (new, old, ref)]
        out.append(
            loss_case(
                hid,
                f"改变无效位置的值不应改变结果（{label}）",
                moved[0],
                moved[1],
                rewards,
                ids,
                mask,
                clip_range=clip,
                ref=moved[2],
                beta=beta,
            )
        )
    # the old policy may share the current graph (TRL reuses per_token_logps when it updates once): detached
    x = -torch.rand(2, 3, generator=gen, dtype=torch.float64) - 0.1
    out.append(
        loss_case(
            hid,
            "新旧策略是同一个张量的值时，旧策略仍不接收梯度",
            x,
            x.clone(),
            torch.tensor([0.0, 1.0], dtype=torch.float64),
            torch.tensor([-3, -3]),
            None,
        )
    )
    if flags.get("zero_one_masks"):
        # The chapter's input contract ("response_mask 必须是同形布尔张量"): compute_grpo_loss is the one scoring
        # function that refuses 0/1 masks of a numeric dtype (docs/CONVENTIONS.md, C1's exception).
        for mask_dtype in (torch.float32, torch.int64, torch.uint8):
            new, old, ref, rewards, ids, mask = batch(gen, 6, 4, 2, torch.float64, prefix=False)
            out.append(
                Case(
                    hid,
                    "compute_grpo_loss",
                    (new, old, rewards, ids, mask.to(mask_dtype)),
                    {},
                    Raises("ValueError"),
                    what=f"{mask_dtype} 的 0/1 掩码（章节契约：response_mask 必须是同形布尔张量）",
                )
            )
    if flags.get("masked_large_log_ratio"):
        new, old, ref, rewards, ids, mask = batch(gen, 6, 5, 2, torch.float64, prefix=True)
        mask[:, -1] = False
        mask[:, 0] = True
        big = new.clone()
        big[:, -1] = old[:, -1] + 800.0
        case = loss_case(
            hid, "无效位置的对数比为 800 时，损失与梯度仍有限且不变", big, old, rewards, ids, mask, ref=ref, beta=0.1
        )
        out.append(case)
    for case in out:
        case.inputs_unchanged = case.test.endswith("_hidden")
    return out
