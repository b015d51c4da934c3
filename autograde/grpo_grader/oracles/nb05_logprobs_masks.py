"""Oracle of lesson 5 (nb05_logprobs_masks): the completion mask from EOS and the shifted token log-probs.

References are the grader's own: a row-by-row scan for the mask, float64 log-softmax (and its gradient by
autograd in this process) for the log-probs.
"""

from __future__ import annotations

import torch

from ..vocabulary import Case, Close, Raises
from ._common import QWEN2_MODEL, choice, randint

TESTS = {
    "test_completion_mask_from_eos_visible": "completion_mask_from_eos",
    "test_shifted_token_logps_visible": "shifted_token_logps",
}
# where each case family comes from: (regex over a case's ``what``, the line of the released notebook - TODO
# text, docstring, provided check or visible test - that states it); a case no family matches is an orphan
CASE_SOURCES = [
    (
        r"的掩码（保留到第一个真实 EOS，含 EOS）$|^0/1 浮点 pad_mask",
        "保留到第一个 EOS（含）、无 EOS 保留整个 pad_mask、填充位上的 EOS 不算数",
    ),
    (r"^completion_ids |^eos_token_id |^pad_mask ", "形状或 dtype 不对时抛出带中文说明的 `ValueError`"),
    (
        r"的词元对数概率（logits\[:, :-1\] 预测 input_ids\[:, 1:\]）$",
        "第 `t` 列是 `log p(input_ids[:, t+1] | 前文)`，dtype 与 `logits` 相同，并且能对 `logits` 反向传播",
    ),
    (
        r"^(B 不一致|T = 1|T 不一致|input_ids 是三维|input_ids 是浮点|logits 不是(三维|张量|浮点)|词元(越界|为负))$",
        "输入不合法（维度、dtype、形状不匹配、`T < 2`、词元越界）时抛出 `ValueError`",
    ),
]
# the setup cell loads the tiny checkpoint in the kernel
ZYGOTE_IMPORTS = QWEN2_MODEL
FLAGS = {
    "zero_one_float_masks": False,  # C1: a float 0/1 pad_mask gives the bool mask's result (today: ValueError)
}


def mask_reference(ids: torch.Tensor, eos: int, pad: torch.Tensor | None) -> torch.Tensor:
    b, t = ids.shape
    pad = torch.ones(b, t, dtype=torch.bool) if pad is None else pad.bool()
    rows = []
    for i in range(b):
        row, stopped = [], False
        for j in range(t):
            real = bool(pad[i, j])
            row.append(real and not stopped)
            if real and int(ids[i, j]) == eos:
                stopped = True
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool).reshape(b, t)


def logps_reference(logits: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor | None = None):
    """(values [B, T-1] float64, d sum(weights * values) / d logits [B, T, V] float64)."""
    x = logits.detach().to(torch.float64).requires_grad_(True)
    rows = x[:, :-1, :]
    values = rows.gather(-1, ids[:, 1:].long().unsqueeze(-1)).squeeze(-1) - torch.logsumexp(rows, dim=-1)
    w = torch.ones_like(values) if weights is None else weights.to(torch.float64)
    (grad,) = torch.autograd.grad((values * w).sum(), x)
    return values.detach(), grad


