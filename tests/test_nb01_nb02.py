"""Notebooks 1 and 2: the solutions run green, an independently written correct answer passes every visible
and hidden test, and common wrong answers each fail at least one hidden test.

Every answer below is a complete answer-cell source substituted into the built nbgrader source notebook
(``tools.chain.notebooks.substitute_answers``), which is then executed top to bottom with nbclient through the
session fixture ``notebook_runs`` (each distinct execution happens once per test session).
Runs are grouped so that one run carries wrong answers to *different* functions (each hidden test cell
exercises one function only), and every run of a notebook happens in one warm kernel after the independent
answers (``tests/warm_kernel.py``: one execution per notebook); the run that tampers with builtins comes last.
Several wrong answers are classic mistakes whose *visible* test must name the mistake (unbiased std, std + eps,
token mean, old log-probs not detached, exp before the mask).
"""

from __future__ import annotations

import pytest
import warm_kernel  # tests/warm_kernel.py

import tools.chain.notebooks as chain

NB1 = "nb01_group_advantages"
NB2 = "nb02_grpo_objective"

pytestmark = pytest.mark.slow

# ----------------------------------------------------------------------------- independent correct answers
# Written from the formulas of the seeds (population std floored at eps; MiniMind's view(-1, G) with
# std + eps; k3 = exp(d) - d - 1; clipped surrogate, beta * KL, per-candidate mean then mean), with a
# structure unlike the worked answers: float64 Python loops over dictionaries of groups, expm1 for k3,
# the one-sided form of the clipped surrogate, and a loop over candidates.

INDEPENDENT_NB1 = {
    "compute_group_advantages": """
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    if not isinstance(rewards, torch.Tensor) or not isinstance(group_ids, torch.Tensor):
        raise ValueError("rewards / group_ids 必须是张量")
    if rewards.dim() != 1:
        raise ValueError("rewards 必须是一维")
    if tuple(group_ids.shape) != tuple(rewards.shape):
        raise ValueError("group_ids 与 rewards 形状不同")
    if len(rewards) == 0:
        raise ValueError("rewards 为空")
    if rewards.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError("rewards 必须是浮点张量")
    if group_ids.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        raise ValueError("group_ids 必须是整数类型")
    if type(eps) is bool or not isinstance(eps, (int, float)):
        raise ValueError("eps 必须是数")
    if not (0.0 < float(eps) < float("inf")):
        raise ValueError("eps 必须是正的有限数")
    values = rewards.detach().cpu().double().tolist()
    if any(v != v or v in (float("inf"), float("-inf")) for v in values):
        raise ValueError("rewards 必须有限")
    members_of = {}
    for index, gid in enumerate(group_ids.tolist()):
        members_of.setdefault(gid, []).append(index)
    result = [0.0] * len(values)
    for members in members_of.values():
        group = [values[i] for i in members]
        if len(set(group)) == 1:
            continue
        mean = sum(group) / len(group)
        spread = (sum((v - mean) ** 2 for v in group) / len(group)) ** 0.5
        for i in members:
            result[i] = (values[i] - mean) / max(spread, float(eps))
    return torch.tensor(result, dtype=torch.float64).to(dtype=rewards.dtype, device=rewards.device)
""",
    "group_relative_advantages": """
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    if type(num_generations) is not int or num_generations < 1:
        raise ValueError("num_generations 必须是 >= 1 的整数")
    if rewards.dim() != 1 or rewards.numel() % num_generations != 0:
        raise ValueError("rewards 长度必须是 num_generations 的整数倍")
    values = rewards.detach().double().tolist()
    result = []
    for start in range(0, len(values), num_generations):
        row = values[start:start + num_generations]
        mean = sum(row) / len(row)
        spread = (sum((v - mean) ** 2 for v in row) / len(row)) ** 0.5
        result.extend((v - mean) / (spread + eps) for v in row)
    return torch.tensor(result, dtype=torch.float64).to(rewards.dtype)
""",
    "answer_conventions_0001": """
def answer_conventions(group, other):
    group, n = group.tolist(), len(group)
    mean = sum(group) / n
    squares = sum((r - mean) ** 2 for r in group)
    batch = group + other.tolist()
    batch_mean = sum(batch) / (2 * n)
    batch_sample_std = (sum((r - batch_mean) ** 2 for r in batch) / (2 * n - 1)) ** 0.5
    divisor = {
        "course": max((squares / n) ** 0.5, 1e-6),
        "minimind": (squares / n) ** 0.5 + 1e-4,
        "trl_group": (squares / (n - 1)) ** 0.5 + 1e-4,
        "trl_batch": batch_sample_std + 1e-4,
        "trl_none": 1.0,
        "cs336": (squares / (n - 1)) ** 0.5 + 1e-6,
        "dr_grpo": 1.0,
    }
    return {name: ((0.0 - mean) / d, (1.0 - mean) / d) for name, d in divisor.items()}
""",
}

