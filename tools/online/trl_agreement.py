"""The lesson's ``grpo_step`` against a real ``GRPOTrainer``: loss and gradient on one rollout batch.

``trl_agreement``: one batch (unequal lengths inside groups, advantages whose group sums are not 0, a reference
model that differs from the policy, perturbed old log-probs: ``agreement_batch``) is handed to ``GRPOTrainer``'s
``_compute_loss``; its loss and gradient are compared with the lesson's ``grpo_step`` for every loss type x beta in
{0, 0.04} x use_bias_correction_kl (``MATRIX``), with a sensitivity check per row (it must fail when one side drops
the option the row exercises). ``agreement_table``: the result as the lesson's Markdown table.
"""

from __future__ import annotations

import copy

from tools.loss_types import CLIPPED_LOSS_TYPES
from tools.online.config import OnlineConfig
from tools.online.trl_trainer import grpo_config, make_trainer

# The comparison matrix: every loss type of grpo_step x beta in {0, 0.04} x use_bias_correction_kl in {False, True}.
MATRIX_LOSS_TYPES = CLIPPED_LOSS_TYPES
MATRIX_BETAS = (0.0, 0.04)
MATRIX = [
    {"loss_type": lt, "beta": beta, "use_bias_correction_kl": bc}
    for lt in MATRIX_LOSS_TYPES
    for beta in MATRIX_BETAS
    for bc in (False, True)
]
AGREEMENT_RTOL = 1e-5  # relative: |a - b| / max(|a|, |b|) for the loss, ||ga - gb|| / max(||ga||, ||gb||) for gradients
MATRIX_EPSILON, MATRIX_EPSILON_HIGH = 0.2, 0.28
# One process, one optimizer step per rollout batch: dapo's normaliser (num_items_in_batch) equals bnpo's
# (the batch's mask sum), so these two reductions give the same loss by construction (TRL's code, _compute_loss).
EQUIVALENT_LOSS_TYPES = {frozenset(("bnpo", "dapo"))}


def relative_difference(a, b) -> float:
    """|a - b| / max(|a|, |b|) (norms for tensors), 0 when both are 0."""
    import torch

    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    scale = max(float(a.norm()), float(b.norm()))
    return 0.0 if scale == 0.0 else float((a - b).norm()) / scale


def mixed_reference(policy, other, weight: float = 0.5):
    """A reference model that differs from ``policy``: every weight (1 - ``weight``) * policy + ``weight`` * other.

    ``other`` is the pre-SFT checkpoint (the random-init tiny model). Measured on the agreement batch (2 cores,
    seed 3): k3 KL per completion token 0.003 / 0.03 / 0.39 at weight 0.1 / 0.3 / 0.5 (printed as ``kl_ref``);
    the unmixed pre-SFT model is no use, its KL on tokens the policy finds unlikely reaches thousands of nats and
    drowns the clipped term."""
    import torch

    ref = copy.deepcopy(policy).eval()
    with torch.no_grad():
        for p, q in zip(ref.parameters(), other.parameters()):
            p.mul_(1.0 - weight).add_(q.to(p.dtype), alpha=weight)
            p.requires_grad_(False)
    return ref


