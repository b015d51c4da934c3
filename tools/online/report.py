"""What lesson 7 reads from its records, in words and tables (Markdown, Chinese for the learner).

The course's goal (``GOAL_MEAN_GAIN``, ``GOAL_CI_LOW``, ``START_RANGE``) and whether a multi-seed summary meets it,
the seeds table, the verdicts of the ablations' predictions from their 95 % intervals (``ABLATION_COMPARISONS``,
``interval_verdict``: a difference only where the intervals do not overlap), and the headline and the table of
single records.
"""

from __future__ import annotations

from tools.online.record import load_seed_records, load_seeds_summary
from tools.online.seeds import mean_ci95

# The headline goal the course set itself: mean held-out pass@1 gain over seeds 0-2 at least GOAL_MEAN_GAIN
# with the lower end of its 95 % interval at least GOAL_CI_LOW.
GOAL_MEAN_GAIN = 0.30
GOAL_CI_LOW = 0.20
START_RANGE = (0.10, 0.50)  # the warm start's held-out pass@1 the course asked for: right only sometimes


def goal_met(summary: dict) -> bool:
    gain = summary["gain_pass_at_1"]
    return gain["ci95"] is not None and gain["mean"] >= GOAL_MEAN_GAIN and gain["ci95"][0] >= GOAL_CI_LOW


def _interval(stat: dict) -> str:
    if stat["ci95"] is None:
        return f"{stat['mean']:+.3f}（只有一个种子，没有区间）"
    return f"{stat['mean']:+.3f}，95% 区间 [{stat['ci95'][0]:+.3f}, {stat['ci95'][1]:+.3f}]"


