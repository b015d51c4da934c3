"""Benchmarks of the course's code against baselines measured in the same run.

    python benchmarks/run.py                # full run, writes benchmarks/results/latest.json
    python benchmarks/run.py --tiny         # every benchmark once at tiny sizes (used by the tests)
    python benchmarks/run.py --only NAME    # one benchmark group (repeatable), see --help

Every figure is a ratio against (or is reported next to) a baseline timed in this process, in this run,
on this machine: medians of repeats. Results: ``{"machine": {...}, "metrics": [{"name", "value", "unit",
"baseline", "detail"}]}``. A metric whose dependency is missing from the checkout reports ``value: null``
and ``detail.status: "not available: <reason>"``. See benchmarks/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.course_code import CourseCodeUnavailable, load_answers  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
EPS = 1e-6


class Unavailable(RuntimeError):
    """A dependency of a benchmark is not in this checkout: the metric reports value null."""


# ----------------------------------------------------------------------------- helpers
def timed(fn, repeats: int, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn`` (after ``warmup`` untimed calls)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def metric(name: str, value, unit: str, baseline: dict, detail: dict) -> dict:
    if value is not None:
        value = float(value)
    return {"name": name, "value": value, "unit": unit, "baseline": baseline, "detail": detail}


def unavailable(name: str, unit: str, baseline: dict, reason: str, goal: str | None = None) -> dict:
    detail = {"status": f"not available: {reason}"}
    if goal:
        detail["goal"] = goal
    return metric(name, None, unit, baseline, detail)


def _goal(value: float, op: str, target: float) -> bool:
    return bool(value >= target) if op == ">=" else bool(value <= target)


def _load(assignment: str, grade_ids: list[str]) -> dict:
    try:
        return load_answers(assignment, grade_ids)
    except CourseCodeUnavailable as error:
        raise Unavailable(str(error)) from error


# ----------------------------------------------------------------------------- group advantages
def seed_loop_advantages(rewards, group_ids, eps=EPS):
    """Baseline: the seed's reference formulation - one Python iteration per group id.

    A second body of the group advantages on purpose: it is the timing baseline (a loop over groups) and an
    independent reference for the values; the benchmarked code is the graded function in tools.lessons."""
    import torch

    if rewards.ndim != 1 or rewards.numel() == 0 or rewards.shape != group_ids.shape:
        raise ValueError("rewards and group_ids must be non-empty 1-D tensors of the same shape")
    if not torch.isfinite(rewards).all() or not math.isfinite(eps) or eps <= 0:
        raise ValueError("rewards must be finite and eps positive")
    advantages = torch.zeros_like(rewards)  # [N]
    for group_id in group_ids.unique(sorted=True):
        in_group = group_ids == group_id  # [N]
        values = rewards[in_group]  # [n_g]
        advantages[in_group] = (values - values.mean()) / values.std(unbiased=False).clamp_min(eps)
    return advantages


def reshape_advantages(rewards, group_size: int, eps=EPS):
    """Baseline (on purpose a separate body, like the loop above): the fixed-size layout of TRL / MiniMind (``view(-1, G)``, per-row statistics broadcast
    back with ``repeat_interleave``), with the course's population std and ``clamp_min(eps)`` so that its
    output equals the course's; candidates of one group must be contiguous and every group of size G."""
    grouped = rewards.view(-1, group_size)  # [N/G, G]
    mean = grouped.mean(dim=1).repeat_interleave(group_size)  # [N]
    std = grouped.std(dim=1, unbiased=False).repeat_interleave(group_size)  # [N]
    return (rewards - mean) / std.clamp_min(eps)  # [N]


