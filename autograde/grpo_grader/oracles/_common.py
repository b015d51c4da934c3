"""Helpers for oracle modules: drawing inputs from the case generator (never from a fixed seed)."""

from __future__ import annotations

import math

import torch

# Modules a lesson's kernels import beyond the zygote's own (its ZYGOTE_IMPORTS; Oracle.zygote_imports):
# transformers' Qwen2 model (the tiny checkpoint), ~3 s per process. Not TRL's GRPOTrainer (lessons 3b and 7, ~1 s):
# a kernel zygote that had imported it (with accelerate, datasets, pyarrow) made the sample class's grading cost about
# 10 CPU-seconds more than its 10 TRL kernels saved (A/B runs of the same class, 2026-12-03).
QWEN2_MODEL = ("transformers", "transformers.models.qwen2.modeling_qwen2")


def uniform(gen: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=gen, dtype=torch.float64))


def randint(gen: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (), generator=gen))


def choice(gen: torch.Generator, options):
    options = list(options)
    return options[randint(gen, 0, len(options) - 1)]


def normal(gen: torch.Generator, shape, scale: float = 1.0, shift: float = 0.0, dtype=torch.float64) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift).to(dtype)


def distinct_ids(gen: torch.Generator, k: int, spread: int = 1000) -> torch.Tensor:
    """``k`` distinct integer ids, negatives included, in a random order."""
    return torch.randperm(2 * spread, generator=gen)[:k] - spread


def group_ids(gen: torch.Generator, n: int, k: int) -> torch.Tensor:
    """[n] unsorted ids drawn from ``k`` distinct (possibly negative) labels; every label used at least once."""
    k = max(1, min(k, n))
    labels = distinct_ids(gen, k)
    index = torch.cat([torch.arange(k), torch.randint(0, k, (n - k,), generator=gen)])
    return labels[index[torch.randperm(n, generator=gen)]]


def ragged_mask(gen: torch.Generator, rows: int, cols: int, prefix: bool = False, min_valid: int = 1) -> torch.Tensor:
    """[rows, cols] bool mask with at least ``min_valid`` true per row; non-prefix (holes) unless ``prefix``.

    Ragged for every seed: with two rows or more and room for two lengths (``cols > min_valid``), at least
    two rows differ in their number of valid tokens. A mask whose rows all have the same length cannot tell
    a per-candidate mean from a token mean, and a submission's score would then depend on the seed."""
    if prefix:
        lengths = torch.randint(min_valid, cols + 1, (rows,), generator=gen)
        if rows > 1 and cols > min_valid and bool((lengths == lengths[0]).all()):
            row = randint(gen, 0, rows - 1)
            lengths[row] = lengths[row] + 1 if int(lengths[row]) < cols else lengths[row] - 1
        return torch.arange(cols).unsqueeze(0) < lengths.unsqueeze(1)
    mask = torch.rand(rows, cols, generator=gen) < uniform(gen, 0.4, 0.8)
    for r in range(rows):
        if int(mask[r].sum()) < min_valid:
            mask[r, torch.randperm(cols, generator=gen)[:min_valid]] = True
    counts = mask.sum(dim=1)
    if rows > 1 and cols > min_valid and bool((counts == counts[0]).all()):
        row = randint(gen, 0, rows - 1)
        flip = not bool(mask[row].all())  # add a valid token where there is room, else remove one
        places = (~mask[row] if flip else mask[row]).nonzero().flatten()
        mask[row, places[randint(gen, 0, len(places) - 1)]] = flip
    return mask


MIN_RELATIVE_SPREAD = 0.02


def _relative_spread(rewards: torch.Tensor, ids: torch.Tensor) -> float:
    """The smallest population std of a group with more than one member, over 1 + max |r|: how well a float32
    answer can be computed at all (rounding in r - mean grows as max |r| / std)."""
    r, worst = rewards.to(torch.float64), math.inf
    for label in ids.unique():
        members = r[ids == label]
        if members.numel() > 1:
            worst = min(worst, float(members.std(unbiased=False)))
    return worst / (1.0 + float(r.abs().max()))


def conditioned(draw, ids: torch.Tensor) -> torch.Tensor:
    """``draw()`` again until no group's rewards are so close together that float32 rounding alone (in a correct
    answer) would exceed the comparison's tolerance: a drawn nb01 row 3e-3 apart once failed a correct float32 answer."""
    for _ in range(1000):
        rewards = draw()
        if _relative_spread(rewards, ids) >= MIN_RELATIVE_SPREAD:
            return rewards
    raise RuntimeError("could not draw well-conditioned rewards")