INDEPENDENT_NB2 = {
    "token_kl_penalty": """
def token_kl_penalty(policy_logps, ref_logps):
    if tuple(policy_logps.shape) != tuple(ref_logps.shape):
        raise ValueError("policy_logps 与 ref_logps 形状不同")
    log_ratio = ref_logps.detach() - policy_logps
    return torch.expm1(log_ratio) - log_ratio
""",
    "compute_grpo_loss": """
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    mask, clip_range, beta = check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask,
                                               clip_range, eps, log_probs_ref, beta)
    if beta != 0 and log_probs_ref is None:
        raise ValueError("beta > 0 需要参考策略")
    n_cand = log_probs_new.shape[0]
    if group_ids.is_floating_point():
        raise ValueError("group_ids 必须是整数")

    reward_list = rewards.detach().double().tolist()
    by_group = {}
    for i, g in enumerate(group_ids.tolist()):
        by_group.setdefault(g, []).append(i)
    adv = [0.0] * n_cand
    for members in by_group.values():
        vals = [reward_list[i] for i in members]
        if len(set(vals)) > 1:
            mu = sum(vals) / len(vals)
            sd = (sum((v - mu) ** 2 for v in vals) / len(vals)) ** 0.5
            for i in members:
                adv[i] = (reward_list[i] - mu) / max(sd, eps)

    new64 = log_probs_new.double()
    per_candidate = []
    for i in range(n_cand):
        valid = mask[i]
        if not bool(valid.any()):
            raise ValueError("某个候选没有有效 token")
        lp = new64[i][valid]
        rho = torch.exp(lp - log_probs_old.detach().double()[i][valid])
        a = adv[i]
        if a >= 0:
            surrogate = torch.clamp(rho, max=1.0 + clip_range) * a
        else:
            surrogate = torch.clamp(rho, min=1.0 - clip_range) * a
        token_loss = -surrogate
        if log_probs_ref is not None and beta > 0:
            d = log_probs_ref.detach().double()[i][valid] - lp
            token_loss = token_loss + beta * (torch.exp(d) - d - 1.0)
        per_candidate.append(token_loss.mean())
    loss = torch.stack(per_candidate).mean().to(log_probs_new.dtype)
    return loss, torch.tensor(adv, dtype=torch.float64).to(rewards.dtype)
""",
}

# ----------------------------------------------------------------------------- wrong answers
_CGA_HEAD = """
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    if not torch.is_tensor(rewards) or not torch.is_tensor(group_ids) or rewards.ndim != 1:
        raise ValueError("rewards 必须是一维张量")
    if group_ids.shape != rewards.shape:
        raise ValueError("group_ids 与 rewards 形状不同")
    if rewards.numel() == 0:
        raise ValueError("rewards 为空")
    if group_ids.is_floating_point() or group_ids.dtype == torch.bool:
        raise ValueError("group_ids 必须是整数")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards 含 NaN 或 inf")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError("eps 必须是正的有限数")
    _, inverse = torch.unique(group_ids, return_inverse=True)
    k = int(inverse.max()) + 1
    zeros = lambda: torch.zeros(k, dtype=rewards.dtype)
    counts = zeros().index_add_(0, inverse, torch.ones_like(rewards))
    pivot = zeros().scatter_reduce_(0, inverse, rewards, reduce="amin", include_self=False)
    shifted = rewards - pivot[inverse]
    centered = shifted - (zeros().index_add_(0, inverse, shifted) / counts)[inverse]
    squares = zeros().index_add_(0, inverse, centered * centered)
"""

WRONG_CGA_UNBIASED = (
    _CGA_HEAD
    + """
    scale = (squares / (counts - 1)).sqrt().clamp_min(eps)  # WRONG: sample (Bessel) std
    return centered / scale[inverse]
"""
)