def _ragged_case(n: int, seed: int):
    """``n`` candidates in groups of 1..15, group ids unsorted (large, some negative), positions shuffled."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(torch.randint(1, 16, (1,), generator=gen)))
    sizes[-1] -= sum(sizes) - n
    sizes = [s for s in sizes if s > 0]
    labels = torch.randperm(4 * len(sizes), generator=gen)[: len(sizes)] * 7 - 3 * len(sizes)  # unsorted, negatives
    group_ids = torch.repeat_interleave(labels, torch.tensor(sizes))  # [n]
    group_ids = group_ids[torch.randperm(n, generator=gen)]  # [n] shuffled positions
    rewards = torch.rand(n, generator=gen)  # [n]
    return rewards, group_ids, len(sizes)


def bench_group_advantages(tiny: bool) -> list[dict]:
    import torch

    speed_name, layout_name = "group_advantages_speedup_vs_loop_65536", "group_advantages_time_vs_reshape_65536"
    loop_baseline = {"what": "seed's per-group Python loop (unique ids, boolean mask per group)", "unit": "ms"}
    reshape_baseline = {"what": "fixed-size view(-1, G) reshape (TRL / MiniMind layout)", "unit": "ms"}
    try:  # the graded function itself, from its one home (nb01's `#@save` cell, generated by `make release`)
        from tools.lessons.nb01_group_advantages import compute_group_advantages as course
    except ImportError as error:
        return [
            unavailable(speed_name, "x", loop_baseline, f"tools.lessons.nb01_group_advantages: {error}", ">= 500"),
            unavailable(layout_name, "x", reshape_baseline, f"tools.lessons.nb01_group_advantages: {error}", "<= 1.2"),
        ]

    group_size = 8
    sizes = [64, 256] if tiny else [1024, 16384, 65536]
    headline = sizes[-1]
    per_size = {}
    for n in sizes:
        gen = torch.Generator().manual_seed(n)
        rewards = torch.rand(n, generator=gen)  # [N]
        group_ids = torch.arange(n // group_size).repeat_interleave(group_size)  # [N] contiguous groups of G
        expected = seed_loop_advantages(rewards, group_ids)
        got = course(rewards, group_ids, eps=EPS)
        reshaped = reshape_advantages(rewards, group_size)
        loop_repeats = 1 if tiny else (3 if n >= 65536 else 5)
        fast_repeats = 1 if tiny else 31
        t_loop = median(timed(lambda r=rewards, g=group_ids: seed_loop_advantages(r, g), loop_repeats))
        t_course = median(timed(lambda r=rewards, g=group_ids: course(r, g, eps=EPS), fast_repeats))
        t_reshape = median(timed(lambda r=rewards: reshape_advantages(r, group_size), fast_repeats))
        per_size[n] = {
            "candidates": n,
            "groups": n // group_size,
            "group_size": group_size,
            "course_ms": 1e3 * t_course,
            "loop_ms": 1e3 * t_loop,
            "reshape_ms": 1e3 * t_reshape,
            "speedup_vs_loop": t_loop / t_course,
            "time_vs_reshape": t_course / t_reshape,
            "max_abs_diff_vs_loop": float((got - expected).abs().max()),
            "max_abs_diff_reshape_vs_loop": float((reshaped - expected).abs().max()),
            "repeats": {"loop": loop_repeats, "course": fast_repeats, "reshape": fast_repeats},
        }

    n_ragged = sizes[-1]
    rewards, group_ids, n_groups = _ragged_case(n_ragged, seed=7)
    expected = seed_loop_advantages(rewards, group_ids)
    got = course(rewards, group_ids, eps=EPS)
    loop_repeats = 1 if tiny else 3
    t_loop = median(timed(lambda: seed_loop_advantages(rewards, group_ids), loop_repeats))
    t_course = median(timed(lambda: course(rewards, group_ids, eps=EPS), 1 if tiny else 31))
    ragged = {
        "candidates": n_ragged,
        "groups": n_groups,
        "group_sizes": "1..15, ids unsorted incl. negative, shuffled",
        "course_ms": 1e3 * t_course,
        "loop_ms": 1e3 * t_loop,
        "speedup_vs_loop": t_loop / t_course,
        "max_abs_diff_vs_loop": float((got - expected).abs().max()),
    }

    # the same headline comparison at torch's default thread count (what a notebook kernel uses); on a
    # shared machine OpenMP threads contend with other processes, so this is reported, not the headline
    n = headline
    rewards = torch.rand(n, generator=torch.Generator().manual_seed(n))  # [N]
    group_ids = torch.arange(n // group_size).repeat_interleave(group_size)  # [N]
    threads = torch.get_num_threads()
    default_threads = _default_threads() or threads
    torch.set_num_threads(default_threads)
    try:
        t_course = median(timed(lambda: course(rewards, group_ids, eps=EPS), 1 if tiny else 31))
        t_reshape = median(timed(lambda: reshape_advantages(rewards, group_size), 1 if tiny else 31))
    finally:
        torch.set_num_threads(threads)
    at_default = {
        "threads": default_threads,
        "course_ms": 1e3 * t_course,
        "reshape_ms": 1e3 * t_reshape,
        "time_vs_reshape": t_course / t_reshape,
    }

    head = per_size[headline]
    sizes_detail = {str(n): per_size[n] for n in sizes}
    speed = head["speedup_vs_loop"]
    layout = head["time_vs_reshape"]
    return [
        metric(
            speed_name,
            speed,
            "x",
            dict(loop_baseline, value=head["loop_ms"]),
            {
                "goal": ">= 500",
                "goal_met": _goal(speed, ">=", 500),
                "course_ms": head["course_ms"],
                "formula": "median loop time / median course time, same rewards and group ids, float32",
                "sizes": sizes_detail,
                "ragged_unsorted": ragged,
            },
        ),
        metric(
            layout_name,
            layout,
            "x",
            dict(reshape_baseline, value=head["reshape_ms"]),
            {
                "goal": "<= 1.2",
                "goal_met": _goal(layout, "<=", 1.2),
                "course_ms": head["course_ms"],
                "formula": "median course time / median reshape time (the course function also validates its inputs)",
                "by_size": {str(n): per_size[n]["time_vs_reshape"] for n in sizes},
                "threads": threads,
                f"at_default_threads_{headline}": at_default,
            },
        ),
    ]


# ----------------------------------------------------------------------------- log-probs memory
_STATUS = Path("/proc/self/status")


def _proc_bytes(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    return int(match.group(1)) * 1024


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) - Linux >= 4.0: write 5 to /proc/self/clear_refs."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def logprobs_worker(variant: str, batch: int, length: int, vocab: int, repeats: int) -> dict:
    """Runs in a fresh interpreter: peak RSS growth of logits + (logits -> response log-probs)."""
    import torch

    from tools.post_training_runtime import selective_log_softmax

    if os.environ.get("GRPO_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["GRPO_BENCH_THREADS"]))

    def naive(logits, ids):
        return torch.log_softmax(logits[:, :-1, :], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)

    def naive_unshifted(logits, ids):  # the textbook form on a contiguous tensor (no shift)
        return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)

    def runtime(logits, ids):
        return selective_log_softmax(logits[:, :-1, :], ids[:, 1:])

    op = {"naive": naive, "naive_unshifted": naive_unshifted, "runtime": runtime}[variant]
    torch.manual_seed(0)
    op(torch.randn(2, 5, 64), torch.randint(64, (2, 5)))  # warm up kernels and thread pools first
    ids = torch.randint(vocab, (batch, length))  # [B, T]
    resettable = _reset_peak_rss()
    rss_before = _proc_bytes("VmRSS")
    logits = torch.randn(batch, length, vocab)  # [B, T, V] float32
    rss_logits = _proc_bytes("VmRSS")
    token_logps = op(logits, ids)  # [B, T-1]
    peak = _proc_bytes("VmHWM")
    times = timed(lambda: op(logits, ids), repeats, warmup=0)
    return {
        "variant": variant,
        "logits_bytes": logits.numel() * logits.element_size(),
        "rss_before": rss_before,
        "rss_after_logits": rss_logits,
        "peak_rss": peak,
        "peak_resettable": resettable,
        "times_s": times,
        "token_logps": token_logps.flatten().tolist(),
    }


def _run_logprobs_worker(variant: str, shape: tuple[int, int, int], repeats: int) -> dict[str, dict]:
    """``variant`` (names joined by commas: one interpreter runs them in turn, resetting the peak between them)
    in a fresh interpreter; {variant: its measurement}."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--logprobs-worker",
        variant,
        *map(str, shape),
        str(repeats),
    ]
    import torch

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        GRPO_BENCH_THREADS=str(torch.get_num_threads()),  # the same thread count as this process
        # glibc otherwise raises its mmap threshold after the first large free and keeps freed
        # chunks in the heap, so the peak would depend on allocator history (1.02x-1.22x for the
        # same code in repeated runs); a fixed threshold returns freed tensors to the OS at once
        # and the peak measures the tensors that are really alive together.
        MALLOC_MMAP_THRESHOLD_="65536",
    )
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"log-prob worker ({variant}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_logprobs(tiny: bool) -> list[dict]:
    import torch

    name = "logprobs_peak_memory_vs_logits"
    baseline = {
        "what": "naive log_softmax(logits[:, :-1]).gather(...) (a second [B, T-1, V] tensor)",
        "unit": "x logits bytes",
    }
    try:
        import tools.post_training_runtime  # noqa: F401
    except ImportError as error:
        return [unavailable(name, "x logits bytes", baseline, f"tools.post_training_runtime: {error}", "<= 1.1")]
    shape = (2, 16, 32768) if tiny else (8, 96, 151936)  # tiny: 4 MiB, still a fresh mmap
    repeats = 1 if tiny else 5
    variants = ("runtime", "naive", "naive_unshifted")
    if tiny:  # the code path only: the three variants in one interpreter (full size: a fresh one each)
        runs = _run_logprobs_worker(",".join(variants), shape, repeats)
    else:
        runs = {variant: _run_logprobs_worker(variant, shape, repeats)[variant] for variant in variants}
    summary = {}
    for variant, run in runs.items():
        logits_bytes = run["logits_bytes"]
        summary[variant] = {
            "peak_vs_logits": (run["peak_rss"] - run["rss_before"]) / logits_bytes,
            "peak_growth_mib": (run["peak_rss"] - run["rss_before"]) / 2**20,
            "logits_rss_growth_vs_logits": (run["rss_after_logits"] - run["rss_before"]) / logits_bytes,
            "median_ms": 1e3 * median(run["times_s"]),
            "peak_reset_ok": run["peak_resettable"],
        }
    diff = float(
        (torch.tensor(runs["runtime"]["token_logps"]) - torch.tensor(runs["naive"]["token_logps"])).abs().max()
    )
    value = summary["runtime"]["peak_vs_logits"]
    return [
        metric(
            name,
            value,
            "x logits bytes",
            dict(baseline, value=summary["naive"]["peak_vs_logits"]),
            {
                "goal": "<= 1.1",
                "goal_met": _goal(value, "<=", 1.1),
                "shape": {"B": shape[0], "T": shape[1], "V": shape[2], "dtype": "float32", "device": "cpu"},
                "logits_mib": runs["runtime"]["logits_bytes"] / 2**20,
                "runtime": summary["runtime"],
                "naive": summary["naive"],
                "naive_unshifted": summary["naive_unshifted"],
                "time_ratio_runtime_vs_naive": summary["runtime"]["median_ms"] / summary["naive"]["median_ms"],
                "max_abs_diff_runtime_vs_naive": diff,
                "fresh_interpreter_per_variant": not tiny,
                "method": (
                    "each variant in a fresh interpreter with MALLOC_MMAP_THRESHOLD_=65536 (freed tensors go back to the OS at once, so allocator caching does not blur the peak): warm up, reset the peak RSS (VmHWM, /proc/self/clear_refs), "
                    "read VmRSS, allocate the logits [B, T, V], compute log-probs of input_ids[:, 1:] from "
                    "logits[:, :-1], read VmHWM; value = (VmHWM - VmRSS before the logits) / logits bytes, so "
                    "the logits themselves count 1.0; time = median of repeats in the same interpreter. "
                    "naive = log_softmax on the shifted view logits[:, :-1] as MiniMind writes it (torch first "
                    "makes the view contiguous, a copy); naive_unshifted = log_softmax(logits).gather(ids), "
                    "the textbook 2x; runtime = tools.post_training_runtime.selective_log_softmax on the "
                    "shifted view, as response_sequence_logps calls it"
                ),
            },
        )
    ]


