"""What lesson 7 reads from its records, in words and tables (Markdown, Chinese for the learner).

One rule turns intervals into words, everywhere the lesson states an effect (``interval_verdict``, stated once in
``VERDICT_RULE``): a difference only where the two 95 % intervals do not overlap (against a number: where the
interval does not hold it). The course's goal (``GOAL_MEAN_GAIN``, ``GOAL_CI_LOW``, ``START_RANGE``) and whether a
multi-seed summary meets it, the seeds table, what the model learned and did not (``learned_table``: carries,
zero-heavy sums, transfer, pass@k against maj@k), the ablations' verdicts (``ABLATION_COMPARISONS``) and their
seeds side by side (``paired_seeds_table``), and the headline and the table of single records.
"""

from __future__ import annotations

from tools.online.record import load_seed_records, load_seeds_summary
from tools.online.seeds import mean_ci95

# The headline goal the course set itself: mean held-out pass@1 gain over seeds 0-2 at least GOAL_MEAN_GAIN
# with the lower end of its 95 % interval at least GOAL_CI_LOW.
GOAL_MEAN_GAIN = 0.30
GOAL_CI_LOW = 0.20
START_RANGE = (0.10, 0.50)  # the warm start's held-out pass@1 the course asked for: right only sometimes


VERDICT_RULE = (
    "只有两个 95% 区间不重叠，才说两者有差别（与一个数比较时：区间不含这个数）；区间重叠就说这一规模上分辨不出——"
    "这不证明没有差别，只说明这些种子与提示分辨不出来"
)


def interval_verdict(a, b) -> str:
    """The lesson's one rule (VERDICT_RULE): "a > b" / "a < b" when the 95 % interval of ``a`` lies wholly above /
    below that of ``b``, "overlap" when they share a point, "missing" without both intervals. ``b`` may be a number
    (a difference from 0, a threshold): an interval of width zero."""
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        b = {"ci95": [float(b), float(b)]}
    if a is None or b is None or a.get("ci95") is None or b.get("ci95") is None:
        return "missing"
    if a["ci95"][0] > b["ci95"][1]:
        return "a > b"
    if a["ci95"][1] < b["ci95"][0]:
        return "a < b"
    return "overlap"


def goal_met(summary: dict) -> bool:
    """The course's goal: mean gain at least GOAL_MEAN_GAIN and the gain's interval wholly above GOAL_CI_LOW (the one
    rule, ``interval_verdict``, against a number)."""
    gain = summary["gain_pass_at_1"]
    return gain["mean"] >= GOAL_MEAN_GAIN and interval_verdict(gain, GOAL_CI_LOW) == "a > b"


def _interval(stat: dict, signed: bool = True) -> str:
    """``mean, 95% 区间 [low, high]`` in words (a change signed, a level not)."""
    fmt = "+.3f" if signed else ".3f"
    if stat["ci95"] is None:
        return f"{stat['mean']:{fmt}}（只有一个种子，没有区间）"
    return f"{stat['mean']:{fmt}}，95% 区间 [{stat['ci95'][0]:{fmt}}, {stat['ci95'][1]:{fmt}}]"


# How the lesson's intervals are computed, in the learner's words (tools.online.seeds holds the methods)
INTERVAL_METHOD_WORDS = {
    "heldout": "留出集上的数（pass@1、pass@k、maj@k、答法比例、长度，迁移集同样）：按种子与提示的双向自助法（bootstrap）"
    "——每次重抽样有放回地抽种子、再独立地抽提示，1 万次重抽样的 2.5% 与 97.5% 分位数；每个种子用自己的评测种子采样，"
    "所以区间同时含训练的随机性、评测采样的随机性和“留出了哪些题”",
    "training": "训练中记录的指标（末 10 步的裁剪比例、approx_kl、长度……每个种子一个数）：跨种子的 Student t 区间",
}


