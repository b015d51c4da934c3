"""The figures of lesson 7 (PNG bytes, matplotlib imported only when one is drawn): the logged metrics per step,
pass@k against maj@k, what the model learned and did not over seeds (``plot_learned``), the ablations' intervals
over seeds, the held-out curve and the held-out gain with its interval; ``save_figures``: the PNGs ``make online``
writes beside a record and a seeds summary.
"""

from __future__ import annotations

from pathlib import Path

from tools.online.record import load_seed_records, load_seeds_summary
from tools.online.report import ABLATION_SEED_METRICS, GROUP_NAMES, tail_interval


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
    records = {label: load_seed_records(root, label) for label in present}  # read once, not once per panel
    fig, axes = plt.subplots(1, len(panels), figsize=(2.1 * len(panels), 3.6))
    for axis, (key, name) in zip(axes, panels):
        for i, label in enumerate(present):
            stat = (
                load_seeds_summary(root, label)["gain_pass_at_1"]
                if key == "gain"
                else tail_interval(root, label, key, tail, records=records[label])
            )
            if stat is None:
                continue
            low, high = stat["ci95"]
            axis.errorbar([i], [stat["mean"]], yerr=[[stat["mean"] - low], [high - stat["mean"]]], fmt="o", capsize=3)
        axis.set_xticks(range(len(present)))
        axis.set_xticklabels(present, rotation=70, fontsize=7)
        axis.set_title(name if key == "gain" else key, fontsize=8)
        axis.grid(alpha=0.3)
    fig.suptitle(
        f"mean and 95% interval over seeds: held-out gain bootstrap over seeds and prompts, training metrics "
        f"t-interval of the last {tail} steps"
    )
    return _png(fig)


def plot_heldout_curve(summaries: dict) -> bytes | None:
    """PNG: the held-out curve of each {name: seeds summary} (``heldout_curve``): pass@1, the share of completions that
    show their work and the mean completion length against the training step, mean over seeds with its 95 %
    interval (bootstrap over seeds and prompts) as a band; None when no summary has a curve."""
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
    fig.suptitle(f"held-out evaluation during training: mean and 95% interval over {n} seed(s) and the prompts")
    return _png(fig)


def plot_gain_intervals(summaries: dict) -> bytes:
    """PNG: held-out pass@1 gain, mean and 95 % interval, of each {name: seeds summary}, over all held-out prompts
    and over each held-out group the summaries share."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    shared = [
        g for g in GROUP_NAMES if g != "new" and all(g in s.get("heldout_groups", {}) for s in summaries.values())
    ]
    groups = ["all"] + shared
    fig, axis = plt.subplots(figsize=(1.4 * len(groups) + 2.4, 3.4))
    for j, (name, summary) in enumerate(summaries.items()):
        for i, group in enumerate(groups):
            stat = summary["gain_pass_at_1"] if group == "all" else summary["heldout_groups"][group]["gain"]
            if stat["ci95"] is None:
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
    axis.set_xticklabels(["all held-out"] + [g.replace("_", " ") for g in shared], fontsize=8, rotation=20)
    axis.set(ylabel="held-out pass@1 gain", title="mean and 95% interval (bootstrap over seeds and prompts)")
    axis.axhline(0, color="grey", linewidth=0.8)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return _png(fig)


def plot_learned(summary: dict) -> bytes:
    """PNG, two panels from one seeds summary: the pass@1 gain (mean, 95 % interval) over each held-out group and
    each transfer set; pass@k and maj@k against k before and after training, with their intervals as bands."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    items = [
        ("all held-out" if g == "new" else g.replace("_", " "), stat["gain"])
        for g, stat in summary.get("heldout_groups", {}).items()
    ]
    items += [(f"transfer: {n} addends", stat["gain"]) for n, stat in summary.get("transfer", {}).items()]
    for i, (_, stat) in enumerate(items):
        if stat["ci95"] is not None:
            yerr = [[stat["mean"] - stat["ci95"][0]], [stat["ci95"][1] - stat["mean"]]]
            left.errorbar([i], [stat["mean"]], yerr=yerr, fmt="o", capsize=3, color="C0")
    left.set_xticks(range(len(items)))
    left.set_xticklabels([name for name, _ in items], rotation=30, fontsize=8, ha="right")
    left.axhline(0, color="grey", linewidth=0.8)
    left.set(ylabel="pass@1 gain", title="gain by held-out group and on the transfer sets")
    left.grid(alpha=0.3)
    ks = sorted(summary["pass_maj"], key=int)
    xs = [int(k) for k in ks]
    for kind, marker in (("pass", "o"), ("maj", "s")):
        for phase, style in (("before", "--"), ("after", "-")):
            stats = [summary["pass_maj"][k][kind][phase] for k in ks]
            color = "C1" if kind == "pass" else "C2"
            right.plot(xs, [s["mean"] for s in stats], style, marker=marker, color=color, label=f"{kind}@k {phase}")
            if all(s["ci95"] is not None for s in stats):
                right.fill_between(
                    xs, [s["ci95"][0] for s in stats], [s["ci95"][1] for s in stats], color=color, alpha=0.12
                )
    right.set_xscale("log", base=2)
    right.set(xlabel="k", ylabel="held-out accuracy", ylim=(0, 1.02), title="pass@k vs maj@k, before / after")
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(
        f"{summary['run_label']}: mean and 95% interval over {summary['gain_pass_at_1']['n']} seeds and the prompts"
    )
    return _png(fig)


def figure_paths(json_path) -> Path:
    """Where ``make online`` puts the PNG of the record or seeds summary ``json_path``: beside it, same stem."""
    return Path(json_path).with_suffix(".png")


def save_figures(json_path, document: dict) -> Path | None:
    """Write the curve of a run's record (its logged metrics per step, ``plot_steps``) or of a seeds summary (its
    held-out curve, ``plot_heldout_curve``) as a PNG beside ``json_path`` (atomically); returns its path, or None for
    a summary without a held-out curve (the TRL trainer's)."""
    from tools.notebook_runtime import save_bytes

    if "steps" in document:
        png = plot_steps(
            document["steps"], title=f"online GRPO / {document['run_label']} seed {document['config']['seed']}"
        )
    else:
        png = plot_heldout_curve({document["run_label"]: document})
        if png is None:
            return None
    return save_bytes(figure_paths(json_path), png)