# ----------------------------------------------------------------------------- log-probs memory, bf16 (kept for backward)
def bench_logprobs_bf16(tiny: bool) -> list[dict]:
    """Bytes autograd keeps for backward when bf16 logits become response log-probs, per logits byte.

    Counted with ``tools.post_training_runtime.saved_tensor_bytes`` (a ``saved_tensors_hooks`` pack hook,
    once per storage): what stays alive from the forward until backward, on top of the model's own
    activations. Deterministic (no timing, no allocator), so CPU bytes are the bytes a CUDA run keeps.
    """
    import torch

    name = "logprobs_peak_memory_vs_logits_bf16"
    baseline = {
        "what": "row-wise log_softmax(row.float()).gather(...) - the course's previous bf16 path "
        "(keeps each row's float32 log-softmax for backward)",
        "unit": "x logits bytes",
    }
    try:
        from tools.post_training_runtime import saved_tensor_bytes, selective_log_softmax
    except ImportError as error:
        return [unavailable(name, "x logits bytes", baseline, f"tools.post_training_runtime: {error}", "<= 1.05")]
    batch, length, vocab = (2, 8, 4096) if tiny else (8, 28, 151936)  # full: Qwen2.5's vocabulary
    torch.manual_seed(0)
    ids = torch.randint(vocab, (batch, length))  # [B, T]
    logits_bytes = batch * length * vocab * 2  # bf16

    def previous(logits):  # the row-wise float32 log_softmax the course used before
        rows = [
            torch.log_softmax(row.float(), dim=-1).gather(-1, idx.unsqueeze(-1)).squeeze(-1)  # [T-1]
            for row, idx in zip(logits[:, :-1], ids[:, 1:])
        ]
        return torch.stack(rows)  # [B, T-1]

    variants = {
        "runtime": lambda logits: selective_log_softmax(logits[:, :-1], ids[:, 1:]),
        "previous_rowwise_fp32": previous,
        "naive_bf16": lambda logits: (
            torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        ),
    }
    kept, outputs = {}, {}
    for variant, fn in variants.items():
        logits = (
            torch.randn(batch, length, vocab, generator=torch.Generator().manual_seed(1))
            .to(torch.bfloat16)
            .requires_grad_(True)
        )  # [B, T, V]
        result = saved_tensor_bytes(fn, logits)
        kept[variant] = {
            "saved_vs_logits": result["saved_bytes"] / logits_bytes,
            "saved_mib": result["saved_bytes"] / 2**20,
            "storages": result["storages"],
        }
        outputs[variant] = result["output"].detach().float()
        result["output"].sum().backward()  # the saved tensors are really usable: backward runs
        del logits, result
    diff = float((outputs["runtime"] - outputs["previous_rowwise_fp32"]).abs().max())
    value = kept["runtime"]["saved_vs_logits"]
    return [
        metric(
            name,
            value,
            "x logits bytes",
            dict(baseline, value=kept["previous_rowwise_fp32"]["saved_vs_logits"]),
            {
                "goal": "<= 1.05",
                "goal_met": _goal(value, "<=", 1.05),
                "shape": {"B": batch, "T": length, "V": vocab, "dtype": "bfloat16", "device": "cpu"},
                "logits_mib": logits_bytes / 2**20,
                "variants": kept,
                "max_abs_diff_runtime_vs_previous": diff,
                "method": (
                    "bf16 logits [B, T, V] with requires_grad; log-probs of input_ids[:, 1:] from logits[:, :-1]; "
                    "every tensor an autograd node saves for backward passes a saved_tensors_hooks pack hook and is "
                    "counted once per storage (views of the logits count as the logits); value = saved bytes / "
                    "logits bytes, so keeping the logits alone is 1.0. runtime = "
                    "tools.post_training_runtime.selective_log_softmax (custom autograd function: keeps the bf16 "
                    "logits, index and a [B, T] float32 logsumexp); previous_rowwise_fp32 = the row-wise float32 "
                    "log_softmax it replaced; naive_bf16 = log_softmax in bf16 (keeps its bf16 output, and is "
                    "~0.03 nats coarse). Transient forward/backward blocks are [16, V] float32 and not counted."
                ),
            },
        )
    ]