WRONG_CGA_EPS_ADDED = (
    _CGA_HEAD
    + """
    scale = (squares / counts).sqrt() + eps  # WRONG: std + eps instead of max(std, eps)
    return centered / scale[inverse]
"""
)

WRONG_CGA_FIXTURE = """
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    # WRONG: the visible fixture's expected values, whatever the input
    s = math.sqrt(1.5)
    return torch.tensor([1.0, -1.5 / s, 0.0, -1.0, 1.5 / s, 0.0, 0.0, 0.0], dtype=rewards.dtype)
"""

# Fits every visible case (right values on the visible inputs, right ValueErrors), zeros elsewhere.
WRONG_CGA_OVERFIT = """
def compute_group_advantages(rewards, group_ids, eps=1e-6):
    if rewards.ndim != 1 or group_ids.shape != rewards.shape or rewards.numel() == 0:
        raise ValueError("rewards 与 group_ids 必须是同形状、非空的一维张量")
    if group_ids.is_floating_point() or not torch.isfinite(rewards).all() or not eps > 0:
        raise ValueError("输入不合法")
    s = math.sqrt(1.5)
    known = {
        (1.0, 0.0, 0.5, 0.5, 3.0, 0.7, 1.5, 0.5): [1.0, -1.5 / s, 0.0, -1.0, 1.5 / s, 0.0, 0.0, 0.0],
        (3.0, 3.0 + 2e-8): [-0.01, 0.01],
        (0.0, 1.0): [-0.625, 0.625],
    }
    values = known.get(tuple(rewards.tolist()), [0.0] * rewards.numel())
    return torch.tensor(values, dtype=rewards.dtype)
"""

WRONG_TAMPER_CGA = """
import builtins
torch.allclose = lambda *args, **kwargs: True
builtins.abs = lambda value: 0.0

def compute_group_advantages(rewards, group_ids, eps=1e-6):
    return torch.zeros_like(rewards)  # WRONG: zeros, after disabling the comparison helpers
"""

WRONG_GRA_FIXTURE = """
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    # WRONG: the visible fixture's expected values, whatever the input
    if num_generations < 1 or rewards.numel() % num_generations:
        raise ValueError("num_generations 不合法")
    c = math.sqrt(2.0 / 9.0) + 1e-4
    return torch.tensor([-(2 / 3) / c, (1 / 3) / c, (1 / 3) / c, 0.0, 0.0, 0.0], dtype=rewards.dtype)
"""

WRONG_GRA_FLOOR = """
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    if num_generations < 1 or rewards.ndim != 1 or rewards.numel() % num_generations:
        raise ValueError("num_generations 不合法")
    grouped = rewards.reshape(-1, num_generations)
    std = grouped.std(dim=1, unbiased=False, keepdim=True)
    return ((grouped - grouped.mean(dim=1, keepdim=True)) / std.clamp_min(eps)).reshape(-1)  # WRONG: floor
"""

WRONG_CONVENTIONS = """
def answer_conventions(group, other):
    # WRONG: population std for TRL and CS336 as well
    mu = float(group.mean())
    pop = math.sqrt(mu * (1 - mu))
    return {name: (-mu / d, (1 - mu) / d) for name, d in {
        "course": pop, "minimind": pop + 1e-4, "trl_group": pop + 1e-4, "trl_batch": pop + 1e-4,
        "trl_none": 1.0, "cs336": pop + 1e-6, "dr_grpo": 1.0}.items()}
"""

_CGL_HEAD = """
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    mask, clip_range, beta = check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask,
                                               clip_range, eps, log_probs_ref, beta)
    if beta > 0 and log_probs_ref is None:
        raise ValueError("beta > 0 需要 log_probs_ref")
    if not mask.any(dim=-1).all():
        raise ValueError("某个候选没有有效词元")
    advantages = compute_group_advantages(rewards, group_ids, eps=eps)
    a = advantages.detach().to(log_probs_new.dtype).unsqueeze(-1)
    zeros = torch.zeros_like(log_probs_new)
"""

_CGL_SURROGATE = """
    per_token = -torch.minimum(ratio * a, ratio.clamp(1 - clip_range, 1 + clip_range) * a)
    if beta > 0:
        ref = log_probs_ref.detach()
        per_token = per_token + beta * token_kl_penalty(torch.where(mask, log_probs_new, ref), ref)
    per_token = torch.where(mask, per_token, zeros)
"""