def agreement_batch(
    sample_group,
    policy,
    ref_model,
    tokenizer,
    problems,
    num_generations=4,
    prompts=3,
    max_new_tokens=6,
    seed=3,
    old_noise=0.3,
) -> dict:
    """A rollout batch on which every row of MATRIX can disagree with TRL (it is checked, not assumed):

    * completions sampled by the lesson's ``sample_group`` from ``policy``, then some cut short (never past their
      EOS) so that no group has equal completion lengths (``grpo`` and ``bnpo`` / ``dr_grpo`` differ);
    * advantages drawn at random, so per-group sums are not zero (reductions do not cancel to ~0);
    * ``ref_model`` is another network (the pre-SFT checkpoint), so the KL to the reference is not 0;
    * old log-probs perturbed by ``old_noise`` * N(0, 1) on valid positions, so ratios differ from 1 and clipping
      fires at both ends.
    Returns the rollout dict (the lesson's keys) plus ``advantages`` and the unperturbed ``on_policy_old``.
    """
    import torch

    rollout = sample_group(
        policy,
        tokenizer,
        [p["prompt"] for p in problems[:prompts]],
        num_generations,
        temperature=1.0,
        max_new_tokens=max_new_tokens,
        seed=seed,
        ref_model=ref_model,
    )
    n, width = rollout["completion_ids"].shape
    gen = torch.Generator().manual_seed(seed)
    eos_lengths = rollout["completion_mask"].sum(1).cpu()  # [N] up to and including the first EOS
    pattern = torch.tensor([1 + (i * 5 + i // num_generations) % width for i in range(n)])  # [N]
    lengths = torch.minimum(eos_lengths, pattern)  # [N] cut inside the sampled completion, never past its EOS
    mask = torch.arange(width)[None, :] < lengths[:, None]  # [N, C]
    on_policy_old = rollout["old_per_token_logps"].masked_fill(~mask, 0.0)  # [N, C]
    noise = old_noise * torch.randn((n, width), generator=gen)  # [N, C]
    advantages = torch.randn(n, generator=gen)  # [N] group sums != 0
    batch = dict(
        rollout,
        completion_mask=mask,
        old_per_token_logps=(on_policy_old + noise).masked_fill(~mask, 0.0),
        ref_per_token_logps=rollout["ref_per_token_logps"].masked_fill(~mask, 0.0),
    )
    group_lengths = lengths.view(-1, num_generations)  # [B, G]
    if bool((group_lengths.max(1).values == group_lengths.min(1).values).any()):
        raise ValueError("每组的回答长度应不全相同")
    if bool((advantages.view(-1, num_generations).sum(1).abs() < 1e-3).any()):
        raise ValueError("每组的优势之和应不为 0")
    return dict(batch, advantages=advantages, on_policy_old=on_policy_old)


def course_loss_and_grad(
    grpo_step,
    model,
    batch,
    *,
    loss_type,
    beta,
    use_bias_correction_kl,
    epsilon=MATRIX_EPSILON,
    epsilon_high=MATRIX_EPSILON_HIGH,
    old=None,
    max_completion_length=None,
):
    """The lesson's ``grpo_step`` (one epoch) on a fresh copy of ``model``: (epoch-0 loss, flat gradient, metrics).

    SGD at lr 0 leaves the weights as they were and a ``max_grad_norm`` of 1e12 leaves the gradient unscaled
    (clip_grad_norm_ multiplies by min(1, max_norm / norm) = 1), so ``p.grad`` after the call is the loss's gradient.
    """
    import torch

    copy_ = copy.deepcopy(model)
    rollout = batch if old is None else dict(batch, old_per_token_logps=old)
    out = grpo_step(
        copy_,
        torch.optim.SGD(copy_.parameters(), lr=0.0),
        rollout,
        batch["advantages"],
        num_iterations=1,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        beta=beta,
        loss_type=loss_type,
        max_grad_norm=1e12,
        temperature=1.0,
        max_completion_length=max_completion_length,
        use_bias_correction_kl=use_bias_correction_kl,
    )
    grad = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double() for p in copy_.parameters()]
    )
    return out["losses"][0], grad, out


def reward_never_called(completions, **kwargs):
    """The reward of a trainer whose rollout is given (``trl_loss_and_grad``, ``trl_scenarios.trl_scenario``):
    nothing is sampled, so nothing is scored."""
    raise RuntimeError("the trainer's rollout is given; no reward is scored")


def trl_inputs(batch) -> dict:
    """``batch`` (the lesson's rollout keys plus ``advantages``) as TRL's trainer holds a rollout: the dict its
    ``_generate_and_score_completions`` returns and ``_compute_loss`` reads (masks as integers,
    ``num_items_in_batch``: the batch's count of valid completion tokens)."""
    mask = batch["completion_mask"]
    return {
        "prompt_ids": batch["prompt_ids"],
        "prompt_mask": batch["prompt_mask"].long(),
        "completion_ids": batch["completion_ids"],
        "completion_mask": mask.long(),
        "advantages": batch["advantages"],
        "old_per_token_logps": batch["old_per_token_logps"],
        "ref_per_token_logps": batch["ref_per_token_logps"],
        "num_items_in_batch": mask.sum().to(batch["old_per_token_logps"].dtype),
    }


def trl_loss_and_grad(
    model,
    tokenizer,
    problems,
    batch,
    *,
    loss_type,
    beta,
    use_bias_correction_kl,
    epsilon=MATRIX_EPSILON,
    epsilon_high=MATRIX_EPSILON_HIGH,
    max_completion_length=6,
):
    """A real ``GRPOTrainer`` (its config built from the same settings) computes ``_compute_loss`` on ``batch`` with
    a fresh copy of ``model``; backward gives its gradient. Returns (loss, flat gradient)."""
    import torch

    config = OnlineConfig(
        num_generations=4,
        prompts_per_step=3,
        max_new_tokens=max_completion_length,
        loss_type=loss_type,
        beta=beta,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        use_bias_correction_kl=use_bias_correction_kl,
    )
    trl_model = copy.deepcopy(model)
    # the trainer never samples here: a dataset of one step's prompts is enough (rendering every problem's chat
    # prompt for each of the matrix's 24 trainers was a third of the agreement's time)
    trainer = make_trainer(
        trl_model,
        tokenizer,
        problems[: config.prompts_per_step],
        grpo_config(config, max_steps=1),
        reward_never_called,
    )
    if trainer.args.use_bias_correction_kl is not use_bias_correction_kl or trainer.beta != beta:
        raise RuntimeError("GRPOConfig did not take the settings")
    inputs = trl_inputs(batch)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.training_step during train(); one step here
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grad = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double()
            for p in trainer.model.parameters()
        ]
    )
    return float(loss.detach()), grad