# ----------------------------------------------------------------------------- GRPO loss
def seed_reference_grpo_loss(
    log_probs_new,
    log_probs_old,
    rewards,
    group_ids,
    response_mask,
    clip_range=0.2,
    eps=EPS,
    log_probs_ref=None,
    beta=0.0,
):
    """Baseline: the seed's reference formulation - its input checks, per-group loop advantages, token
    ratio with PPO clipping, k3 reference KL, mean over each candidate's valid tokens, then over candidates."""
    import torch

    if log_probs_new.ndim != 2 or log_probs_new.numel() == 0 or log_probs_new.shape != log_probs_old.shape:
        raise ValueError("log-prob tensors must be non-empty [N, T] of the same shape")
    if rewards.shape[0] != log_probs_new.shape[0] or group_ids.shape != rewards.shape:
        raise ValueError("rewards / group_ids must match the candidate dimension")
    if not (math.isfinite(clip_range) and clip_range >= 0 and math.isfinite(beta) and beta >= 0):
        raise ValueError("clip_range and beta must be non-negative and finite")
    if not torch.isfinite(log_probs_new).all() or not torch.isfinite(log_probs_old).all():
        raise ValueError("log-probs must be finite")
    if log_probs_ref is not None and (
        log_probs_ref.shape != log_probs_new.shape or not torch.isfinite(log_probs_ref).all()
    ):
        raise ValueError("reference log-probs must be finite and of the policy's shape")
    if (
        response_mask.shape != log_probs_new.shape
        or response_mask.dtype != torch.bool
        or not response_mask.any(dim=-1).all()
    ):
        raise ValueError("response_mask must be a bool [N, T] with a valid token in every row")
    advantages = seed_loop_advantages(rewards, group_ids, eps)  # [N]
    ratio = torch.exp(log_probs_new - log_probs_old.detach())  # [N, T]
    clipped = torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)  # [N, T]
    adv = advantages.detach().unsqueeze(-1)  # [N, 1]
    per_token = -torch.minimum(ratio * adv, clipped * adv)  # [N, T]
    if log_probs_ref is not None and beta > 0:
        delta = log_probs_ref.detach() - log_probs_new  # [N, T]
        per_token = per_token + beta * (torch.exp(delta) - delta - 1.0)  # [N, T]
    per_candidate = (per_token * response_mask).sum(dim=-1) / response_mask.sum(dim=-1)  # [N]
    return per_candidate.mean(), advantages