WRONG_CGL_TOKEN_MEAN = (
    _CGL_HEAD
    + """
    ratio = torch.exp(torch.where(mask, log_probs_new - log_probs_old.detach(), zeros))
"""
    + _CGL_SURROGATE
    + """
    return per_token.sum() / mask.sum(), advantages  # WRONG: token mean over the whole batch
"""
)

WRONG_CGL_OLD_NOT_DETACHED = (
    _CGL_HEAD
    + """
    ratio = torch.exp(torch.where(mask, log_probs_new - log_probs_old, zeros))  # WRONG: old policy not detached
"""
    + _CGL_SURROGATE
    + """
    return (per_token.sum(dim=-1) / mask.sum(dim=-1)).mean(), advantages
"""
)

# The reference answer before the C3 fix: exp first, mask afterwards. Finite loss, NaN gradient.
WRONG_CGL_EXP_THEN_MASK = (
    _CGL_HEAD
    + """
    ratio = torch.exp(log_probs_new - log_probs_old.detach())  # WRONG: exp of the unmasked log-ratio
    per_token = -torch.minimum(ratio * a, ratio.clamp(1 - clip_range, 1 + clip_range) * a)
    if beta > 0:
        per_token = per_token + beta * token_kl_penalty(log_probs_new, log_probs_ref)  # WRONG: unmasked KL input
    per_token = torch.where(mask, per_token, zeros)
    return (per_token.sum(dim=-1) / mask.sum(dim=-1)).mean(), advantages
"""
)

# beta > 0 without a reference is silently ignored instead of raising (C2).
WRONG_CGL_IGNORES_MISSING_REF = """
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    mask, clip_range, beta = check_grpo_inputs(log_probs_new, log_probs_old, rewards, group_ids, response_mask,
                                               clip_range, eps, log_probs_ref, beta)
    if not mask.any(dim=-1).all():
        raise ValueError("某个候选没有有效词元")
    advantages = compute_group_advantages(rewards, group_ids, eps=eps)
    a = advantages.detach().to(log_probs_new.dtype).unsqueeze(-1)
    zeros = torch.zeros_like(log_probs_new)
    ratio = torch.exp(torch.where(mask, log_probs_new - log_probs_old.detach(), zeros))
    per_token = -torch.minimum(ratio * a, ratio.clamp(1 - clip_range, 1 + clip_range) * a)
    if beta > 0 and log_probs_ref is not None:  # WRONG: a missing reference is ignored
        ref = log_probs_ref.detach()
        per_token = per_token + beta * token_kl_penalty(torch.where(mask, log_probs_new, ref), ref)
    per_token = torch.where(mask, per_token, zeros)
    return (per_token.sum(dim=-1) / mask.sum(dim=-1)).mean(), advantages
"""

WRONG_CGL_FIXTURE = """
def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    # WRONG: a visible fixture's values, whatever the input
    return torch.tensor(0.15, dtype=torch.float64), torch.tensor([-1.0, 1.0, -1.0, 1.0, 0.0])
"""

WRONG_TAMPER_CGL = """
import builtins
torch.allclose = lambda *args, **kwargs: True
builtins.abs = lambda value: 0.0

def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, clip_range=0.2,
                      eps=1e-6, log_probs_ref=None, beta=0.0):
    return (log_probs_new * 0).sum(), torch.zeros_like(rewards)  # WRONG: zeros after disabling the helpers
"""

WRONG_KL_REF_NOT_DETACHED = """
def token_kl_penalty(policy_logps, ref_logps):
    if policy_logps.shape != ref_logps.shape:
        raise ValueError("形状不同")
    delta = ref_logps - policy_logps  # WRONG: the reference receives gradient
    return torch.exp(delta) - delta - 1.0
"""

# Right on the visible test's [2, 3] input only.
WRONG_KL_OVERFIT = """
def token_kl_penalty(policy_logps, ref_logps):
    if policy_logps.shape != ref_logps.shape:
        raise ValueError("形状不同")
    if tuple(policy_logps.shape) == (2, 3):
        delta = ref_logps.detach() - policy_logps
        return torch.exp(delta) - delta - 1.0
    return policy_logps * 0.0
"""


# ----------------------------------------------------------------------------- helpers
_SOURCES: dict[str, object] = {}
INDEPENDENT = {NB1: INDEPENDENT_NB1, NB2: INDEPENDENT_NB2}


def _source(assignment):
    if assignment not in _SOURCES:
        _SOURCES[assignment] = chain.build_notebook(assignment)
    return _SOURCES[assignment]


