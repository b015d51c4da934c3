"""What the final experiment measures around an update: how far log-probs move with no update at all (the noise
margin), the policy separation, peak memory, and the token workload (shapes, tokenizer and token-id hashes)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from tools.experiment.model import Precision

# A separation counts only when it exceeds this multiple of the measured log-prob noise (see logprob_noise).
# policy_separation = (mean new - mean old over the positive candidates) - (the same over the negative ones):
# four evaluations, each off by up to one measured gap g, so noise alone can move it by up to 4 g.
NOISE_MARGIN_FACTOR = 4.0


def logprob_noise(
    old_logps: torch.Tensor,
    first_train_logps: torch.Tensor,
    repeat_eval_logps: torch.Tensor,
    full_precision_logps: torch.Tensor | None = None,
) -> dict[str, float]:
    """How far the log-probs move with no update at all, and the margin a separation must beat.

    - ``train_eval_logprob_gap``: max |train-mode forward (with grad) - eval-mode forward (no grad)| at
      the same weights, before any step. In exact arithmetic 0; with bf16 on a GPU, train and eval may
      run different kernels (SDPA picks per mode), which is why step 1's loss is only about 0.
    - ``eval_repeat_logprob_gap``: max |eval forward - the same eval forward repeated|.
    - ``precision_logprob_gap``: max |the run's eval forward - the float32 forward at the same weights|
      (:func:`full_precision_sequence_logps`): how far bf16/fp16 rounding alone moves a log-prob (0 for
      an fp32 run; 0.0 when not given).
    - ``noise_margin = NOISE_MARGIN_FACTOR * max(the gaps)`` = 4 x the largest gap: a separation is a
      difference of two mean shifts, each a difference of two evaluations (after minus before); if every
      evaluation is off by at most g, noise moves the separation by at most 2 g + 2 g = 4 g.

    What it does not guard: the gaps are measured once, at the initial weights, on these N candidates (a
    sample of the noise, not a bound for the updated weights); one run is one seed (no spread across seeds);
    and on an fp32 CPU run all three gaps are exactly 0.0, so the margin is 0 and the rule reduces to
    "separation > 0" (every committed record so far is such a run).
    """
    old = old_logps.detach().float().cpu()  # [N]
    train_gap = float((first_train_logps.detach().float().cpu() - old).abs().max())
    repeat_gap = float((repeat_eval_logps.detach().float().cpu() - old).abs().max())
    precision_gap = (
        0.0 if full_precision_logps is None else float((full_precision_logps.detach().float().cpu() - old).abs().max())
    )
    return {
        "train_eval_logprob_gap": train_gap,
        "eval_repeat_logprob_gap": repeat_gap,
        "precision_logprob_gap": precision_gap,
        "noise_margin": NOISE_MARGIN_FACTOR * max(train_gap, repeat_gap, precision_gap),
    }


def policy_separation(old_logps: torch.Tensor, new_logps: torch.Tensor, advantages: torch.Tensor) -> float:
    """Mean log-prob shift of positive-advantage candidates minus that of negative-advantage ones.

    > 0: the update moved probability towards the candidates the verifier preferred.
    """
    shifts = new_logps.float() - old_logps.float()  # [N]
    positive, negative = advantages > 0, advantages < 0  # [N] bool
    if not positive.any() or not negative.any():
        raise ValueError("策略分离需要至少一个正优势和一个负优势候选（奖励全等的组没有方向）")
    return float(shifts[positive].mean() - shifts[negative].mean())


def restart_peak_memory(precision: Precision) -> None:
    """CUDA: restart the peak counter from what is allocated now (after a measurement-only detour, such as
    :func:`full_precision_sequence_logps`'s float32 weights, that the update itself never needs)."""
    if precision.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(precision.device)


def reset_peak_memory(precision: Precision) -> int | None:
    """CUDA: empty the cache, reset the peak counter, return ``memory_allocated`` now - what the previous
    candidate set left behind (the batch only, if the model and optimizer were freed). CPU: None."""
    if precision.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(precision.device)
        return int(torch.cuda.memory_allocated(precision.device))
    return None


def peak_memory(precision: Precision, allocated_at_start: int | None = None) -> dict[str, Any]:
    """CUDA: ``max_memory_allocated`` since the last reset (per candidate set). CPU: the process's peak
    resident set size since it started - named as such, because it is neither per candidate set nor
    tensor memory only. ``allocated_at_start``: :func:`reset_peak_memory`'s value (CUDA), else None."""
    from tools.training_mechanism_runtime import peak_rss_bytes

    rss = peak_rss_bytes()  # None where the platform cannot tell (Windows)
    rss = None if rss is None else int(rss)
    start = None if allocated_at_start is None else int(allocated_at_start)
    if precision.device.type == "cuda":
        return {
            "peak_memory_metric": "cuda_max_memory_allocated",
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(precision.device)),
            "peak_rss_bytes": rss,
            "allocated_bytes_at_start": start,
        }
    return {
        "peak_memory_metric": "process_peak_rss" if rss is not None else "unavailable",
        "peak_allocated_bytes": None,
        "peak_rss_bytes": rss,
        "allocated_bytes_at_start": start,
    }


def batch_shape_entry(name: str, batch: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """What one candidate set's batch costs: ``[B, T]``, per-row response tokens (the scored ones:
    ``response_mask[:, 1:]``, end-of-turn token included), prompt tokens and attended tokens."""
    input_ids = batch["input_ids"]  # [B, T]
    attention = batch["attention_mask"].bool()  # [B, T]
    response = batch["response_mask"].bool()  # [B, T]
    response_tokens = [int(v) for v in response[:, 1:].sum(dim=-1).cpu()]  # [B]
    first_response = response.float().argmax(dim=-1)  # [B] index of the first response token
    return {
        "candidate_set": name,
        "input_ids_shape": [int(v) for v in input_ids.shape],
        "response_tokens": response_tokens,
        "response_tokens_total": int(sum(response_tokens)),
        "prompt_tokens": [int(v) for v in first_response.cpu()],
        "attended_tokens_total": int(attention.sum()),
    }


def _sha256(parts: Iterable[bytes]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def tokenizer_hash(tokenizer) -> str:
    """sha256 of what decides the token ids: the tokenizer's full serialisation (vocabulary, merges,
    normaliser, pre-tokeniser, special tokens; ``backend_tokenizer.to_str()`` for a fast tokenizer) and
    its chat template. Two records with the same hash tokenised with the same rules."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        body = backend.to_str()
    else:  # a slow tokenizer: its vocabulary and special tokens
        body = json.dumps(
            {"vocab": sorted(tokenizer.get_vocab().items()), "special": sorted(map(str, tokenizer.all_special_tokens))},
            ensure_ascii=False,
        )
    template = getattr(tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):
        template = json.dumps(template, sort_keys=True, ensure_ascii=False)
    return _sha256([body.encode("utf-8"), template.encode("utf-8")])


def token_ids_hash(batches: Sequence[Mapping[str, torch.Tensor]]) -> str:
    """sha256 of every batch's ``input_ids``, ``attention_mask`` and ``response_mask`` (in order):
    equal hashes = the same token workload, token for token."""
    parts = []
    for batch in batches:
        for key in ("input_ids", "attention_mask", "response_mask"):
            tensor = batch[key].detach().cpu().to(torch.int64).contiguous()
            parts.append(json.dumps([key, list(tensor.shape)]).encode())
            parts.append(tensor.numpy().tobytes())
    return _sha256(parts)