def _grpo_case(candidates: int, length: int, group_size: int):
    import torch

    gen = torch.Generator().manual_seed(1234)
    new = (-1.0 - torch.rand(candidates, length, generator=gen)).requires_grad_(True)  # [N, T]
    old = new.detach() + 0.05 * torch.randn(candidates, length, generator=gen)  # [N, T]
    ref = new.detach() + 0.05 * torch.randn(candidates, length, generator=gen)  # [N, T]
    rewards = torch.rand(candidates, generator=gen)  # [N]
    group_ids = torch.arange(candidates // group_size).repeat_interleave(group_size)  # [N]
    lengths = torch.randint(length // 4, length + 1, (candidates,), generator=gen)  # [N]
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)  # [N, T] right-padded responses
    return new, old, ref, rewards, group_ids, mask


def bench_grpo_loss(tiny: bool) -> list[dict]:
    name = "grpo_loss_fwd_bwd_ms"
    baseline = {"what": "seed's reference formulation (per-group loop advantages + the same objective)", "unit": "ms"}
    try:
        course = _load(
            "nb02_grpo_objective",
            ["provided_group_advantages", "token_kl_penalty", "provided_grpo_input_checks", "compute_grpo_loss"],
        )["compute_grpo_loss"]
    except Unavailable as error:
        return [unavailable(name, "ms", baseline, str(error))]
    candidates, length, group_size = (8, 16, 4) if tiny else (64, 1024, 8)
    new, old, ref, rewards, group_ids, mask = _grpo_case(candidates, length, group_size)
    settings = {"clip_range": 0.2, "eps": EPS, "beta": 0.04}

    def step(fn):
        new.grad = None
        loss, _ = fn(
            new,
            old,
            rewards,
            group_ids,
            mask,
            clip_range=settings["clip_range"],
            eps=EPS,
            log_probs_ref=ref,
            beta=settings["beta"],
        )
        loss.backward()
        return loss.detach(), new.grad.detach().clone()

    loss_course, grad_course = step(course)
    loss_ref, grad_ref = step(seed_reference_grpo_loss)
    repeats = 1 if tiny else 21
    t_course = median(timed(lambda: step(course), repeats))
    t_ref = median(timed(lambda: step(seed_reference_grpo_loss), repeats))
    value = 1e3 * t_course
    return [
        metric(
            name,
            value,
            "ms",
            dict(baseline, value=1e3 * t_ref),
            {
                "shape": {
                    "candidates": candidates,
                    "tokens": length,
                    "group_size": group_size,
                    "dtype": "float32",
                    "valid_tokens": int(mask.sum()),
                },
                "settings": settings,
                "repeats": repeats,
                "time_vs_reference": t_course / t_ref,
                "abs_diff_loss": float((loss_course - loss_ref).abs()),
                "max_abs_diff_grad": float((grad_course - grad_ref).abs().max()),
                "formula": "median wall time of loss forward + backward (grad of log_probs_new), course vs reference",
            },
        )
    ]


# ----------------------------------------------------------------------------- notebooks
def _autograde_run(
    command: list[str], env: dict[str, str], what: str, course: Path | None = None, check: bool = False
) -> dict:
    """Run one `autograde` command of the grading pipeline: its wall-clock seconds, plan, summary and grades
    (from its output) and, given ``course``, each graded notebook's in-slot seconds and phases (its reports).
    ``check``: a non-zero exit is an error too."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - started
    plan = re.search(r"\[autograde\] (\d+) learner\(s\), (\d+) notebook\(s\), (\d+) worker\(s\)", done.stdout)
    summary = re.search(r"\[autograde\] done in ([\d.]+) s: (.*?);", done.stdout)
    if plan is None or summary is None or (check and done.returncode != 0):
        raise RuntimeError(f"{what} failed (rc {done.returncode}):\n{done.stdout[-3000:]}")
    grades = {
        f"{m.group(1)}/{m.group(2)}": f"{m.group(3)} {m.group(4) or 'graded'}"
        for m in re.finditer(r"^\s+(\S+)\s+(nb\w+)\s+(\S+/\S+?)(?: \[(\w+)\])?\s*$", done.stdout, re.MULTILINE)
    }
    run = {
        "wall_s": seconds,
        "pipeline_reported_s": float(summary.group(1)),
        "statuses": summary.group(2),
        "grades": grades,
        "learners": int(plan.group(1)),
        "notebooks": int(plan.group(2)),
        "workers": int(plan.group(3)),
        "returncode": done.returncode,
    }
    if course is not None:
        phases = run["phases"] = {}
        for report in course.glob("autograded/*/*/grading_report.json"):
            data = json.loads(report.read_text())
            for nb in data["notebooks"]:
                phases.setdefault(data["assignment"], []).append({"seconds": nb["seconds"], **nb.get("phases", {})})
    return run


def _grade_sample_class(course: Path, workers: int | None) -> dict:
    """Run `autograde/pipeline.py autograde --sample --force` on ``course``; wall-clock seconds + its summary."""
    command = [
        sys.executable,
        str(ROOT / "autograde" / "pipeline.py"),
        "autograde",
        "--course",
        str(course),
        "--sample",
        "--force",
    ]
    if workers is not None:
        command += ["--workers", str(workers)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), TQDM_DISABLE="1")
    return _autograde_run(command, env, f"autograde pipeline (workers={workers})")


_RELEASED_COURSE: Path | None = None  # --released-course: reuse a released course instead of releasing one
_SERIES_FROM: Path | None = None  # --series-from: solution executions made in this test run, not repeated


def bench_autograde(tiny: bool) -> list[dict]:
    name = "autograde_parallel_speedup"
    baseline = {"what": "the sample class graded with 1 worker (wall-clock seconds)", "unit": "s"}
    goal = ">= 1.6 on 2 cores"
    if not (ROOT / "autograde" / "pipeline.py").exists():
        return [unavailable(name, "x", baseline, "autograde/pipeline.py is not in this checkout", goal)]
    try:
        chain = _chain()
    except Unavailable as error:
        return [unavailable(name, "x", baseline, str(error), goal)]
    if tiny:
        # tiny: the class run's one grading (1 learner, nb01) stands for both runs and its nb01 floor for the
        # `import torch` floor: the metric's code path only (tests/test_autograde_class.py grades the whole sample
        # class; tiny sizes claim nothing)
        try:
            run = _class_run(tiny)
        except (Unavailable, RuntimeError, ImportError) as error:
            return [unavailable(name, "x", baseline, str(error), goal)]
        serial = parallel = {
            k: run[k]
            for k in (
                "wall_s",
                "pipeline_reported_s",
                "statuses",
                "grades",
                "learners",
                "notebooks",
                "workers",
                "returncode",
            )
        }
        floor = run["floors_s"][run["lessons"][0]]
    else:
        serial, parallel, floor = _serial_and_parallel(chain)
    differing = sorted(
        key
        for key in set(serial["grades"]) | set(parallel["grades"])
        if serial["grades"].get(key) != parallel["grades"].get(key)
    )
    speedup = serial["wall_s"] / parallel["wall_s"]
    per_notebook = serial["wall_s"] / serial["notebooks"]
    return [
        metric(
            name,
            speedup,
            "x",
            dict(baseline, value=serial["wall_s"]),
            {
                "goal": goal,
                "goal_met": None if tiny else _goal(speedup, ">=", 1.6),
                "cores": os.cpu_count(),
                "serial": serial,
                "parallel": parallel,
                "same_grades_serial_and_parallel": not differing,
                "grades_differing": {
                    key: {"serial": serial["grades"].get(key), "parallel": parallel["grades"].get(key)}
                    for key in differing
                },
                "seconds_per_learner_notebook": per_notebook,
                "floor_s": floor,
                "floor": "kernel start + `import torch` (one-cell notebook, nbclient, median)",
                "per_notebook_vs_floor": per_notebook / floor,
                "formula": (
                    "value = wall time of `pipeline.py autograde --sample --force --workers 1` / wall time with "
                    "the default workers (one per core), each on a fresh copy of the same released course; "
                    "seconds per learner-notebook = 1-worker wall time / notebooks graded"
                ),
                "repeats": 1,
            },
        )
    ]


def _released_course(chain, course: Path, lessons: list[str] | None = None) -> Path:
    """``course``: a copy of the tests' one release (--released-course, not modified), or else a release of
    ``lessons`` (all by default) of this checkout: source, release and gradebook (learner versions beside it)."""
    if _RELEASED_COURSE is not None:
        shutil.copytree(_RELEASED_COURSE, course)
    else:
        course.mkdir()
        shutil.copy2(ROOT / "autograde" / "nbgrader_config.py", course / "nbgrader_config.py")
        chain.release_into(course, course.parent / "notebooks", lessons)
    return course


def _serial_and_parallel(chain) -> tuple[dict, dict, float]:
    """The sample class graded with 1 worker and with the default workers, each on a fresh copy of one
    released course, and the `import torch` floor (median of 3)."""
    with tempfile.TemporaryDirectory(prefix="grpo-bench-grade-") as tmp:
        first = _released_course(chain, Path(tmp) / "course1")
        second = Path(tmp) / "course2"
        shutil.copytree(first, second)  # the same starting state for the second run
        serial = _grade_sample_class(first, 1)
        parallel = _grade_sample_class(second, None)
    return serial, parallel, median(kernel_floor(chain, "import torch", 3))


def _chain():
    try:
        import tools.chain.notebooks as chain
    except ImportError as error:
        raise Unavailable(f"tools.chain.notebooks cannot be imported ({error})") from error
    return chain


def kernel_floor(chain, source: str, repeats: int) -> list[float]:
    """Seconds to execute a one-cell notebook with the chain's nbclient harness (kernel start and
    shutdown included): ``pass`` measures the kernel alone, ``import torch`` the floor of any course
    notebook."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    times = []
    with tempfile.TemporaryDirectory(prefix="grpo-bench-floor-") as tmp:
        for _ in range(repeats):
            started = time.perf_counter()
            done = chain.execute(nb, Path(tmp))
            times.append(time.perf_counter() - started)
            if chain.cell_errors(done):
                raise RuntimeError(f"floor notebook `{source}` failed: {chain.cell_errors(done)}")
    return times