def _variants(assignment) -> list[warm_kernel.Variant]:
    """The wrong runs of ``assignment`` as warm-kernel variants; those that patch torch/builtins come last."""
    names = sorted((n for n, run in WRONG_RUNS.items() if run[0] == assignment), key=lambda n: "tamper" in n)
    assert sum("tamper" in n for n in names) <= 1, "only one run may patch the interpreter for good"
    return [
        warm_kernel.Variant(
            tag=name,
            answers=WRONG_RUNS[name][1],
            last=[*WRONG_RUNS[name][2], *WRONG_RUNS[name][3]],
            restore="tamper" not in name,
        )
        for name in names
    ]


def _warm(notebook_runs, assignment):
    """The one execution of ``assignment`` with the independent answers, then every wrong run of it in the same
    kernel (tests/warm_kernel.py): (executed notebook, base notebook, {grade_id: result}, seconds)."""
    base = warm_kernel.without_demo_cells(
        chain.substitute_answers(_source(assignment), INDEPENDENT[assignment]), assignment
    )
    nb = warm_kernel.warm_notebook(base, _variants(assignment))
    done, seconds = notebook_runs.run_timed(nb, chain.ROOT, timeout=300)
    return done, base, chain.cell_results(done), seconds


def _graded(results, kind):
    return {gid: r for gid, r in results.items() if gid.startswith("test_") and gid.endswith(f"_{kind}")}


# ----------------------------------------------------------------------------- (a) solutions run green
@pytest.mark.parametrize("assignment, figures", [(NB1, 2), (NB2, 3)])
def test_solution_notebook_runs_green(notebook_runs, assignment, figures):
    done, seconds = notebook_runs.solution_timed(assignment)
    results = chain.cell_results(done)
    errors = chain.cell_errors(done)
    assert not errors, f"{assignment}: cells raised {errors}"
    assert _graded(results, "visible") and _graded(results, "hidden")
    images = sum("image/png" in o.get("data", {}) for c in done.cells for o in c.get("outputs", []))
    assert images == figures, f"{assignment}: expected {figures} computed figure(s), found {images}"
    print(f"{assignment}: solution executed in {seconds:.1f} s (kernel start included)")


# ----------------------------------------------------------------------------- (b) independent answers pass
@pytest.mark.parametrize("assignment, answers", [(NB1, INDEPENDENT_NB1), (NB2, INDEPENDENT_NB2)])
def test_independent_correct_answers_pass_every_test(notebook_runs, assignment, answers):
    assert answers is INDEPENDENT[assignment]
    done, base, results, seconds = _warm(notebook_runs, assignment)
    graded = {gid: r for gid, r in results.items() if gid.startswith("test_") and "@" not in gid}
    assert len(graded) >= 4
    failed = {gid: r for gid, r in graded.items() if r is not None}
    assert not failed, f"{assignment}: an independent correct answer failed {failed}"
    errors = chain.cell_errors(warm_kernel.base_part(done, base))
    assert not errors, f"{assignment}: {errors}"
    # the guard of the warm kernel: with the correct answers put back, every restored test passes again
    restored = {gid: r for gid, r in results.items() if "@restore-" in gid and gid.startswith("test_")}
    assert restored and all(r is None for r in restored.values()), restored
    print(f"{assignment}: independent answers pass {len(graded)} test cells ({seconds:.1f} s)")


