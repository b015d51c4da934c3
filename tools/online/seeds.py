"""Several seeds of one configuration and their statistics.

Two interval methods, one per kind of figure. A held-out figure (pass@1, pass@k, maj@k, the shares and lengths of
the held-out samples, over all prompts or a group of them, and the same on the transfer sets) varies with the
training seed, with the evaluation's own samples (each seed draws its own: ``evaluation_seed``) and with which
problems were held out; ``bootstrap_ci95`` resamples seeds and prompts (HELDOUT_INTERVAL_METHOD). A training
figure (the last steps' clip ratio, approx_kl, length...) has one value per seed: ``mean_ci95``, Student's t
over seeds (``t_quantile_975``, without scipy). ``seeds_summary``: the multi-seed summary of a run's per-seed
records (schema ``tools/schemas/online-grpo-seeds-v2.json``, written by ``tools.online.record.write_seeds_summary``);
``heldout_statistics``: its held-out part, shared with the TRL trainer's summary.
"""

from __future__ import annotations

import functools
import math
import random

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
    """Mean and two-sided 95 % t-interval of independent per-seed values (n >= 2; n = 1 gives no interval): the
    interval of a training figure, which has one value per seed."""
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


BOOTSTRAP_REPLICATES = 10000
BOOTSTRAP_SEED = 0
HELDOUT_INTERVAL_METHOD = (
    "two-way percentile bootstrap over seeds and prompts: each of {replicates} replicates draws the seeds and, "
    "independently, the prompts with replacement (the same prompts for every seed drawn: every seed evaluated the "
    "same prompts) and averages the per-seed, per-prompt values it drew; 2.5 % and 97.5 % quantiles of the "
    "replicates; each seed sampled its own evaluation (evaluation_seed), so the spread holds training noise, the "
    "evaluation's sampling noise and the choice of prompts; draws from random.Random({seed}).random()"
)


@functools.cache
def _bootstrap_draws(seeds: int, prompts: int, replicates: int, seed: int):
    """The replicates' (seed indices [R, S], prompt indices [R, P]): drawn from ``random.Random(seed).random()``,
    whose sequence Python keeps across versions, so a summary is reproducible wherever it is recomputed."""
    import numpy as np

    rng = random.Random(seed)
    seed_idx = np.array([[int(rng.random() * seeds) for _ in range(seeds)] for _ in range(replicates)], dtype=np.int64)
    prompt_idx = np.array(
        [[int(rng.random() * prompts) for _ in range(prompts)] for _ in range(replicates)], dtype=np.int64
    )
    return seed_idx, prompt_idx


