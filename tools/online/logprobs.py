"""Per-token log-probs (and entropies) of completion tokens at a sampling temperature, as TRL's ``GRPOTrainer``
computes them: the logits divided by the temperature first, so the log-probs are those of the sampled distribution.
"""

from __future__ import annotations


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
    besides the logits themselves.
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
        probs = torch.softmax(logits.float(), dim=-1)  # [N, C, V]
        entropy = -(probs * torch.log_softmax(logits.float(), dim=-1)).sum(-1)  # [N, C]
    return logps, entropy
