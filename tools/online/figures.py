"""The figures of lesson 7 (PNG bytes, matplotlib imported only when one is drawn): the logged metrics per step,
pass@k against maj@k, the ablations' intervals over seeds, the held-out curve and the held-out gain with its
interval.
"""

from __future__ import annotations

from tools.online.record import load_seeds_summary
from tools.online.report import ABLATION_SEED_METRICS, tail_interval


def _png(fig) -> bytes:
    from tools.notebook_runtime import figure_png

    fig.tight_layout()
    return figure_png(fig, dpi=90, tight=False)


STEP_PANELS = [
    ("reward_mean", "reward mean"),
    ("reward_std", "reward std"),
    ("frac_reward_zero_std", "frac_reward_zero_std"),
    ("completion_length", "completion length"),
    ("clip_ratio_low", "clip ratio low"),
    ("clip_ratio_high", "clip ratio high"),
    ("approx_kl", "approx KL old->new"),
    ("kl_ref", "KL to reference"),
    ("entropy", "token entropy"),
    ("strict_accuracy", "strict accuracy (train samples)"),
]


def plot_steps(steps, title: str = "", others: dict | None = None) -> bytes:
    """PNG: one panel per logged metric; ``others`` = {name: steps} drawn in the same panels."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    series = {"run": steps} if others is None else dict(others)
    fig, axes = plt.subplots(2, 5, figsize=(16, 5.4))
    for axis, (key, name) in zip(axes.flat, STEP_PANELS):
        for label, rows in series.items():
            xs = [r["step"] for r in rows if r.get(key) is not None]
            ys = [r[key] for r in rows if r.get(key) is not None]
            axis.plot(xs, ys, label=label, linewidth=1.2)
        if key == "kl_ref" and all(r.get("kl_ref") is None for rows in series.values() for r in rows):
            axis.text(0.5, 0.5, "beta = 0: no reference", ha="center", va="center", transform=axis.transAxes)
        axis.set_title(name, fontsize=9)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        axis.grid(alpha=0.3)
    if len(series) > 1:
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    return _png(fig)


def plot_pass_maj(record: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 3.6))
    for phase, style in (("before", "--"), ("after", "-")):
        ev = record["eval"][phase]
        ks = [int(k) for k in ev["pass_at_k"]]
        axis.plot(ks, [ev["pass_at_k"][str(k)] for k in ks], style, marker="o", label=f"pass@k {phase}")
        axis.plot(ks, [ev["maj_at_k"][str(k)] for k in ks], style, marker="s", label=f"maj@k {phase}")
    axis.set_xscale("log", base=2)
    axis.set(xlabel="k", ylabel="held-out accuracy", ylim=(0, 1.02), title="pass@k vs maj@k, before / after GRPO")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return _png(fig)


def plot_ablations(records: dict) -> bytes:
    return plot_steps(
        None,
        title="ablations (records under benchmarks/results/online/)",
        others={label: rec["steps"] for label, rec in records.items()},
    )


def plot_ablation_intervals(root, labels, tail: int = 10) -> bytes | None:
    """PNG: one panel per ABLATION_SEED_METRICS key (plus the held-out gain), each label's mean over seeds of its
    last-``tail``-step value with its 95 % t-interval as an error bar; None when no label has a multi-seed record."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    present = [label for label in labels if load_seeds_summary(root, label) is not None]
    if not present:
        return None
    panels = [("gain", "held-out pass@1 gain")] + list(ABLATION_SEED_METRICS)
    fig, axes = plt.subplots(1, len(panels), figsize=(2.1 * len(panels), 3.6))
    for axis, (key, name) in zip(axes, panels):
        for i, label in enumerate(present):
            stat = (
                load_seeds_summary(root, label)["gain_pass_at_1"]
                if key == "gain"
                else tail_interval(root, label, key, tail)
            )
            if stat is None:
                continue
            low, high = stat["ci95"]
            axis.errorbar([i], [stat["mean"]], yerr=[[stat["mean"] - low], [high - stat["mean"]]], fmt="o", capsize=3)
        axis.set_xticks(range(len(present)))
        axis.set_xticklabels(present, rotation=70, fontsize=7)
        axis.set_title(name if key == "gain" else key, fontsize=8)
        axis.grid(alpha=0.3)
    fig.suptitle(f"mean and 95% t-interval over seeds (last {tail} steps)")
    return _png(fig)


def plot_heldout_curve(summaries: dict) -> bytes | None:
    """PNG: the held-out curve of each {name: seeds summary} (``heldout_curve``): pass@1, the share of completions that
    show their work and the mean completion length against the training step, mean over seeds with its 95 %
    t-interval as a band; None when no summary has a curve."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    present = {name: s["heldout_curve"] for name, s in summaries.items() if s and s.get("heldout_curve")}
    if not present:
        return None
    panels = [
        ("pass_at_1", "held-out pass@1"),
        ("scratchpad_share", "share that shows its work"),
        ("mean_completion_chars", "mean completion length (chars)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.4))
    for axis, (key, name) in zip(axes, panels):
        for j, (label, curve) in enumerate(present.items()):
            xs = [p["step"] for p in curve]
            mean = [p[key]["mean"] for p in curve]
            axis.plot(xs, mean, marker="o", color=f"C{j}", label=label)
            if all(p[key]["ci95"] is not None for p in curve):
                axis.fill_between(
                    xs, [p[key]["ci95"][0] for p in curve], [p[key]["ci95"][1] for p in curve], color=f"C{j}", alpha=0.2
                )
        axis.set(xlabel="training step", title=name)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    n = max(p["pass_at_1"]["n"] for curve in present.values() for p in curve)
    fig.suptitle(f"held-out evaluation during training: mean and 95% t-interval over {n} seeds")
    return _png(fig)


def plot_gain_intervals(summaries: dict) -> bytes:
    """PNG: held-out pass@1 gain, mean and 95 % t-interval, of each {name: seeds summary}, overall and per subset."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6.4, 3.4))
    groups = ["all", "equivalent_in_training", "new"]
    for j, (name, summary) in enumerate(summaries.items()):
        for i, group in enumerate(groups):
            stat = summary["gain_pass_at_1"] if group == "all" else summary.get("gain_by_heldout_subset", {}).get(group)
            if stat is None or stat["ci95"] is None:
                continue
            x = i + 0.15 * (j - (len(summaries) - 1) / 2)
            axis.errorbar(
                [x],
                [stat["mean"]],
                yerr=[[stat["mean"] - stat["ci95"][0]], [stat["ci95"][1] - stat["mean"]]],
                fmt="o",
                capsize=3,
                color=f"C{j}",
                label=name if i == 0 else None,
            )
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels(["all held-out", "reordering trained", "new (no order trained)"], fontsize=8)
    axis.set(ylabel="held-out pass@1 gain", title="mean and 95% t-interval over seeds")
    axis.axhline(0, color="grey", linewidth=0.8)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return _png(fig)