def seeds_table(summary: dict) -> str:
    """Markdown: one row per seed, then the mean gain with its interval (and by outcome kind)."""
    lines = [
        f"多种子汇总 `{summary['run_label']}`（{len(summary['seeds'])} 个种子，同一配置）：",
        "",
        "| 种子 | pass@1 前 | pass@1 后 | 提高 | 用时 (s) | 热启动哈希 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in summary["seeds"]:
        lines.append(
            f"| {e['seed']} | {e['pass_at_1_before']:.3f} | {e['pass_at_1_after']:.3f} | {e['gain']:+.3f} | "
            f"{e['wall_seconds']:.1f} | `{e['warm_start_hash'][:12]}` |"
        )
    lines += [
        "",
        f"平均提高 {_interval(summary['gain_pass_at_1'])}（{summary['gain_pass_at_1']['method']}）。"
        f"课程定的目标（平均 ≥ {GOAL_MEAN_GAIN:+.2f} 且区间下端 ≥ {GOAL_CI_LOW:+.2f}）："
        + ("**达到**。" if goal_met(summary) else "**没有达到**。"),
    ]
    start = summary["pass_at_1_before"]["mean"]
    lines.append(
        f"热启动的留出集 pass@1 为 {start:.3f}；课程要求它在 {START_RANGE[0]:.2f}–{START_RANGE[1]:.2f} 之间："
        + (
            "在范围内。"
            if START_RANGE[0] <= start <= START_RANGE[1]
            else "**不在范围内**（起点偏高，能提高的空间更小）。"
        )
    )
    for kind, name in (("right", "答对"), ("wrong", "答错的整数"), ("unparseable", "无法解析")):
        if kind in summary.get("gain_by_outcome", {}):
            lines.append(f"- {name}的比例变化：{_interval(summary['gain_by_outcome'][kind])}")
    for key, name in (
        ("scratchpad_share_before", "训练前写出算式的回答比例"),
        ("scratchpad_share_after", "训练后写出算式的回答比例"),
    ):
        if key in summary:
            lines.append(f"- {name}：{_interval(summary[key])[1:]}")
    if "mean_completion_chars_change" in summary:
        lines.append(f"- 回答平均长度（字符）的变化：{_interval(summary['mean_completion_chars_change'])}")
    if "scratchpad_share_before" in summary and "mean_completion_chars_change" in summary:
        lines.append("- " + shown_work_verdict(summary))
    for key, name in (
        ("equivalent_in_training", "换个顺序出现在训练数据里的留出题"),
        ("new", "任何顺序都没训练过的留出题"),
    ):
        if key in summary.get("gain_by_heldout_subset", {}):
            stat = summary["gain_by_heldout_subset"][key]
            lines.append(f"- {name}（{stat['prompts']} 道）的 pass@1 提高：{_interval(stat)}")
    return "\n".join(lines)


def shown_work_verdict(summary: dict) -> str:
    """The lesson's prediction (more completions show their work, completions get longer) against the seeds
    summary's intervals: what they support, in words."""
    share = interval_verdict(summary["scratchpad_share_after"], summary["scratchpad_share_before"])
    length = summary["mean_completion_chars_change"]
    grows = length["ci95"] is not None and length["ci95"][0] > 0
    shrinks = length["ci95"] is not None and length["ci95"][1] < 0
    share_words = {"a > b": "上升", "a < b": "下降", "overlap": "区间重叠，看不出变化", "missing": "缺少区间"}[share]
    length_words = "变长" if grows else "变短" if shrinks else "区间含 0，看不出变化"
    if share == "a > b" and grows:
        verdict = "**成立**"
    elif share == "a < b" or shrinks:
        verdict = "**不成立**（区间支持相反的方向）"
    else:
        verdict = "**看不出**（区间分辨不出）"
    return f"导读的预测（写算式的比例上升、回答变长）：写算式的比例{share_words}，回答{length_words}——预测{verdict}。"


ABLATION_SEED_METRICS = (
    ("clip_ratio_high", "clip high"),
    ("clip_ratio_low", "clip low"),
    ("approx_kl", "approx_kl"),
    ("kl_ref", "KL 到参考"),
    ("completion_length", "长度"),
    ("entropy", "熵"),
    ("reward_mean", "训练奖励"),
    ("strict_accuracy", "strict"),
)


def ablation_seeds_table(root, labels, tail: int = 10) -> str:
    """Markdown: for each label with a multi-seed summary, the held-out gain and the last-``tail``-step mean of each
    ABLATION_SEED_METRICS key, as mean [95 % t-interval] over its seeds; labels without one are listed as missing."""

    def cell(stat):
        if stat is None:
            return "—"
        if stat["ci95"] is None:
            return f"{stat['mean']:.3g}"
        return f"{stat['mean']:.3g} [{stat['ci95'][0]:.3g}, {stat['ci95'][1]:.3g}]"

    head = ["记录", "种子数", "pass@1 提高"] + [name for _, name in ABLATION_SEED_METRICS]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    missing = []
    for label in labels:
        records = load_seed_records(root, label)
        if not records:
            missing.append(label)
            continue
        summary = load_seeds_summary(root, label)
        row = [f"`{label}`", str(len(records)), cell(summary["gain_pass_at_1"])]
        for key, _ in ABLATION_SEED_METRICS:
            values = []
            for record in records:
                rows = [r[key] for r in record["steps"][-tail:] if r.get(key) is not None]
                if rows:
                    values.append(sum(rows) / len(rows))
            row.append(cell(mean_ci95(values)) if len(values) == len(records) else "—")
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) if len(lines) > 2 else "（还没有多种子的消融记录）"
    if missing:
        text += "\n\n没有多种子记录（只有单次运行或没有记录）：" + "、".join(f"`{m}`" for m in missing)
    return text


# (label a, label b, metric key, what the textbook predicts) of the comparisons the lesson reads from the intervals
ABLATION_COMPARISONS = [
    ("mu4", "reference", "clip_ratio_low", "μ = 4 裁剪（low）比 μ = 1 多"),
    ("mu4", "reference", "approx_kl", "μ = 4 的 approx_kl 比 μ = 1 大"),
    ("dr_grpo", "reference", "completion_length", "dr_grpo 与 grpo 的回答长度不同"),
    ("dapo", "reference", "completion_length", "dapo 与 grpo 的回答长度不同"),
    ("mu4_clip_higher", "mu4", "entropy", "ε_high = 0.28 时熵比 0.2 高（下降得更慢）"),
    ("mu4_clip_higher", "mu4", "clip_ratio_high", "ε_high = 0.28 时 clip high 比 0.2 少"),
    ("beta", "reference", "completion_length", "β > 0 时回答长度离热启动更近"),
    ("loophole", "loophole_fixed", "strict_accuracy", "漏洞验证器下训练中的 strict 更低"),
    ("loophole", "loophole_fixed", "completion_length", "漏洞验证器下回答更长（列出几个数）"),
]


def tail_interval(root, label: str, key: str, tail: int = 10):
    records = load_seed_records(root, label)
    values = []
    for record in records:
        rows = [r[key] for r in record["steps"][-tail:] if r.get(key) is not None]
        if rows:
            values.append(sum(rows) / len(rows))
    return mean_ci95(values) if len(values) >= 2 and len(values) == len(records) else None