def cases(gen: torch.Generator, flags: dict) -> list[Case]:
    out: list[Case] = []
    test = "test_completion_mask_from_eos_visible"
    settings = [
        (1, 1, 3),
        (2, randint(gen, 5, 8), 4),
        (randint(gen, 4, 6), randint(gen, 10, 14), 6),
        (randint(gen, 7, 9), 9, 3),
        (randint(gen, 12, 18), randint(gen, 25, 40), 5),
        (3, randint(gen, 50, 70), 40),
    ]
    index = 0
    for b, t, vocab in settings:
        for layout in ("none", "right", "left", "holes"):
            ids = torch.randint(0, vocab, (b, t), generator=gen)
            eos = randint(gen, 0, vocab - 1)
            lengths = torch.randint(0, t + 1, (b,), generator=gen)
            positions = torch.arange(t).unsqueeze(0)
            pad = {
                "none": None,
                "right": positions < lengths.unsqueeze(1),
                "left": positions >= (t - lengths).unsqueeze(1),
                "holes": torch.rand(b, t, generator=gen) < 0.7,
            }[layout]
            if pad is not None:
                ids = torch.where(pad, ids, torch.full_like(ids, eos))  # padding carries the EOS id
                if b > 1:
                    ids[0] = torch.where(pad[0], torch.full_like(ids[0], (eos + 1) % vocab), ids[0])  # no real EOS
            ids = ids.to([torch.int64, torch.int32, torch.int16][index % 3])
            pad_arg = (
                pad if (pad is None or index % 2) else pad.to(choice(gen, [torch.int64, torch.int32, torch.uint8]))
            )
            args = (ids, eos) if pad is None else (ids, eos, pad_arg)
            out.append(
                Case(
                    test,
                    "completion_mask_from_eos",
                    args,
                    {},
                    Close(mask_reference(ids, eos, pad)),
                    what=f"B={b}, T={t}, 布局 {layout} 的掩码（保留到第一个真实 EOS，含 EOS）",
                )
            )
            index += 1
    if flags.get("zero_one_float_masks"):
        ids = torch.randint(0, 5, (4, 9), generator=gen)
        pad = torch.rand(4, 9, generator=gen) < 0.7
        out.append(
            Case(
                test,
                "completion_mask_from_eos",
                (ids, 2, pad.to(torch.float32)),
                {},
                Close(mask_reference(ids, 2, pad)),
                what="0/1 浮点 pad_mask 与布尔 pad_mask 结果相同",
            )
        )
    ids = torch.randint(0, 9, (2, 5), generator=gen)
    for args, what in [
        (([[1, 2, 3]], 3), "completion_ids 不是张量"),
        ((ids[0], 3), "completion_ids 不是二维"),
        ((torch.ones(2, 3, 4, dtype=torch.long), 3), "completion_ids 是三维"),
        ((ids.bool(), 1), "completion_ids 是布尔"),
        ((ids.double(), 3), "completion_ids 是浮点"),
        ((ids, 3.0), "eos_token_id 是浮点"),
        ((ids, True), "eos_token_id 是 bool"),
        ((ids, "9"), "eos_token_id 是字符串"),
        ((ids, 3, torch.ones(2, 4, dtype=torch.bool)), "pad_mask 形状不一致"),
        ((ids, 3, torch.ones(5, dtype=torch.bool)), "pad_mask 是一维"),
        ((ids, 3, torch.full((2, 5), 2)), "pad_mask 含 0/1 以外的值"),
        ((ids, 3, [[1] * 5] * 2), "pad_mask 不是张量"),
    ]:
        out.append(Case(test, "completion_mask_from_eos", args, {}, Raises("ValueError"), what=what))

    test = "test_shifted_token_logps_visible"
    for b, t, vocab in [
        (1, 2, 2),
        (2, randint(gen, 4, 6), 7),
        (3, randint(gen, 8, 10), randint(gen, 20, 40)),
        (4, randint(gen, 12, 18), 50),
        (2, randint(gen, 30, 36), 5),
    ]:
        for dtype in (torch.float32, torch.float64):
            logits = (torch.randn(b, t, vocab, generator=gen, dtype=torch.float64) * 3).to(dtype)
            ids = torch.randint(0, vocab, (b, t), generator=gen)
            if dtype == torch.float32:
                ids = ids.to(torch.int32)
            weights = torch.randn(b, t - 1, generator=gen, dtype=torch.float64)
            values, grad = logps_reference(logits, ids, weights)
            tol = 1e-5 if dtype == torch.float32 else 1e-10
            out.append(
                Case(
                    test,
                    "shifted_token_logps",
                    (logits, ids),
                    {},
                    Close(values.to(dtype), atol=tol, rtol=tol, dtype=dtype),
                    what=f"B={b}, T={t}, V={vocab}, {dtype} 的词元对数概率（logits[:, :-1] 预测 input_ids[:, 1:]）",
                    grads={0: Close(grad.to(dtype), atol=tol * 10, rtol=tol * 10, dtype=dtype)},
                    backward_weights=weights,
                )
            )
    logits = torch.randn(2, 4, 6, generator=gen)
    ids = torch.randint(0, 6, (2, 4), generator=gen)
    for args, what in [
        ((logits[0], ids[0]), "logits 不是三维"),
        ((logits.long(), ids), "logits 不是浮点"),
        ((logits, ids.double()), "input_ids 是浮点"),
        ((logits, ids[:1]), "B 不一致"),
        ((logits, ids[:, :-1]), "T 不一致"),
        ((logits, ids.unsqueeze(-1)), "input_ids 是三维"),
        ((logits[:, :1], ids[:, :1]), "T = 1"),
        ((logits, ids + 6), "词元越界"),
        ((logits, ids - 6), "词元为负"),
        ((logits.tolist(), ids), "logits 不是张量"),
    ]:
        out.append(Case(test, "shifted_token_logps", args, {}, Raises("ValueError"), what=what))
    for case in out:
        case.inputs_unchanged = True
    return out