# ----------------------------------------------------------------------------- (c) wrong answers are caught
# (assignment, answers, {grade_id: phrase expected in its failure message - the oracle's, run in the kernel},
#  visible grade_ids that the wrong answer is built to pass). The hidden tests are the oracle's cases (with the
# course config's oracle flags), so the messages are the oracle's.
WRONG_RUNS = {
    "nb01_unbiased_std+gra_fixture+conventions": (
        NB1,
        {
            "compute_group_advantages": WRONG_CGA_UNBIASED,
            "group_relative_advantages": WRONG_GRA_FIXTURE,
            "answer_conventions_0001": WRONG_CONVENTIONS,
        },
        {
            "test_compute_group_advantages_hidden": "随机输入",
            "test_group_relative_advantages_hidden": "形状应为",
            "test_conventions_question_hidden": "约定 trl_group",
            "test_compute_group_advantages_visible": "是否用了 unbiased std",
        },
        ["test_conventions_question_visible"],
    ),
    "nb01_eps_added+gra_floor": (
        NB1,
        {"compute_group_advantages": WRONG_CGA_EPS_ADDED, "group_relative_advantages": WRONG_GRA_FLOOR},
        {
            "test_compute_group_advantages_hidden": "随机输入",
            "test_group_relative_advantages_hidden": "随机平铺输入",
            "test_compute_group_advantages_visible": "是否用了 std + eps",
        },
        [],
    ),
    "nb01_cga_fixture": (
        NB1,
        {"compute_group_advantages": WRONG_CGA_FIXTURE},
        {"test_compute_group_advantages_hidden": "形状应为"},
        [],
    ),
    "nb01_cga_overfit_visible": (
        NB1,
        {"compute_group_advantages": WRONG_CGA_OVERFIT},
        {"test_compute_group_advantages_hidden": "随机输入", "test_compute_group_advantages_visible": "多组"},
        [],
    ),
    "nb01_tamper_zeros": (
        NB1,
        {"compute_group_advantages": WRONG_TAMPER_CGA},
        {"test_compute_group_advantages_hidden": "随机输入"},
        [],
    ),
    "nb02_token_mean+kl_ref_grad": (
        NB2,
        {"compute_grpo_loss": WRONG_CGL_TOKEN_MEAN, "token_kl_penalty": WRONG_KL_REF_NOT_DETACHED},
        {
            "test_compute_grpo_loss_hidden": "随机批次（",
            "test_token_kl_penalty_hidden": "不应接收梯度",
            "test_grpo_weighting_contract_visible": "词元平均",
        },
        [],
    ),
    "nb02_old_not_detached+kl_overfit": (
        NB2,
        {"compute_grpo_loss": WRONG_CGL_OLD_NOT_DETACHED, "token_kl_penalty": WRONG_KL_OVERFIT},
        {
            "test_compute_grpo_loss_hidden": "不应接收梯度",
            "test_token_kl_penalty_hidden": "k3 惩罚",
            "test_grpo_advantages_and_value_visible": "是否忘了对 log_probs_old 使用 detach()",
        },
        ["test_grpo_weighting_contract_visible"],
    ),  # the KL overfit fails its visible cell too (drawn inputs)
    "nb02_exp_then_mask": (
        NB2,
        {"compute_grpo_loss": WRONG_CGL_EXP_THEN_MASK},
        {"test_compute_grpo_loss_hidden": "800", "test_grpo_clip_kl_gradient_visible": "是否先 exp 再用掩码清零"},
        ["test_grpo_advantages_and_value_visible", "test_grpo_weighting_contract_visible"],
    ),
    "nb02_ignores_missing_ref": (
        NB2,
        {"compute_grpo_loss": WRONG_CGL_IGNORES_MISSING_REF},
        {"test_grpo_clip_kl_gradient_visible": "beta > 0 时必须给出 log_probs_ref"},  # the oracle's case is there
        ["test_grpo_advantages_and_value_visible"],
    ),
    "nb02_cgl_fixture": (
        NB2,
        {"compute_grpo_loss": WRONG_CGL_FIXTURE},
        {"test_compute_grpo_loss_hidden": "随机批次（"},
        [],
    ),
    "nb02_tamper_zeros": (
        NB2,
        {"compute_grpo_loss": WRONG_TAMPER_CGL},
        {"test_compute_grpo_loss_hidden": "随机批次（"},
        [],
    ),
}


@pytest.mark.parametrize("name", list(WRONG_RUNS))
def test_wrong_answers_fail_hidden_tests(notebook_runs, name):
    assignment, answers, expected_failures, passes_visible = WRONG_RUNS[name]
    _, _, all_results, seconds = _warm(notebook_runs, assignment)
    results = {gid.split("@")[0]: r for gid, r in all_results.items() if gid.endswith(f"@{name}")}
    for grade_id, phrase in expected_failures.items():
        outcome = results[grade_id]
        assert outcome is not None, f"{name}: hidden test {grade_id} passed a wrong answer"
        assert outcome.startswith("AssertionError") and phrase in outcome, (
            f"{name}: {grade_id} failed, but not on the expected check ({phrase!r}): {outcome[:300]}"
        )
    for grade_id in passes_visible:  # the hidden tests catch what the visible ones cannot
        assert results[grade_id] is None, f"{name}: expected to pass visible {grade_id}, got {results[grade_id]}"
    print(f"{name}: caught by {sorted(expected_failures)} (warm kernel of {assignment}: {seconds:.1f} s)")