def bench_series(tiny: bool) -> list[dict]:
    name = "series_execution_s"
    baseline = {"what": "kernel start: a one-cell `pass` notebook run by the same harness (median)", "unit": "s"}
    goal = "<= 20 s each (kernel start excluded)"
    try:
        chain = _chain()
        assignments = chain.assignments()
    except (Unavailable, SystemExit, FileNotFoundError) as error:
        return [unavailable(name, "s", baseline, str(error), goal)]
    if not assignments:
        return [unavailable(name, "s", baseline, "solutions/ holds no notebook source", goal)]
    if tiny:
        assignments = assignments[:1]
    kernel = median(kernel_floor(chain, "pass", 1 if tiny else 3))
    notebooks = {}
    for assignment in assignments:
        if _SERIES_FROM is not None:  # executed in this test run already (tests/conftest.py notebook_runs)
            import nbformat

            saved = json.loads((_SERIES_FROM / f"{assignment}.json").read_text(encoding="utf-8"))
            nb, seconds = nbformat.from_dict(saved["notebook"]), float(saved["seconds"])
        else:
            nb, seconds = chain.execute_solution(assignment)
        errors = chain.cell_errors(nb)
        notebooks[assignment] = {
            "seconds_with_kernel_start": seconds,
            "seconds_excluding_kernel_start": seconds - kernel,
            "errors": [f"cell {i} ({gid}): {ename}: {evalue[:200]}" for i, gid, ename, evalue in errors],
        }
        notebooks[assignment]["goal_met"] = bool(not errors and seconds - kernel <= 20.0)
        print(f"[bench] series {assignment}: {seconds:.1f} s", file=sys.stderr, flush=True)
    total = sum(n["seconds_with_kernel_start"] for n in notebooks.values())
    slowest = max(n["seconds_excluding_kernel_start"] for n in notebooks.values())
    return [
        metric(
            name,
            total,
            "s",
            dict(baseline, value=kernel),
            {
                "goal": goal,
                "goal_met": all(n["goal_met"] for n in notebooks.values()),
                "notebooks": notebooks,
                "count": len(notebooks),
                "executions_reused_from_tests": _SERIES_FROM is not None,
                "slowest_excluding_kernel_start_s": slowest,
                "total_excluding_kernel_start_s": sum(n["seconds_excluding_kernel_start"] for n in notebooks.values()),
                "formula": (
                    "value = sum over solution notebooks of tools.chain.notebooks.execute_solution seconds "
                    "(nbclient, kernel start included, one execution each); per notebook the kernel start "
                    "(median of the `pass` notebook) is subtracted for the goal"
                ),
            },
        )
    ]


