"""Lesson 7's oracle (``nb07_online_grpo.py``): the grading policy in the grader's process and what its checks compute
with it - the prompts as the lesson encodes them, float64 log-probs of given tokens at a temperature, EOS masks."""

from __future__ import annotations

import copy
import sys
from functools import lru_cache
from pathlib import Path

import torch


@lru_cache(maxsize=1)
def _policy():
    root = Path(__file__).resolve().parents[3]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from tools import online_grpo

    torch.set_num_threads(1)
    return online_grpo.grading_policy()


def _encode_prompts(tokenizer, prompts):
    rows = [
        tokenizer(
            tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )["input_ids"]
        for p in prompts
    ]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return ids, mask


def _logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature):
    """float64 log-probs [N, C] of the completion tokens (logits / temperature), 0 outside the mask."""
    m = copy.deepcopy(model).double()
    ids = torch.cat([prompt_ids, completion_ids], 1)
    att = torch.cat([prompt_mask.long(), completion_mask.long()], 1)
    with torch.no_grad():
        logits = m(input_ids=ids, attention_mask=att, use_cache=False).logits[:, -completion_ids.shape[1] - 1 : -1]
        out = torch.log_softmax(logits / temperature, -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    return torch.where(completion_mask, out, torch.zeros_like(out))


def _eos_mask(ids, eos):
    rows = []
    for row in ids.tolist():
        keep, stopped = [], False
        for token in row:
            keep.append(not stopped)
            stopped = stopped or token == eos
        rows.append(keep)
    return torch.tensor(rows, dtype=torch.bool).reshape(ids.shape)