def bootstrap_ci95(rows, replicates: int = BOOTSTRAP_REPLICATES, seed: int = BOOTSTRAP_SEED) -> dict:
    """Mean and 95 % interval of a held-out figure from ``rows``: one row per seed, one value per prompt (the same
    prompts in the same order in every row). The mean is the plain mean of every value; the interval is the two-way
    percentile bootstrap of HELDOUT_INTERVAL_METHOD, deterministic given ``seed``. ``sd``: the replicates'
    standard deviation. One seed gives no interval (the spread over training seeds is unknown)."""
    import numpy as np

    values = np.asarray(rows, dtype=np.float64)  # [S, P]
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 1:
        raise ValueError(f"rows 必须是 [种子数, 提示数] 的二维数组（至少 1 x 1），收到形状 {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("rows 必须全部是有限数")
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 100:
        raise ValueError(f"replicates 必须是 >= 100 的整数，收到 {replicates!r}")
    n_seeds, n_prompts = values.shape
    mean = float(values.mean())
    if n_seeds == 1:
        return {
            "mean": round(mean, 6),
            "ci95": None,
            "method": "single seed: no interval",
            "n": 1,
            "prompts": n_prompts,
        }
    seed_idx, prompt_idx = _bootstrap_draws(n_seeds, n_prompts, replicates, seed)
    # replicate r: the mean over the drawn seeds of the mean over the drawn prompts
    drawn = values[seed_idx[:, :, None], prompt_idx[:, None, :]]  # [R, S, P]
    reps = np.sort(drawn.mean(axis=(1, 2)))  # [R]
    low, high = reps[math.floor(0.025 * replicates)], reps[math.ceil(0.975 * replicates) - 1]
    return {
        "mean": round(mean, 6),
        "ci95": [round(float(low), 6), round(float(high), 6)],
        "method": HELDOUT_INTERVAL_METHOD.format(replicates=replicates, seed=seed),
        "n": n_seeds,
        "prompts": n_prompts,
        "sd": round(float(reps.std()), 6),
    }


def _column(per_prompt: dict, key: str) -> list:
    """One per-prompt column of ``evaluate``'s ``per_prompt`` (``pass_at_k:4`` reads ``per_prompt["pass_at_k"]["4"]``);
    "wrong" is what is neither right nor unparseable."""
    if key == "wrong":
        return [1.0 - r - u for r, u in zip(per_prompt["pass_at_1"], per_prompt["unparseable"])]
    if ":" in key:
        family, k = key.split(":")
        return per_prompt[family][k]
    return per_prompt[key]


def _change(befores, afters, key, members=None) -> dict:
    """before, after and the change (after - before, per seed and prompt) of the per-prompt column ``key`` over the
    prompts ``members`` (all when None)."""
    prompts = befores[0]["per_prompt"]["prompts"]
    index = range(len(prompts)) if members is None else [prompts.index(p) for p in members]
    before = [[_column(ev["per_prompt"], key)[i] for i in index] for ev in befores]
    after = [[_column(ev["per_prompt"], key)[i] for i in index] for ev in afters]
    return {
        "before": bootstrap_ci95(before),
        "after": bootstrap_ci95(after),
        "gain": bootstrap_ci95([[a - b for a, b in zip(ra, rb)] for ra, rb in zip(after, before)]),
    }


def heldout_statistics(befores, afters, groups=None, transfer=None) -> dict:
    """The held-out part of a multi-seed summary from each seed's ``evaluate`` results before and after training
    (the same prompts for every seed), every interval ``bootstrap_ci95``: pass@1 before / after / gain, the gain by
    outcome, the share of samples that show their work, the change of their mean length, pass@k and maj@k for every
    k, the held-out groups ``groups`` ({name: prompts}, ``tools.online.task.heldout_groups``) and the transfer sets
    ``transfer`` ({addends: [(before, after) per seed]})."""
    for pairs in [list(zip(befores, afters))] + list((transfer or {}).values()):
        prompts = pairs[0][0]["per_prompt"]["prompts"]
        if any(ev["per_prompt"]["prompts"] != prompts for pair in pairs for ev in pair):
            raise ValueError("各种子的评测必须是同一批提示、同样的顺序")
    pass_1 = _change(befores, afters, "pass_at_1")
    shares = _change(befores, afters, "scratchpad_share")
    out = {
        "interval_method": HELDOUT_INTERVAL_METHOD.format(replicates=BOOTSTRAP_REPLICATES, seed=BOOTSTRAP_SEED),
        "gain_pass_at_1": pass_1["gain"],
        "pass_at_1_before": pass_1["before"],
        "pass_at_1_after": pass_1["after"],
        "gain_by_outcome": {
            kind: pass_1["gain"] if kind == "right" else _change(befores, afters, kind)["gain"] for kind in OUTCOMES
        },
        "scratchpad_share_before": shares["before"],
        "scratchpad_share_after": shares["after"],
        "mean_completion_chars_change": _change(befores, afters, "mean_chars")["gain"],
        "pass_maj": {
            k: {kind: _change(befores, afters, f"{kind}_at_k:{k}") for kind in ("pass", "maj")}
            for k in befores[0]["per_prompt"]["pass_at_k"]
        },
    }
    if groups:
        out["heldout_groups"] = {
            name: dict(_change(befores, afters, "pass_at_1", members), prompts=len(members))
            for name, members in groups.items()
            if members
        }
    if transfer:
        out["transfer"] = {
            str(addends): dict(
                _change([b for b, _ in pairs], [a for _, a in pairs], "pass_at_1"),
                prompts=len(pairs[0][0]["per_prompt"]["prompts"]),
            )
            for addends, pairs in transfer.items()
        }
    return out


def seeds_summary(label: str, records: list[dict]) -> dict:
    """The multi-seed summary of ``records`` (one per seed, same configuration up to the seed): per-seed entries,
    the held-out statistics (``heldout_statistics``, bootstrap over seeds and prompts) and the held-out curve."""
    if not records:
        raise ValueError("至少需要一个种子的记录")
    base = {k: v for k, v in records[0]["config"].items() if k != "seed"}
    for record in records[1:]:
        if {k: v for k, v in record["config"].items() if k != "seed"} != base:
            raise ValueError("各种子的配置除 seed 外必须相同")
    seeds = []
    for record in records:
        before, after = record["eval"]["before"], record["eval"]["after"]
        seeds.append(
            {
                "seed": record["config"]["seed"],
                "pass_at_1_before": before["pass_at_1"],
                "pass_at_1_after": after["pass_at_1"],
                "gain": round(after["pass_at_1"] - before["pass_at_1"], 6),
                "evaluation_seeds": [before["seed"], after["seed"]],
                "wall_seconds": record["wall_seconds"],
                "train_seconds": record.get("train_seconds"),
                "cpu_seconds": record.get("cpu_seconds"),
                "warm_start_hash": record["warm_start"]["content_sha256"],
                "record": record["run_label"],
                "outcomes_before": before["outcomes"],
                "outcomes_after": after["outcomes"],
            }
        )
    groups = records[0]["eval"]["groups"]
    if any(record["eval"]["groups"] != groups for record in records):
        raise ValueError("各种子的留出题分组必须相同")
    transfer = {
        addends: [(r["eval"]["transfer"][addends]["before"], r["eval"]["transfer"][addends]["after"]) for r in records]
        for addends in records[0]["eval"]["transfer"]
    }
    summary = {
        "schema_version": SEEDS_SCHEMA_VERSION,
        "run_label": check_run_label(label),
        "created_utc": utc_now(),
        "config": base,
        "task": records[0]["task"],
        "seeds": seeds,
        **heldout_statistics(
            [r["eval"]["before"] for r in records], [r["eval"]["after"] for r in records], groups, transfer
        ),
        "framework": records[-1]["framework"],
        "hardware": records[-1]["hardware"],
    }
    common = sorted(set.intersection(*({p["step"] for p in r["eval"]["curve"]} for r in records)))
    by_step = [{p["step"]: p for p in r["eval"]["curve"]} for r in records]
    summary["heldout_curve"] = [
        {
            "step": step,
            "pass_at_1": bootstrap_ci95([c[step]["per_prompt"]["pass_at_1"] for c in by_step]),
            "scratchpad_share": bootstrap_ci95([c[step]["per_prompt"]["scratchpad_share"] for c in by_step]),
            "mean_completion_chars": bootstrap_ci95([c[step]["per_prompt"]["mean_chars"] for c in by_step]),
        }
        for step in common
    ]
    return summary