def _disagrees(course, trl_loss, trl_grad) -> dict:
    loss_rel, grad_rel = relative_difference(course[0], trl_loss), relative_difference(course[1], trl_grad)
    return {"loss_rel": loss_rel, "grad_rel": grad_rel, "detected": max(loss_rel, grad_rel) > AGREEMENT_RTOL}


def matrix_key(setting) -> tuple:
    """A row of the matrix as a key: (loss_type, beta, use_bias_correction_kl)."""
    return setting["loss_type"], setting["beta"], setting["use_bias_correction_kl"]


def trl_matrix_references(policy, tokenizer, problems, batch, matrix=None, max_new_tokens=6) -> dict:
    """TRL's side of every row of ``matrix`` (default MATRIX) on ``batch``, computed once:
    {``matrix_key``: (loss, flat gradient)}."""
    return {
        matrix_key(setting): trl_loss_and_grad(
            policy,
            tokenizer,
            problems,
            batch,
            loss_type=setting["loss_type"],
            beta=setting["beta"],
            use_bias_correction_kl=setting["use_bias_correction_kl"],
            max_completion_length=max_new_tokens,
        )
        for setting in matrix or MATRIX
    }


def matrix_row(grpo_step, policy, batch, setting, trl, max_new_tokens=6) -> dict:
    """One row of the matrix: the lesson's ``grpo_step`` (epoch 0) against TRL's (loss, gradient) ``trl``."""
    lt, beta, bc = matrix_key(setting)
    course = course_loss_and_grad(
        grpo_step,
        policy,
        batch,
        loss_type=lt,
        beta=beta,
        use_bias_correction_kl=bc,
        max_completion_length=max_new_tokens,
    )
    metrics = course[2]
    row = {
        "loss_type": lt,
        "beta": beta,
        "use_bias_correction_kl": bc,
        "course_loss": course[0],
        "trl_loss": trl[0],
        "loss_rel": relative_difference(course[0], trl[0]),
        "grad_rel": relative_difference(course[1], trl[1]),
        "grad_norm": float(trl[1].norm()),
        "clip_ratio_low": metrics["clip_ratio_low"],
        "clip_ratio_high": metrics["clip_ratio_high"],
        "kl_ref": metrics["kl_ref"],
    }
    row["agree"] = max(row["loss_rel"], row["grad_rel"]) <= AGREEMENT_RTOL
    return row


