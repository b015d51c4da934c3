"""The in-memory policy lesson 7's grading uses: the tiny Qwen2 architecture, seeded, briefly fine-tuned on
two-digit sums so that sampled completions end with EOS often; built once per process and seed, handed out as
copies.
"""

from __future__ import annotations

import copy
import random

from tools.online.task import chat_prompt, problem

GRADING_SFT_STEPS = 40
# the optimizers a grading case may hand to grpo_step (torch.optim's, defaults but the learning rate): AdamW, as the
# lesson's loop; SGD, whose step keeps the gradient's scale (AdamW's first step is lr * g / |g| per coordinate), so
# that the weights after the update show how the gradient was clipped
GRADING_OPTIMIZERS = {"adamw": "AdamW", "sgd": "SGD"}


_GRADING_POLICIES: dict = {}  # seed -> (model, tokenizer) as built, in this process


def grading_policy(seed: int = 0):
    """(model, tokenizer): the tiny Qwen2 architecture, seeded random init, then GRADING_SFT_STEPS steps of SFT on
    ``a+b=`` -> answer<EOS> so that sampled completions end with EOS often. Built in memory (no file cache), on one
    torch thread, once per process and seed; every call returns its own deep copy (5 ms), so no caller sees what
    another did to its model.

    For the lesson's grading oracle (autograde/grpo_grader/oracles/nb07_online_grpo.py): the grader and the
    learner-side driver build the same weights, ~4 CPU-seconds; the grader's oracle zygote builds them once before it
    forks the lesson's drivers (``ZYGOTE_WARM`` of the oracle).
    """
    import torch

    if seed not in _GRADING_POLICIES:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _GRADING_POLICIES[seed] = _build_grading_policy(seed)
        finally:
            torch.set_num_threads(threads)
    model, tokenizer = _GRADING_POLICIES[seed]
    return copy.deepcopy(model), copy.deepcopy(tokenizer)


def grading_optimizer(name: str, params, lr: float):
    """The optimizer ``name`` of ``GRADING_OPTIMIZERS`` over ``params`` at ``lr``: the grader's reference and the
    learner-side harness build the same one."""
    import torch

    return getattr(torch.optim, GRADING_OPTIMIZERS[name])(params, lr=lr)


def _build_grading_policy(seed: int):
    import torch

    from tools import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    tokenizer.padding_side = "left"
    model = tiny_model._build_model(
        dict(tiny_model.TINY_ARCHITECTURE, vocab_size=len(tokenizer)), tokenizer, seed, torch.float32
    )
    rows = []
    for item in (problem((a, b)) for a in range(10) for b in range(10)):  # single-digit a+b (not the lesson's task)
        prompt_ids = tokenizer(chat_prompt(tokenizer, item["prompt"]), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(f"{item['answer']}{tokenizer.eos_token}", add_special_tokens=False)["input_ids"]
        rows.append(prompt_ids + answer_ids)
    order = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(GRADING_SFT_STEPS):
        batch = [rows[order.randrange(len(rows))] for _ in range(16)]
        width = max(len(r) for r in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)  # [B, T]
        labels = torch.full((len(batch), width), -100, dtype=torch.long)  # [B, T]
        for i, row in enumerate(batch):
            ids[i, : len(row)] = torch.tensor(row)
            labels[i, len(row) - 3 : len(row)] = torch.tensor(row[-3:])
        model(
            input_ids=ids, attention_mask=(labels != -100) | (ids != tokenizer.pad_token_id), labels=labels
        ).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model, tokenizer
