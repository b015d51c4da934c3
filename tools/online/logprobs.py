"""Per-token log-probs (and entropies) of completion tokens at a sampling temperature, as TRL's ``GRPOTrainer``
computes them: the logits divided by the temperature first, so the log-probs are those of the sampled distribution.
And what mu = 1 allows when the update's forward (with grad) and the sampling forward (without) do not agree bit for
bit: ``grad_forward_gap`` measures their difference, ``mu1_bounds`` turns it into the bounds a test may use.
"""

from __future__ import annotations

import math


def completion_logps(
    model,
    prompt_ids,
    prompt_mask,
    completion_ids,
    completion_mask,
    temperature: float = 1.0,
    with_entropy: bool = False,
):
    """Per-token log-probs ``[N, C]`` of the completion tokens (and entropies ``[N, C]`` if asked).

    One forward pass over ``prompt + completion``; logits are divided by ``temperature`` first (as TRL's
    ``GRPOTrainer`` does, so the log-probs are those of the distribution that was sampled). Positions outside
    ``completion_mask`` are still computed (the caller masks them); nothing of size ``[N, C, V]`` is kept
    besides the logits themselves. The log-probs are float32 whatever the model's dtype (``selective_log_softmax``
    upcasts half-precision logits); so are the entropies, computed one row at a time (float32 temporaries of
    ``[C, V]``, not ``[N, C, V]``).
    """
    import torch

    from tools.post_training_runtime import selective_log_softmax

    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [N, P+C]
    attention_mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)  # [N, P+C]
    width = completion_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # [N, P+C, V]
    logits = logits[:, -width - 1 : -1, :] / temperature  # [N, C, V] the distributions that produced each token
    logps = selective_log_softmax(logits, completion_ids)  # [N, C]
    if not with_entropy:
        return logps
    with torch.no_grad():
        entropy = torch.stack([_entropy(row) for row in logits])  # [N, C]
    return logps, entropy


def _entropy(logits):
    """Entropy of ``softmax(logits)`` over the last axis, in float32: ``[..., V] -> [...]``."""
    import torch

    logits = logits.float()
    return -(torch.softmax(logits, dim=-1) * torch.log_softmax(logits, dim=-1)).sum(-1)


def grad_forward_gap(model, rollout: dict, temperature: float = 1.0) -> float:
    """max |log-prob of a forward with grad - the same forward without| over the completion tokens of ``rollout``.

    At mu = 1 the ratio is exp(update forward (with grad) - sampling forward (without grad)) of one model at one set
    of weights: exactly 1 only when the two forwards compute the same numbers. With the same kernels they do (0.0
    here); a device may choose another attention kernel when gradients are required, and then in bf16 the two differ
    by rounding. The model is left in the mode it is in (lesson 7's loop never switches it); nothing runs backward.
    """
    import torch

    args = (rollout["prompt_ids"], rollout["prompt_mask"], rollout["completion_ids"], rollout["completion_mask"])
    with torch.no_grad():
        without = completion_logps(model, *args, temperature=temperature)  # [N, C]
    with torch.enable_grad():
        with_grad = completion_logps(model, *args, temperature=temperature)  # [N, C]
    mask = rollout["completion_mask"].bool()  # [N, C]
    return float((with_grad.detach() - without).masked_fill(~mask, 0.0).abs().max())


# The float32 tolerances of lesson 7's mu = 1 checks when both forwards agree bit for bit: approx_kl is then exactly 0
# and the loss equals the reference formula up to the float32 rounding of two differently ordered sums.
MU1_APPROX_KL_ATOL = 1e-6
MU1_LOSS_ATOL = 1e-5


def mu1_bounds(gap: float, max_abs_advantage: float, epsilon: float = 0.2, epsilon_high: float | None = None) -> dict:
    """What mu = 1 allows when the update's log-probs differ from the sampling ones by at most ``gap`` per token
    (``grad_forward_gap``; 0 when both forwards run the same kernels). Then ``|log rho| <= gap`` on every token:

    * ``clip_possible``: clipping can only trigger if ``gap >= log(1 + epsilon_high)`` or ``gap >= -log(1 - epsilon)``;
    * ``approx_kl`` = mean(rho - 1 - log rho) <= e^gap - 1 - gap (f(d) = e^d - 1 - d is largest at d = +gap on
      [-gap, gap]), plus ``MU1_APPROX_KL_ATOL``;
    * ``loss_atol``: without clipping the loss is -mean_rows(sum_t rho A m / n), the reference formula with rho = 1
      differs by at most max|A| * max|rho - 1| <= max|A| * (e^gap - 1), plus ``MU1_LOSS_ATOL``.

    With ``gap = 0`` these are the float32 tolerances. In bf16 (unit roundoff u = 2^-8) a kernel difference moves a
    log-prob by up to about 2 u max|logit| (log-softmax is 2-Lipschitz in the max norm): a gap of order 0.01 - 0.1,
    far above the float32 tolerances (tests/test_device_numerics.py measures one).
    """
    if not (isinstance(gap, (int, float)) and math.isfinite(gap) and gap >= 0):
        raise ValueError(f"gap 必须是非负的有限数，收到 {gap!r}")
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    return {
        "gap": float(gap),
        "clip_possible": gap >= min(math.log1p(epsilon_high), -math.log1p(-epsilon)),
        "approx_kl": math.expm1(gap) - gap + MU1_APPROX_KL_ATOL,
        "loss_atol": max_abs_advantage * math.expm1(gap) + MU1_LOSS_ATOL,
    }
