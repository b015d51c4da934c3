"""Several seeds of one configuration and their statistics.

``mean_ci95``: the mean of independent per-seed values with its two-sided 95 % Student t interval
(``t_quantile_975``, without scipy); ``seeds_summary``: the multi-seed summary of a run's per-seed records (schema
``tools/schemas/online-grpo-seeds-v1.json``, written by ``tools.online.record.write_seeds_summary``).
"""

from __future__ import annotations

import functools
import math

from tools.online.evaluation import OUTCOMES
from tools.online.record import SEEDS_SCHEMA_VERSION, utc_now
from tools.project_runtime import check_run_label


@functools.cache
def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF, the density integrated
    by Simpson's rule; no scipy): 12.706 for df 1, 4.303 for df 2, 1.96 in the limit."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"自由度必须是正整数，收到 {df!r}")
    const = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x):  # P(T <= x) for x >= 0: 1/2 + the integral of the density over [0, x]; substitution u = atan(t)
        # t = tan(u) keeps the integrand smooth even for heavy tails (df = 1)
        top = math.atan(x)
        steps = 400
        h = top / steps
        total = 0.0
        for i in range(steps + 1):
            u = i * h
            t = math.tan(u)
            f = const * (1 + t * t / df) ** (-(df + 1) / 2) / math.cos(u) ** 2
            total += f * (1 if i in (0, steps) else 4 if i % 2 else 2)
        return 0.5 + total * h / 3

    low, high = 0.0, 100.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < 0.975 else (low, mid)
    return (low + high) / 2


def mean_ci95(values) -> dict:
    """Mean and two-sided 95 % t-interval of independent per-seed values (n >= 2; n = 1 gives no interval)."""
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("至少需要一个种子")
    mean = sum(values) / n
    if n == 1:
        return {"mean": round(mean, 6), "ci95": None, "method": "single seed: no interval", "n": 1}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return {
        "mean": round(mean, 6),
        "ci95": [round(mean - half, 6), round(mean + half, 6)],
        "method": f"Student t interval over {n} seeds (t_0.975,{n - 1} = {t_quantile_975(n - 1):.3f}, sample sd)",
        "n": n,
        "sd": round(sd, 6),
    }


def seeds_summary(label: str, records: list[dict]) -> dict:
    """The multi-seed summary of ``records`` (one per seed, same configuration up to the seed)."""
    if not records:
        raise ValueError("至少需要一个种子的记录")
    base = {k: v for k, v in records[0]["config"].items() if k != "seed"}
    for record in records[1:]:
        if {k: v for k, v in record["config"].items() if k != "seed"} != base:
            raise ValueError("各种子的配置除 seed 外必须相同")
    seeds = []
    for record in records:
        before, after = record["eval"]["before"], record["eval"]["after"]
        entry = {
            "seed": record["config"]["seed"],
            "pass_at_1_before": before["pass_at_1"],
            "pass_at_1_after": after["pass_at_1"],
            "gain": round(after["pass_at_1"] - before["pass_at_1"], 6),
            "wall_seconds": record["wall_seconds"],
            "train_seconds": record.get("train_seconds"),
            "cpu_seconds": record.get("cpu_seconds"),
            "warm_start_hash": record["warm_start"]["content_sha256"],
            "record": record["run_label"],
        }
        if "outcomes" in before and "outcomes" in after:
            entry["outcomes_before"], entry["outcomes_after"] = before["outcomes"], after["outcomes"]
        seeds.append(entry)
    summary = {
        "schema_version": SEEDS_SCHEMA_VERSION,
        "run_label": check_run_label(label),
        "created_utc": utc_now(),
        "config": base,
        "task": records[0]["task"],
        "seeds": seeds,
        "gain_pass_at_1": mean_ci95([e["gain"] for e in seeds]),
        "pass_at_1_before": mean_ci95([e["pass_at_1_before"] for e in seeds]),
        "pass_at_1_after": mean_ci95([e["pass_at_1_after"] for e in seeds]),
        "framework": records[-1]["framework"],
        "hardware": records[-1]["hardware"],
    }
    subsets = [record["eval"].get("subsets", {}) for record in records]
    if all(subsets):
        summary["gain_by_heldout_subset"] = {
            name: dict(
                mean_ci95([sub[name]["after"] - sub[name]["before"] for sub in subsets]),
                prompts=subsets[0][name]["prompts"],
            )
            for name in subsets[0]
            if all(name in sub for sub in subsets)
        }
    evals = [(record["eval"]["before"], record["eval"]["after"]) for record in records]
    if all("kinds" in b and "kinds" in a for b, a in evals):
        summary["scratchpad_share_before"] = mean_ci95([b["kinds"]["scratchpad"]["share"] for b, _ in evals])
        summary["scratchpad_share_after"] = mean_ci95([a["kinds"]["scratchpad"]["share"] for _, a in evals])
        summary["mean_completion_chars_change"] = mean_ci95(
            [a["mean_completion_chars"] - b["mean_completion_chars"] for b, a in evals]
        )
    curves = [record["eval"].get("curve") for record in records]
    if all(curves):
        common = sorted(set.intersection(*({p["step"] for p in c} for c in curves)))
        by_step = [{p["step"]: p for p in c} for c in curves]
        summary["heldout_curve"] = [
            {
                "step": step,
                "pass_at_1": mean_ci95([c[step]["pass_at_1"] for c in by_step]),
                "scratchpad_share": mean_ci95([c[step]["scratchpad_share"] for c in by_step]),
                "mean_completion_chars": mean_ci95([c[step]["mean_completion_chars"] for c in by_step]),
            }
            for step in common
        ]
    if all("outcomes_before" in e for e in seeds):
        summary["gain_by_outcome"] = {
            kind: mean_ci95([e["outcomes_after"][kind] - e["outcomes_before"][kind] for e in seeds])
            for kind in OUTCOMES
        }
    return summary