def trl_agreement(
    sample_group,
    grpo_step,
    policy,
    ref_model,
    tokenizer,
    problems,
    matrix=None,
    sensitivity=True,
    max_new_tokens=6,
    seed=3,
    references=None,
) -> list[dict]:
    """Loss and gradient of the lesson's ``grpo_step`` vs ``GRPOTrainer._compute_loss`` for every row of ``matrix``
    (default MATRIX) on one ``agreement_batch``. ``references`` (``trl_comparison.trl_references``): the batch and
    TRL's side already computed, reused here.

    With ``sensitivity``, each row is also compared after one side drops the option the row exercises, and each
    such comparison must disagree (``detected``) for the comparison to be able to fail:
    ``loss_type`` -> each other loss type on the course side (except EQUIVALENT_LOSS_TYPES);
    ``old log-probs`` -> the course side uses the unperturbed ones; ``epsilon_high`` -> the course side uses epsilon;
    for beta > 0: ``beta`` -> 0 on the course side, and ``use_bias_correction_kl`` flipped on the course side and,
    separately, on the TRL side (so the option really reaches GRPOConfig). With beta = 0 TRL ignores
    use_bias_correction_kl, and the flipped course side must agree (``not_exercised``).
    """
    import torch

    matrix = matrix or MATRIX
    if references is None:
        torch.manual_seed(seed)
        batch = agreement_batch(
            sample_group, policy, ref_model, tokenizer, problems, max_new_tokens=max_new_tokens, seed=seed
        )
        trl_side = trl_matrix_references(policy, tokenizer, problems, batch, matrix, max_new_tokens)
    else:
        batch, trl_side = references["batch"], references["matrix"]
    rows = []
    for setting in matrix:
        lt, beta, bc = matrix_key(setting)
        trl_loss, trl_grad = trl_side[matrix_key(setting)]
        row = matrix_row(grpo_step, policy, batch, setting, (trl_loss, trl_grad), max_new_tokens)
        if sensitivity:
            common = dict(max_completion_length=max_new_tokens)
            course = course_loss_and_grad(
                grpo_step, policy, batch, loss_type=lt, beta=beta, use_bias_correction_kl=bc, **common
            )
            checks, not_exercised = {}, {}
            kw = dict(loss_type=lt, beta=beta, use_bias_correction_kl=bc, **common)
            for other in MATRIX_LOSS_TYPES:
                if other != lt and frozenset((lt, other)) not in EQUIVALENT_LOSS_TYPES:
                    checks[f"loss_type={other}"] = _disagrees(
                        course_loss_and_grad(grpo_step, policy, batch, **dict(kw, loss_type=other)), trl_loss, trl_grad
                    )
            checks["on-policy old"] = _disagrees(
                course_loss_and_grad(grpo_step, policy, batch, old=batch["on_policy_old"], **kw), trl_loss, trl_grad
            )
            checks["epsilon_high=epsilon"] = _disagrees(
                course_loss_and_grad(grpo_step, policy, batch, epsilon_high=MATRIX_EPSILON, **kw), trl_loss, trl_grad
            )
            flipped = course_loss_and_grad(grpo_step, policy, batch, **dict(kw, use_bias_correction_kl=not bc))
            if beta > 0:
                checks["beta=0"] = _disagrees(
                    course_loss_and_grad(grpo_step, policy, batch, **dict(kw, beta=0.0)), trl_loss, trl_grad
                )
                checks["course use_bias_correction_kl flipped"] = _disagrees(flipped, trl_loss, trl_grad)
                trl_flipped = trl_loss_and_grad(
                    policy,
                    tokenizer,
                    problems,
                    batch,
                    loss_type=lt,
                    beta=beta,
                    use_bias_correction_kl=not bc,
                    max_completion_length=max_new_tokens,
                )
                checks["TRL use_bias_correction_kl flipped"] = _disagrees(course, *trl_flipped)
            else:
                not_exercised["use_bias_correction_kl flipped (beta = 0)"] = _disagrees(flipped, trl_loss, trl_grad)
            row["sensitivity"] = checks
            row["not_exercised"] = not_exercised
        rows.append(row)
    return rows


def agreement_table(rows) -> str:
    def sens(row):
        checks = row.get("sensitivity", {})
        caught = sum(c["detected"] for c in checks.values())
        return f"{caught}/{len(checks)}" if checks else "—"

    return (
        "| loss_type | beta | use_bias_correction_kl | 裁剪比例 low / high | kl_ref | 本课损失 | TRL 损失 | "
        "损失相对差 | 梯度相对差 | 改掉一项后能发现的差异 |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
        + "\n".join(
            f"| {r['loss_type']} | {r['beta']} | {r['use_bias_correction_kl']} | "
            f"{r['clip_ratio_low']:.3f} / {r['clip_ratio_high']:.3f} | "
            f"{'—' if r['kl_ref'] is None else format(r['kl_ref'], '.3f')} | {r['course_loss']:.6f} | "
            f"{r['trl_loss']:.6f} | {r['loss_rel']:.1e} | {r['grad_rel']:.1e} | {sens(r)} |"
            for r in rows
        )
    )