def interval_verdict(a, b) -> str:
    """ "a > b" / "a < b" when the two 95 % intervals do not overlap, "overlap" when they do, "missing" without both."""
    if a is None or b is None or a.get("ci95") is None or b.get("ci95") is None:
        return "missing"
    if a["ci95"][0] > b["ci95"][1]:
        return "a > b"
    if a["ci95"][1] < b["ci95"][0]:
        return "a < b"
    return "overlap"


VERDICT_WORDS = {
    "a > b": "前者更大（区间不重叠）",
    "a < b": "前者更小（区间不重叠）",
    "overlap": "区间重叠：这一规模上看不出差别",
    "missing": "缺少多种子记录",
}


def ablation_verdicts(root, comparisons=None, tail: int = 10) -> list[dict]:
    """For each comparison: the two last-``tail``-step intervals over seeds and what they support - "a > b" or
    "a < b" when the 95 % intervals do not overlap, "no difference resolved" when they do (or a record is missing)."""
    out = []
    for a, b, key, prediction in comparisons or ABLATION_COMPARISONS:
        ia, ib = tail_interval(root, a, key, tail), tail_interval(root, b, key, tail)
        verdict = interval_verdict(ia, ib)
        out.append(
            {
                "a": a,
                "b": b,
                "key": key,
                "prediction": prediction,
                "a_interval": ia,
                "b_interval": ib,
                "verdict": verdict,
            }
        )
    return out


def verdicts_table(verdicts) -> str:
    words = VERDICT_WORDS

    def cell(stat):
        return "—" if stat is None else f"{stat['mean']:.3g} [{stat['ci95'][0]:.3g}, {stat['ci95'][1]:.3g}]"

    lines = [
        "| 对照 | 指标（末 10 步） | 前者 | 后者 | 教科书的预测 | 区间支持什么 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in verdicts:
        lines.append(
            f"| `{v['a']}` 对 `{v['b']}` | `{v['key']}` | {cell(v['a_interval'])} | {cell(v['b_interval'])} | "
            f"{v['prediction']} | {words[v['verdict']]} |"
        )
    return "\n".join(lines)


def headline(record: dict) -> dict:
    before, after = record["eval"]["before"], record["eval"]["after"]
    return {
        "run_label": record["run_label"],
        "pass_at_1_before": before["pass_at_1"],
        "pass_at_1_after": after["pass_at_1"],
        "gain": round(after["pass_at_1"] - before["pass_at_1"], 6),
        "greedy_before": before["greedy_accuracy"],
        "greedy_after": after["greedy_accuracy"],
        "steps": len(record["steps"]),
        "train_seconds": record.get("train_seconds"),
        "wall_seconds": record["wall_seconds"],
        "load_average_before": record["hardware"]["load_average_before"],
        "load_average_after": record["hardware"]["load_average_after"],
        "cpu_count": record["hardware"]["cpu_count"],
        "torch_threads": record["hardware"]["torch_threads"],
    }


def ablation_table(records: dict) -> str:
    lines = [
        "| 记录 | 起点 | μ | loss_type | ε_high | reward | pass@1 前 → 后 | 留出集“包含答案” 前 → 后 | "
        "末 10 步 clip high | 末 10 步 approx_kl | 末 10 步长度 | 末 10 步熵 | 末 10 步训练奖励 | 末 10 步 strict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, rec in records.items():
        cfg, tail = rec["config"], rec["steps"][-10:] or [{}]
        mean = lambda key, tail=tail: sum(r.get(key, 0.0) for r in tail) / len(tail)  # noqa: E731
        before, after = rec["eval"]["before"], rec["eval"]["after"]
        contains = (
            f"{before['contains_answer_rate']:.3f} → {after['contains_answer_rate']:.3f}"
            if "contains_answer_rate" in before and "contains_answer_rate" in after
            else "—"
        )
        lines.append(
            f"| `{label}` | {rec['warm_start'].get('variant', 'sft')} | {cfg['num_iterations']} | "
            f"{cfg['loss_type']} | {cfg['epsilon_high']} | "
            f"{cfg['reward']} | {before['pass_at_1']:.3f} → {after['pass_at_1']:.3f} | {contains} | "
            f"{mean('clip_ratio_high'):.4f} | {mean('approx_kl'):.5f} | {mean('completion_length'):.2f} | "
            f"{mean('entropy'):.3f} | {mean('reward_mean'):.3f} | {mean('strict_accuracy'):.3f} |"
        )
    return "\n".join(lines)
