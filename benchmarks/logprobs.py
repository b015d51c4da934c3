"""Log-prob memory: the process's peak while ``[B, T, V]`` float32 logits become response log-probs.

``logprobs_peak_memory_vs_logits``: ``tools.post_training_runtime.selective_log_softmax`` against the naive
``log_softmax(...).gather(...)``, each variant in a fresh interpreter (``run.py --logprobs-worker``, which calls
:func:`logprobs_worker`) so that one variant's allocations cannot blur another's peak.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.harness import ROOT, goal_met, median, metric, timed, unavailable
from tools import env_vars

RUN_PY = ROOT / "benchmarks" / "run.py"  # the worker's entry point (`--logprobs-worker`)
UNIT = "x logits bytes"  # the value and its baseline: peak memory growth / the logits' bytes
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

    if os.environ.get(env_vars.BENCH_THREADS):
        torch.set_num_threads(int(os.environ[env_vars.BENCH_THREADS]))

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
        str(RUN_PY),
        "--logprobs-worker",
        variant,
        *map(str, shape),
        str(repeats),
    ]
    import torch

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **{env_vars.BENCH_THREADS: str(torch.get_num_threads())},  # the same thread count as this process
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
        "unit": UNIT,
    }
    try:
        import tools.post_training_runtime  # noqa: F401
    except ImportError as error:
        return [unavailable(name, UNIT, baseline, f"tools.post_training_runtime: {error}", "<= 1.1")]
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
            UNIT,
            dict(baseline, value=summary["naive"]["peak_vs_logits"]),
            {
                "goal": "<= 1.1",
                "goal_met": goal_met(value, "<=", 1.1),
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
