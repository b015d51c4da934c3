"""One GRPO update of the final experiment: the seed's sequence-level clipped objective, one optimizer step (timed,
with the fp16 GradScaler's overflow skips) and the loop that takes a number of effective steps."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from tools.experiment.model import Precision

# A GradScaler skips a step whose scaled gradients overflowed; the update loop retries until it has
# taken `update_steps` effective steps, but gives up after this many skips (a broken run, not noise).
MAX_SCALER_SKIPS = 16


def clipped_surrogate(
    new_logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's sequence-level GRPO objective and the fraction of clipped ratios.

    ratio = exp(new - old); loss = -mean(min(ratio * A, clip(ratio, 1-eps, 1+eps) * A)).
    The clip fraction counts candidates whose ratio left [1-eps, 1+eps] (the seed's definition: it
    measures how far the policy has moved, whichever side the advantage is on).
    """
    if not (new_logps.shape == old_logps.shape == advantages.shape) or new_logps.ndim != 1:
        raise ValueError("new_logps、old_logps、advantages 必须是同形状的一维张量 [N]")
    if not 0 < clip_range < 1:
        raise ValueError(f"clip_range 必须在 (0, 1) 之间，收到 {clip_range}")
    ratio = torch.exp(new_logps.float() - old_logps.float())  # [N]
    clipped_ratio = ratio.clamp(1.0 - clip_range, 1.0 + clip_range)  # [N]
    advantages = advantages.float()  # [N]
    loss = -torch.minimum(ratio * advantages, clipped_ratio * advantages).mean()  # []
    clip_fraction = ratio.detach().ne(clipped_ratio.detach()).float().mean()  # []
    return loss, clip_fraction


@dataclass(frozen=True)
class StepResult:
    loss: float
    gradient_norm: float
    clip_fraction: float
    update_ms: float
    skipped: bool = False  # fp16: the GradScaler found inf/NaN gradients and skipped optimizer.step()
    new_logps: torch.Tensor | None = None  # [N] train-mode log-probs before this step (detached, CPU fp32)


def grpo_update_step(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    trainable: Sequence[torch.nn.Parameter],
    clip_range: float,
    precision: Precision,
    scaler: torch.amp.GradScaler | None = None,
) -> StepResult:
    """One optimizer step of the clipped objective; the timing covers forward, backward and step.

    The gradient norm is taken on unscaled gradients (after ``scaler.unscale_`` in fp16). With a
    ``scaler``, an overflow (non-finite gradients) is normal: the scaler skips ``optimizer.step()`` and
    lowers its scale; the result then has ``skipped=True`` (its gradient norm is not finite) and the
    caller retries (see :func:`run_update_steps`). A non-finite loss, or non-finite gradients without a
    scaler, raise ``FloatingPointError`` instead of writing NaN evidence.
    """
    from tools.post_training_runtime import response_sequence_logps
    from tools.training_mechanism_runtime import gradient_l2_norm

    model.train()
    optimizer.zero_grad(set_to_none=True)
    precision.synchronize()
    started = time.perf_counter()
    with precision.autocast_context():
        new_logps, _ = response_sequence_logps(model, batch, normalize=True)  # [N]
    loss, clip_fraction = clipped_surrogate(new_logps, old_logps, advantages, clip_range)
    if not torch.isfinite(loss.detach()):
        raise FloatingPointError(f"GRPO 损失不是有限值：{float(loss.detach())}")
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    gradient_norm = float(gradient_l2_norm(trainable))
    skipped = False
    if scaler is not None:
        scale_before = float(scaler.get_scale())
        scaler.step(optimizer)  # skipped by the scaler when the unscaled gradients hold inf/NaN
        scaler.update()
        skipped = float(scaler.get_scale()) < scale_before  # the scale only drops after an overflow
    else:
        optimizer.step()
    precision.synchronize()
    update_ms = (time.perf_counter() - started) * 1000.0
    if not skipped and not math.isfinite(gradient_norm):
        raise FloatingPointError(f"梯度范数不是有限值：{gradient_norm}")
    return StepResult(
        float(loss.detach()), gradient_norm, float(clip_fraction), update_ms, skipped, new_logps.detach().float().cpu()
    )


def run_update_steps(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    trainable: Sequence[torch.nn.Parameter],
    clip_range: float,
    precision: Precision,
    scaler: torch.amp.GradScaler | None,
    update_steps: int,
    max_skips: int = MAX_SCALER_SKIPS,
) -> tuple[list[StepResult], int, torch.Tensor]:
    """Take ``update_steps`` *effective* optimizer steps; return ``(steps, skipped, first_new_logps)``.

    ``steps`` are the effective steps only (finite numbers); ``skipped`` counts GradScaler overflow
    skips (each one is retried; more than ``max_skips`` raises ``FloatingPointError``);
    ``first_new_logps`` [N] are the train-mode log-probs of the very first attempt, taken at the
    weights ``old_logps`` saw (so their gap to ``old_logps`` is numerical noise, see
    :func:`logprob_noise`).
    """
    if isinstance(update_steps, bool) or not isinstance(update_steps, int) or update_steps < 1:
        raise ValueError(f"update_steps 必须是正整数，收到 {update_steps!r}")
    steps: list[StepResult] = []
    skipped = 0
    first_new_logps = None
    while len(steps) < update_steps:
        result = grpo_update_step(
            model, batch, old_logps, advantages, optimizer, trainable, clip_range, precision, scaler
        )
        if first_new_logps is None:
            first_new_logps = result.new_logps
        if result.skipped:
            skipped += 1
            if skipped > max_skips:
                raise FloatingPointError(
                    f"GradScaler 连续跳过了 {skipped} 步（梯度一直溢出），已取 {len(steps)} 个有效步：这不是正常的 fp16 溢出"
                )
            continue
        steps.append(result)
    return steps, skipped, first_new_logps