def seeds_table(summary: dict) -> str:
    """Markdown: one row per seed (its evaluation seeds too), then the mean gain with its interval, the goal, and
    the gain by outcome kind, the shares that show their work and the length change, each with its interval."""
    lines = [
        f"多种子汇总 `{summary['run_label']}`（{len(summary['seeds'])} 个种子，同一配置）：",
        "",
        "| 种子 | 评测种子（前 / 后） | pass@1 前 | pass@1 后 | 提高 | 用时 (s) | 热启动哈希 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in summary["seeds"]:
        lines.append(
            f"| {e['seed']} | {' / '.join(str(v) for v in e['evaluation_seeds'])} | {e['pass_at_1_before']:.3f} | "
            f"{e['pass_at_1_after']:.3f} | {e['gain']:+.3f} | {e['wall_seconds']:.1f} | `{e['warm_start_hash'][:12]}` |"
        )
    lines += [
        "",
        f"平均提高 {_interval(summary['gain_pass_at_1'])}（{summary['gain_pass_at_1']['n']} 个种子 × "
        f"{summary['gain_pass_at_1'].get('prompts', '—')} 道题，双向自助法）。"
        f"课程定的目标（平均 ≥ {GOAL_MEAN_GAIN:+.2f} 且整个区间在 {GOAL_CI_LOW:+.2f} 之上）："
        + ("**达到**。" if goal_met(summary) else "**没有达到**。"),
    ]
    start = summary["pass_at_1_before"]
    lines.append(
        f"热启动的留出集 pass@1 为 {_interval(start, signed=False)}；课程要求它在 {START_RANGE[0]:.2f}–{START_RANGE[1]:.2f} 之间："
        + (
            "在范围内。"
            if START_RANGE[0] <= start["mean"] <= START_RANGE[1]
            else "**不在范围内**（起点偏高，能提高的空间更小）。"
        )
    )
    for kind, name in (("right", "答对"), ("wrong", "答错的整数"), ("unparseable", "无法解析")):
        lines.append(f"- {name}的比例变化：{_interval(summary['gain_by_outcome'][kind])}")
    lines.append(f"- 训练前写出算式的回答比例：{_interval(summary['scratchpad_share_before'], signed=False)}")
    lines.append(f"- 训练后写出算式的回答比例：{_interval(summary['scratchpad_share_after'], signed=False)}")
    lines.append(f"- 回答平均长度（字符）的变化：{_interval(summary['mean_completion_chars_change'])}")
    lines.append("- " + shown_work_verdict(summary))
    return "\n".join(lines)


def shown_work_verdict(summary: dict) -> str:
    """The introduction's question - does RL make the policy show its work more, and its answers longer? - answered
    from the seeds summary's intervals by ``interval_verdict``, in words."""
    share = interval_verdict(summary["scratchpad_share_after"], summary["scratchpad_share_before"])
    length = interval_verdict(summary["mean_completion_chars_change"], 0.0)
    share_words = {"a > b": "上升", "a < b": "下降", "overlap": "区间重叠，分辨不出变化", "missing": "缺少区间"}[share]
    length_words = {"a > b": "变长", "a < b": "变短", "overlap": "区间含 0，分辨不出变化", "missing": "缺少区间"}[
        length
    ]
    if share == "a > b" and length == "a > b":
        answer = "**多写算式、回答变长**"
    elif share == "a < b" and length == "a < b":
        answer = "**少写算式、回答变短**：强化学习把直接作答练得更准，而不是改写算式"
    else:
        answer = "**这些区间分辨不出方向**"
    return f"导读的问题（写算式的会不会越来越多）：写算式的比例{share_words}，回答{length_words}——{answer}。"


def _stat(stat: dict, signed: bool = False) -> str:
    """``mean [low, high]`` of an interval (three decimals)."""
    fmt = "+.3f" if signed else ".3f"
    if stat is None:
        return "—"
    if stat.get("ci95") is None:
        return f"{stat['mean']:{fmt}}"
    return f"{stat['mean']:{fmt}} [{stat['ci95'][0]:{fmt}}, {stat['ci95'][1]:{fmt}}]"


CHANGE_WORDS = {
    "a > b": "上升（区间在 0 之上）",
    "a < b": "下降（区间在 0 之下）",
    "overlap": "区间含 0：分辨不出",
    "missing": "缺少区间",
}
GROUP_NAMES = {
    "new": "全部留出题（任何顺序都没训练过）",
    "carries_0": "0 次进位（和 0–9）",
    "carries_1": "1 次进位（和 10–19）",
    "carries_2": "2 次进位（和 20–29）",
    "carries_3": "3 次进位（和 30–36）",
    "zero_heavy": "至少一半加数是 0",
}


def learned_table(summary: dict) -> str:
    """Markdown: pass@1 before, after and gain (interval over seeds and prompts, ``interval_verdict`` against 0) of
    each held-out group (carries, zero-heavy sums), of the transfer sets, and pass@k against maj@k for every k."""
    lines = [
        "| 题目 | 道数 | pass@1 前 | pass@1 后 | 提高 | 提高的区间说明 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, stat in summary.get("heldout_groups", {}).items():
        if name in GROUP_NAMES:
            lines.append(
                f"| 留出集：{GROUP_NAMES[name]} | {stat['prompts']} | {_stat(stat['before'])} | {_stat(stat['after'])} | "
                f"{_stat(stat['gain'], True)} | {CHANGE_WORDS[interval_verdict(stat['gain'], 0.0)]} |"
            )
    for addends, stat in summary.get("transfer", {}).items():
        lines.append(
            f"| 迁移集：{addends} 个数相加 | {stat['prompts']} | {_stat(stat['before'])} | {_stat(stat['after'])} | "
            f"{_stat(stat['gain'], True)} | {CHANGE_WORDS[interval_verdict(stat['gain'], 0.0)]} |"
        )
    lines += [
        "",
        "| k | pass@k 前 | pass@k 后 | pass@k 变化 | maj@k 前 | maj@k 后 | maj@k 变化 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k, stat in summary["pass_maj"].items():
        p, m = stat["pass"], stat["maj"]
        lines.append(
            f"| {k} | {_stat(p['before'])} | {_stat(p['after'])} | {_stat(p['gain'], True)}：{CHANGE_WORDS[interval_verdict(p['gain'], 0.0)]} | "
            f"{_stat(m['before'])} | {_stat(m['after'])} | {_stat(m['gain'], True)}：{CHANGE_WORDS[interval_verdict(m['gain'], 0.0)]} |"
        )
    return "\n".join(lines)


def sharpens_verdict(summary: dict) -> str:
    """Does RL reach problems the warm start could not solve, or make it pick what it could already sample? From the
    largest k's pass@k and maj@k changes, by ``interval_verdict`` against 0."""
    k = max(summary["pass_maj"], key=int)
    reach = interval_verdict(summary["pass_maj"][k]["pass"]["gain"], 0.0)
    vote = interval_verdict(summary["pass_maj"][k]["maj"]["gain"], 0.0)
    words = f"pass@{k}（{k} 次里至少一次答对）{CHANGE_WORDS[reach]}，maj@{k}（{k} 次投票）{CHANGE_WORDS[vote]}"
    if vote == "a > b" and reach != "a > b":
        return words + "：强化学习让模型更常选中它本来就能采到的答案，没有让它够到新的题。"
    if reach == "a > b":
        return words + "：强化学习让模型答对了热启动采样时答不对的题。"
    return words + "：这些区间分辨不出强化学习改变了什么。"


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


# (label a, label b, metric key, what the textbook predicts) of the comparisons the lesson reads from the intervals;
# HELDOUT_GAIN: the held-out pass@1 gain of the seeds summary (bootstrap interval), every other key the mean of the
# last steps' value of a training metric (t interval over seeds, ``tail_interval``)
HELDOUT_GAIN = "heldout_gain"
ABLATION_COMPARISONS = [
    ("mu4", "reference", "clip_ratio_low", "μ = 4 裁剪（low）比 μ = 1 多（μ = 1 时由构造恒为 0）"),
    ("mu4", "reference", "approx_kl", "μ = 4 的 approx_kl 比 μ = 1 大（μ = 1 时由构造恒为 0）"),
    ("mu4", "reference", HELDOUT_GAIN, "μ = 4 与 μ = 1 的留出集提高不同"),
    ("dr_grpo", "reference", "completion_length", "dr_grpo 与 grpo 的回答长度不同"),
    ("dapo", "reference", "completion_length", "dapo 与 grpo 的回答长度不同"),
    ("mu4_clip_higher", "mu4", "entropy", "ε_high = 0.28 时熵比 0.2 高（下降得更慢）"),
    ("mu4_clip_higher", "mu4", "clip_ratio_high", "ε_high = 0.28 时 clip high 比 0.2 少"),
    ("beta", "reference", "completion_length", "β > 0 时回答长度离热启动更近"),
    ("loophole", "loophole_fixed", "strict_accuracy", "漏洞验证器下训练中的 strict 更低"),
    ("loophole", "loophole_fixed", "completion_length", "漏洞验证器下回答更长（列出几个数）"),
    ("loophole", "loophole_fixed", HELDOUT_GAIN, "漏洞验证器下留出集 pass@1 提高得更少"),
]


def tail_interval(root, label: str, key: str, tail: int = 10, records=None):
    """The interval a comparison reads: the held-out gain (HELDOUT_GAIN) from the seeds summary, else the mean over
    seeds of the last ``tail`` steps' ``key`` with its t interval (None with fewer than two seeds). ``records``: the
    label's per-seed records when the caller has read them already."""
    if key == HELDOUT_GAIN:
        summary = load_seeds_summary(root, label)
        return None if summary is None else summary["gain_pass_at_1"]
    records = load_seed_records(root, label) if records is None else records
    values = []
    for record in records:
        rows = [r[key] for r in record["steps"][-tail:] if r.get(key) is not None]
        if rows:
            values.append(sum(rows) / len(rows))
    return mean_ci95(values) if len(values) >= 2 and len(values) == len(records) else None


VERDICT_WORDS = {
    "a > b": "前者更大（区间不重叠）",
    "a < b": "前者更小（区间不重叠）",
    "overlap": "区间重叠：这一规模上分辨不出",
    "missing": "缺少多种子记录",
}


def ablation_verdicts(root, comparisons=None, tail: int = 10) -> list[dict]:
    """For each comparison: the two intervals (``tail_interval``) and what they support by the one rule
    (``interval_verdict``): "a > b" or "a < b" when the 95 % intervals do not overlap, "overlap" when they do,
    "missing" without a multi-seed record."""
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
        "| 对照 | 指标（训练指标：末 10 步） | 前者 | 后者 | 教科书的预测 | 区间支持什么 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in verdicts:
        lines.append(
            f"| `{v['a']}` 对 `{v['b']}` | `{v['key']}` | {cell(v['a_interval'])} | {cell(v['b_interval'])} | "
            f"{v['prediction']} | {words[v['verdict']]} |"
        )
    return "\n".join(lines)


def paired_seeds_table(root, a: str, b: str, keys, tail: int = 10) -> str:
    """Markdown: seed by seed, ``a`` against ``b`` on each key (HELDOUT_GAIN: the seed's held-out pass@1 gain; a
    training metric: the mean of its last ``tail`` steps), and in how many seeds ``a`` is the larger; what three seeds
    show, beside the verdict their intervals give."""
    runs = {label: {r["config"]["seed"]: r for r in load_seed_records(root, label)} for label in (a, b)}
    seeds = sorted(set(runs[a]) & set(runs[b]))
    if not seeds:
        return f"（`{a}` 与 `{b}` 没有共同种子的记录）"

    def value(record, key):
        if key == HELDOUT_GAIN:
            return record["eval"]["after"]["pass_at_1"] - record["eval"]["before"]["pass_at_1"]
        rows = [r[key] for r in record["steps"][-tail:] if r.get(key) is not None]
        return sum(rows) / len(rows)

    head = ["指标"] + [f"种子 {s}：`{a}` / `{b}`" for s in seeds] + [f"`{a}` 更大的种子数"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for key in keys:
        pairs = [(value(runs[a][s], key), value(runs[b][s], key)) for s in seeds]
        name = "留出集 pass@1 提高" if key == HELDOUT_GAIN else f"`{key}`（末 {tail} 步）"
        lines.append(
            f"| {name} | "
            + " | ".join(f"{x:.3f} / {y:.3f}" for x, y in pairs)
            + f" | {sum(x > y for x, y in pairs)} / {len(pairs)} |"
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