# ----------------------------------------------------------------------------- class-scale grading
_CLASS_RUNS: dict = {}


def _lesson_imports(assignment: str) -> str:
    """The top-level import lines of a lesson's released code cells (what its floor notebook imports): the grading
    pre-flight's own list (autograde/grpo_grader/probe.py)."""
    from autograde.grpo_grader.probe import lesson_import_lines

    lines = lesson_import_lines(ROOT / "notebooks" / assignment / f"{assignment}.ipynb")
    return "\n".join(lines) or "pass"


def _class_run(tiny: bool) -> dict:
    """One synthetic class graded by `python -m autograde.pipeline autograde` (default workers), shared by
    both class-scale metrics: 30 learners over every graded lesson of the sample class, each notebook a copy
    of a sample learner's worked (s01), wrong (s04) or untouched (s03) submission in rotation; tiny: 1
    learner, nb01 only. The floors (kernel start + each lesson's imports) are measured in the same run."""
    if tiny in _CLASS_RUNS:
        return _CLASS_RUNS[tiny]
    from autograde.sample_class import build as sample_class

    chain = _chain()
    lessons = sample_class.LESSONS[:1] if tiny else list(sample_class.LESSONS)
    kinds = ["s01_worked_answers", "s04_bug_only_hidden_tests_catch", "s03_untouched"]
    learners = 1 if tiny else 30
    with tempfile.TemporaryDirectory(prefix="grpo-bench-class-") as tmp:
        course = _released_course(chain, Path(tmp) / "autograde", lessons)
        for i in range(learners):
            for j, lesson in enumerate(lessons):
                source = sample_class.SUBMITTED / kinds[(i + j) % len(kinds)] / lesson
                shutil.copytree(source, course / "submitted" / f"learner{i:03d}" / lesson)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            TQDM_DISABLE="1",
            GRPO_GRADING_SEED="bench-" + str(time.time_ns()),
        )
        graded = _autograde_run(
            [sys.executable, "-m", "autograde.pipeline", "autograde", "--course", str(course)],
            env,
            "class run",
            course,
            check=True,
        )
    floors = {lesson: median(kernel_floor(chain, _lesson_imports(lesson), 1 if tiny else 2)) for lesson in lessons}
    run = {
        **graded,
        "lessons": lessons,
        "floors_s": floors,
        "phases": {lesson: graded["phases"].get(lesson, []) for lesson in lessons},
    }
    _CLASS_RUNS[tiny] = run
    return run


def bench_autograde_vs_floor(tiny: bool) -> list[dict]:
    """autograde_seconds_per_notebook_vs_floor: worker-seconds per graded notebook / the floor."""
    name = "autograde_seconds_per_notebook_vs_floor"
    baseline = {
        "what": "floor: a one-cell notebook with the lesson's imports, kernel start included (nbclient)",
        "unit": "s",
    }
    goal = "<= 2.0"
    try:
        run = _class_run(tiny)
    except (Unavailable, RuntimeError, ImportError) as error:
        return [unavailable(name, "x floor", baseline, str(error), goal)]
    per_lesson = {}
    for lesson, rows in run["phases"].items():
        mean = statistics.fmean(r["seconds"] for r in rows)
        per_lesson[lesson] = {
            "notebooks": len(rows),
            "mean_in_slot_s": mean,
            "floor_s": run["floors_s"][lesson],
            "in_slot_vs_floor": mean / run["floors_s"][lesson],
            "mean_nbgrader_s": statistics.fmean(r.get("nbgrader", 0.0) for r in rows),
            "mean_oracle_s": statistics.fmean(r.get("oracle", 0.0) for r in rows),
        }
    per_notebook = run["pipeline_reported_s"] * run["workers"] / run["notebooks"]
    mean_floor = statistics.fmean(run["floors_s"][lesson] for lesson, rows in run["phases"].items() for _ in rows)
    value = per_notebook / mean_floor
    return [
        metric(
            name,
            value,
            "x floor",
            dict(baseline, value=mean_floor),
            {
                "goal": goal,
                "goal_met": None if tiny else _goal(value, "<=", 2.0),
                "seconds_per_notebook_per_worker": per_notebook,
                "per_lesson": per_lesson,
                "workers": run["workers"],
                "notebooks": run["notebooks"],
                "formula": (
                    "value = (pipeline seconds x workers / graded notebooks) / mean floor over those notebooks; "
                    "a notebook's floor = kernel start + its lesson's imports, measured in the same run; "
                    "per_lesson splits the in-slot time into nbgrader's execution and the oracle run"
                ),
                "repeats": 1,
            },
        )
    ]


def bench_autograde_class(tiny: bool) -> list[dict]:
    """autograde_class_seconds: wall time of grading a synthetic class of 30 learners over every lesson."""
    name = "autograde_class_seconds"
    baseline = {
        "what": "the same notebooks at the floor (kernel start + imports), one after another, per worker",
        "unit": "s",
    }
    goal = "<= 2.0 x the floor per notebook"
    try:
        run = _class_run(tiny)
    except (Unavailable, RuntimeError, ImportError) as error:
        return [unavailable(name, "s", baseline, str(error), goal)]
    floor_total = sum(run["floors_s"][lesson] for lesson, rows in run["phases"].items() for _ in rows)
    per_notebook_vs_floor = (run["pipeline_reported_s"] * run["workers"]) / floor_total
    return [
        metric(
            name,
            run["wall_s"],
            "s",
            dict(baseline, value=floor_total / run["workers"]),
            {
                "goal": goal,
                "goal_met": None if tiny else _goal(per_notebook_vs_floor, "<=", 2.0),
                "learners": run["learners"],
                "notebooks": run["notebooks"],
                "workers": run["workers"],
                "statuses": run["statuses"],
                "lessons": run["lessons"],
                "notebooks_per_minute": 60.0 * run["notebooks"] / run["wall_s"],
                "seconds_per_notebook_vs_floor": per_notebook_vs_floor,
                "pipeline_reported_s": run["pipeline_reported_s"],
                "floors_s": run["floors_s"],
                "formula": (
                    "value = wall seconds of `python -m autograde.pipeline autograde` on the synthetic class "
                    "(release excluded); notebooks per minute = notebooks / wall; vs floor = pipeline seconds x "
                    "workers / sum of the notebooks' floors"
                ),
                "repeats": 1,
            },
        )
    ]


# ----------------------------------------------------------------------------- machine & report
def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = _proc_meminfo_total()
    except OSError:
        mem = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_default_threads": _default_threads(),
        "memory_gib": mem,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "git_commit": commit,
    }


@functools.cache
def _default_threads() -> int | None:
    """torch's intra-op thread count in a fresh interpreter (what a notebook kernel gets)."""
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True, text=True
    )
    return int(done.stdout.strip()) if done.returncode == 0 else None


def _proc_meminfo_total() -> float:
    match = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return round(int(match.group(1)) / 2**20, 1)


BENCHMARKS = {
    "group_advantages": bench_group_advantages,
    "logprobs": bench_logprobs,
    "logprobs_bf16": bench_logprobs_bf16,
    "grpo_loss": bench_grpo_loss,
    "autograde": bench_autograde,
    "autograde_floor": bench_autograde_vs_floor,
    "autograde_class": bench_autograde_class,
    "series": bench_series,
}


def _fmt(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def table(results: dict) -> str:
    rows = [("metric", "value", "unit", "baseline", "goal", "met")]
    for m in results["metrics"]:
        detail = m["detail"]
        met = detail.get("goal_met")
        rows.append(
            (
                m["name"],
                _fmt(m["value"]),
                m["unit"],
                _fmt(m["baseline"].get("value")),
                detail.get("goal", "-"),
                "-" if met is None else ("yes" if met else "NO"),
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {m['name']}: {m['detail']['status']}" for m in results["metrics"] if "status" in m["detail"]]
    return "\n".join(lines + notes)


def markdown_table(results: dict) -> str:
    """The README's table of a results file (``--markdown PATH``)."""
    lines = ["| metric | value | unit | baseline | goal | met |", "| --- | ---: | --- | ---: | --- | --- |"]
    for m in results["metrics"]:
        detail = m["detail"]
        met = detail.get("goal_met")
        value = _fmt(m["value"]) if m["value"] is not None else f"n/a ({detail.get('status', '')})"
        lines.append(
            f"| `{m['name']}` | {value} | {m['unit']} | {_fmt(m['baseline'].get('value'))} "
            f"{m['baseline'].get('unit', '')} | {detail.get('goal', '-')} | "
            f"{'-' if met is None else ('yes' if met else '**no**')} |"
        )
    return "\n".join(lines)


def run(tiny: bool, only: list[str] | None = None, threads: int = 1) -> dict:
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    results = {"machine": machine(), "mode": "tiny" if tiny else "full", "metrics": []}
    for key, bench in BENCHMARKS.items():
        if only and key not in only:
            continue
        started = time.perf_counter()
        produced = bench(tiny)
        elapsed = time.perf_counter() - started
        for m in produced:
            m["detail"].setdefault("bench_wall_s", round(elapsed, 2))
            if tiny and "goal_met" in m["detail"]:  # tiny sizes check that the code runs, they claim nothing
                m["detail"]["goal_met"] = None
        results["metrics"].extend(produced)
        print(f"[bench] {key}: {elapsed:.1f} s", file=sys.stderr, flush=True)
    if hasattr(os, "getloadavg"):
        results["machine"]["load_average_at_end"] = list(os.getloadavg())
    return results


def save(results: dict, path: Path) -> None:
    try:
        from tools.notebook_runtime import save_json
    except ImportError:  # pragma: no cover - the runtime ships with the course
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return
    save_json(path, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="every benchmark once at tiny sizes (no timing claim)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only this group")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result file (default: benchmarks/results/latest.json for a full run, none for --tiny)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for the tensor benchmarks (default 1: stable ratios on a shared "
        "machine; 0 = torch's default). Notebooks and grading kernels keep their own setting.",
    )
    parser.add_argument(
        "--released-course",
        type=Path,
        default=None,
        metavar="COURSE",
        help="autograde: copy this released course (e.g. the tests' shared one) instead of releasing",
    )
    parser.add_argument(
        "--series-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="series: read <assignment>.json ({notebook, seconds}: an execution of the solution "
        "made in this test run) instead of executing the solution again",
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        metavar="RESULTS",
        help="print the markdown table of a results file and exit (for the README)",
    )
    parser.add_argument(
        "--logprobs-worker", nargs=5, metavar=("VARIANT", "B", "T", "V", "REPEATS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.logprobs_worker:
        variants, *numbers = args.logprobs_worker
        print(json.dumps({variant: logprobs_worker(variant, *map(int, numbers)) for variant in variants.split(",")}))
        return 0
    if args.markdown:
        print(markdown_table(json.loads(args.markdown.read_text(encoding="utf-8"))))
        return 0
    global _RELEASED_COURSE, _SERIES_FROM
    _RELEASED_COURSE, _SERIES_FROM = args.released_course, args.series_from
    results = run(args.tiny, args.only, threads=args.threads)
    print(table(results))
    out = args.out if args.out is not None else (None if args.tiny else RESULTS / "latest.json")
    if out is not None:
        save(results, out)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
