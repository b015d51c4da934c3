"""Oracle of lesson 1 (nb01_group_advantages): group advantages, the MiniMind layout, the conventions question
(a function of the group, checked on the lesson's [0, 0, 0, 1] and on 0/1 groups drawn from the seed).

The references below are the grader's own (plain float64 loops with math.fsum), not the lesson's answers.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ..vocabulary import Case, Close, Each, Mismatch, Raises, Satisfies, close_number
from ._common import choice, conditioned, distinct_ids, group_ids, normal, randint, uniform

# test-cell grade_id -> the answer cell it grades (its comment carries the verdicts)
TESTS = {
    "test_compute_group_advantages_visible": "compute_group_advantages",
    "test_compute_group_advantages_hidden": "compute_group_advantages",
    "test_group_relative_advantages_visible": "group_relative_advantages",
    "test_group_relative_advantages_hidden": "group_relative_advantages",
    "test_conventions_question_visible": "answer_conventions_0001",  # the answer cell defines answer_conventions
    "test_conventions_question_hidden": "answer_conventions_0001",
}
# where each case family comes from: (regex over a case's ``what``, the line of the released notebook - TODO
# text, docstring, provided check or visible test - that states it); a case no family matches is an orphan
CASE_SOURCES = [
    (r"^多组|^随机输入|^eps=.*精确标准化|^近零方差组", r"每组 $(r-\mu_g)/\max(\sigma_g,\varepsilon)$，总体标准差"),
    (r"^全等奖励组", "单元素组和全等奖励组的优势**严格为 0**"),
    (r"^rewards 不是一维$|^二维 rewards$", "`rewards` 不是一维"),
    (r"^group_ids 与 rewards 形状不同$", "两者形状不同"),
    (r"^rewards 为空$", "`rewards` 为空"),
    (r"^rewards 不是浮点张量（", "`rewards` 不是浮点张量"),
    (r"^rewards 含 (NaN|inf|-inf)$", "`rewards` 含 NaN 或 inf"),
    (r"^eps = ", "`eps` 不是正的有限数"),
    (r"^group_ids 不是整数$", "`group_ids` 不是整数类型"),
    (
        r"^平铺布局|^随机平铺输入|^eps=.*应为 std \+ eps|^按行（连续的 G 个）分组|^全等奖励的行",
        r"$(r-\mu)/(\sigma+\varepsilon)$，$\sigma$ 是**总体**标准差",
    ),
    (r"^G=1 时优势应为 0$", "G=1 与输入契约"),
    (r"^num_generations (= 0|为负|不是整数|是 bool)$", "必须是不小于 1 的整数"),
    (r"整数倍$", "的长度不是 `num_generations` 的整数倍"),
    (r"^计分问题的答案格式|^七种约定对 \[0, 0, 0, 1\] 的优势$", "同一组 [0, 0, 0, 1]，七种约定各给出什么？"),
    (r"^七种约定对一组 0/1 奖励", "评分时还会用别的 `G` 和别的 0/1 组检查同一个函数"),
]
FLAGS: dict = {}


def course_advantages(rewards: torch.Tensor, ids: torch.Tensor, eps: float) -> torch.Tensor:
    """(r - mean) / max(population std, eps) per group, exact 0 for constant groups (float64 result)."""
    r = rewards.to(torch.float64).tolist()
    labels = ids.tolist()
    out = [0.0] * len(r)
    for label in set(labels):
        members = [i for i, g in enumerate(labels) if g == label]
        values = [r[i] for i in members]
        if max(values) == min(values):
            continue
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        for i in members:
            out[i] = (r[i] - mean) / max(std, eps)
    return torch.tensor(out, dtype=torch.float64)


def minimind_advantages(rewards: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """(r - row mean) / (row population std + eps), rows of ``group_size`` consecutive rewards."""
    r = rewards.to(torch.float64).tolist()
    out = []
    for start in range(0, len(r), group_size):
        row = r[start : start + group_size]
        mean = math.fsum(row) / len(row)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in row) / len(row))
        out.extend((v - mean) / (std + eps) for v in row)
    return torch.tensor(out, dtype=torch.float64)


def _tol(dtype: torch.dtype) -> float:
    return 1e-9 if dtype == torch.float64 else 2e-5


def _advantage_case(test, rewards, ids, what, eps=None):
    kwargs = {} if eps is None else {"eps": eps}
    want = course_advantages(rewards, ids, 1e-6 if eps is None else eps)
    return Case(
        test,
        "compute_group_advantages",
        (rewards, ids),
        kwargs,
        Close(want, atol=_tol(rewards.dtype), rtol=_tol(rewards.dtype), dtype=rewards.dtype),
        what=what,
    )


def _zero_case(test, rewards, ids, what):
    """Degenerate groups: the advantages must be exactly 0 (no rounding noise blown up by the floor)."""
    return Case(
        test,
        "compute_group_advantages",
        (rewards, ids),
        {},
        Close(torch.zeros(rewards.shape, dtype=rewards.dtype), atol=0.0, rtol=0.0),
        what=what,
    )


def cases(gen: torch.Generator, flags: dict) -> list[Case]:
    out: list[Case] = []
    vis, hid = "test_compute_group_advantages_visible", "test_compute_group_advantages_hidden"
    # --- visible contract: several unsorted groups with negative ids, a singleton, equal rewards, tiny variance
    ids = torch.cat([group_ids(gen, randint(gen, 6, 9), 3), distinct_ids(gen, 1, 5000) + 9000])
    rewards = normal(gen, (len(ids),), 2.0, 1.0)
    out.append(_advantage_case(vis, rewards, ids, "多组（无序、负组号）且含单元素组的优势（float64）"))
    value = choice(gen, [1.1, 2.2, 0.3, 0.7, 3.3]) + randint(gen, 0, 5)
    n = randint(gen, 7, 12)
    out.append(
        _zero_case(
            vis,
            torch.full((n,), value, dtype=torch.float32),
            torch.full((n,), randint(gen, -50, 50)),
            f"全等奖励组（{n} 个 float32 的 {value:g}）的优势应严格为 0",
        )
    )
    base, delta = uniform(gen, -1, 1), uniform(gen, 1e-9, 4e-8)
    tiny = torch.tensor([base, base + delta], dtype=torch.float64)
    out.append(
        _advantage_case(vis, tiny, torch.tensor([randint(gen, -9, 9)] * 2), "近零方差组应除以下限 eps", eps=1e-6)
    )
    r2, ids2 = normal(gen, (3,)), torch.tensor([0, 0, 1])
    for args, what in [
        ((r2.view(1, 3), ids2.view(1, 3)), "rewards 不是一维"),
        ((r2, torch.tensor([0, 0, 1, 1])), "group_ids 与 rewards 形状不同"),
        ((torch.zeros(0), torch.zeros(0, dtype=torch.long)), "rewards 为空"),
        ((torch.tensor([float(r2[0]), float("nan"), 1.0]), ids2), "rewards 含 NaN"),
        ((r2, ids2.double()), "group_ids 不是整数"),
    ]:
        out.append(Case(vis, "compute_group_advantages", args, {}, Raises("ValueError"), what=what))
    out.append(Case(vis, "compute_group_advantages", (r2, ids2), {"eps": 0.0}, Raises("ValueError"), what="eps = 0"))

    # --- hidden: random sizes, both dtypes, int32 ids, eps as a floor, degenerate groups, more contracts
    for n, k in (
        (randint(gen, 3, 6), 2),
        (randint(gen, 15, 30), randint(gen, 3, 7)),
        (randint(gen, 60, 120), randint(gen, 8, 20)),
        (randint(gen, 200, 300), randint(gen, 30, 60)),
    ):
        for dtype in (torch.float32, torch.float64):
            ids = group_ids(gen, n, k)
            if dtype == torch.float32 and n > 100:
                ids = ids.to(torch.int32)
            scale, shift = uniform(gen, 0.5, 3.0), uniform(gen, -5, 5)
            rewards = conditioned(lambda: normal(gen, (n,), scale, shift, dtype), ids)
            out.append(_advantage_case(hid, rewards, ids, f"随机输入（N={n}, K={k}, {dtype}）的组内优势"))
    spread = [uniform(gen, 0.0, 0.1), uniform(gen, 1.5, 3.0)]
    rewards = torch.tensor([0.0, spread[0], 5.0, 5.0 + spread[1], -1.0, 0.5, 3.0], dtype=torch.float64)
    ids = torch.tensor([3, 3, -8, -8, 11, 11, 11]) * randint(gen, 1, 9)
    out.append(_advantage_case(hid, rewards, ids, "eps=0.5：std ≥ eps 的组精确标准化，std < eps 的组除以 eps", eps=0.5))
    for dtype in (torch.float32, torch.float64):
        values = [uniform(gen, -3, 3) for _ in range(3)]
        sizes = [randint(gen, 3, 10) for _ in range(3)]
        rewards = torch.tensor(sum(([v] * s for v, s in zip(values, sizes)), []) + [uniform(gen, -9, 9)], dtype=dtype)
        labels = distinct_ids(gen, 4)
        ids = torch.cat([labels[i].repeat(s) for i, s in enumerate(sizes)] + [labels[3:4]])
        perm = torch.randperm(len(ids), generator=gen)
        out.append(_zero_case(hid, rewards[perm], ids[perm], f"全等奖励组与单元素组（{dtype}）的优势应严格为 0"))
    r3, ids3 = normal(gen, (3,)), torch.tensor([-1, -1, 3])
    for bad_eps in (-uniform(gen, 1e-4, 1.0), float("nan"), float("inf")):
        out.append(
            Case(
                hid,
                "compute_group_advantages",
                (r3, ids3),
                {"eps": bad_eps},
                Raises("ValueError"),
                what=f"eps = {bad_eps}",
            )
        )
    for bad in (float("inf"), float("-inf")):
        out.append(
            Case(
                hid,
                "compute_group_advantages",
                (torch.tensor([1.0, bad, float(r3[2])]), ids3),
                {},
                Raises("ValueError"),
                what=f"rewards 含 {bad}",
            )
        )
    out.append(
        Case(
            hid,
            "compute_group_advantages",
            (torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.long)),
            {},
            Raises("ValueError"),
            what="二维 rewards",
        )
    )
    for dtype in (torch.long, torch.bool):
        out.append(
            Case(
                hid,
                "compute_group_advantages",
                (torch.tensor([1, 0, 1]).to(dtype), ids3),  # no draw: later cases keep theirs
                {},
                Raises("ValueError"),
                what=f"rewards 不是浮点张量（{dtype}）",
            )
        )

    # --- group_relative_advantages (MiniMind layout: rows of G consecutive rewards, std + eps)
    vis, hid = "test_group_relative_advantages_visible", "test_group_relative_advantages_hidden"

    def minimind_case(test, rewards, g, what, eps=None):
        kwargs = {} if eps is None else {"eps": eps}
        want = minimind_advantages(rewards, g, 1e-4 if eps is None else eps)
        return Case(
            test,
            "group_relative_advantages",
            (rewards, g),
            kwargs,
            Close(want, atol=_tol(rewards.dtype), rtol=_tol(rewards.dtype), dtype=rewards.dtype),
            what=what,
        )

    b, g = randint(gen, 2, 4), randint(gen, 3, 5)
    out.append(minimind_case(vis, normal(gen, (b * g,), 2.0), g, f"平铺布局 [B*G]（B={b}, G={g}）的优势"))
    out.append(minimind_case(vis, normal(gen, (randint(gen, 2, 5),)), 1, "G=1 时优势应为 0"))
    out.append(
        Case(
            vis,
            "group_relative_advantages",
            (normal(gen, (6,)), 0),
            {},
            Raises("ValueError"),
            what="num_generations = 0",
        )
    )
    out.append(
        Case(
            vis,
            "group_relative_advantages",
            (normal(gen, (6,)), 4),
            {},
            Raises("ValueError"),
            what="长度不是 num_generations 的整数倍",
        )
    )
    for b, g in (
        (1, 2),
        (randint(gen, 2, 4), randint(gen, 3, 5)),
        (randint(gen, 4, 7), randint(gen, 6, 9)),
        (randint(gen, 12, 20), 8),
    ):
        for dtype in (torch.float32, torch.float64):
            scale, shift = uniform(gen, 0.5, 3), uniform(gen, -2, 2)
            rows = torch.arange(b * g) // g
            rewards = conditioned(lambda: normal(gen, (b * g,), scale, shift, dtype), rows)
            out.append(minimind_case(hid, rewards, g, f"随机平铺输入（B={b}, G={g}, {dtype}）"))
            out.append(minimind_case(hid, rewards, g, f"eps=0.5（B={b}, G={g}）：应为 std + eps", eps=0.5))
    rows = torch.tensor([0.5] * 3 + [2.0] * 3 + [uniform(gen, -1, 1), 0.0, 1.0])
    out.append(minimind_case(hid, rows, 3, "全等奖励的行"))
    seq = torch.tensor([0.0, 1.0, 2.0, 3.0, 10.0, 20.0], dtype=torch.float64) * uniform(gen, 0.5, 2.0)
    out.append(minimind_case(hid, seq, 2, "按行（连续的 G 个）分组，而不是按列"))
    for args, what in [
        ((torch.ones(6), -randint(gen, 1, 5)), "num_generations 为负"),
        ((torch.ones(7), 2), "长度 7 不是 2 的整数倍"),
        ((torch.ones(10), 4), "长度 10 不是 4 的整数倍"),
        ((torch.ones(6), 2.0), "num_generations 不是整数"),
        ((torch.ones(6), True), "num_generations 是 bool"),
    ]:
        out.append(Case(hid, "group_relative_advantages", args, {}, Raises("ValueError"), what=what))

    # --- the conventions question: the learner's function, on the lesson's group and on groups drawn here
    def conventions_case(test, check, group, other, what):
        group, other = torch.tensor(group, dtype=torch.float64), torch.tensor(other, dtype=torch.float64)
        return Case(
            test, "answer_conventions", (group, other), {}, Satisfies(check(group.tolist(), other.tolist())), what=what
        )

    means = {Fraction(1, 4)}  # the lesson's own group; the drawn ones differ from it and from each other
    while len(means) < 3:  # so no one constant answer (a memorised table) fits two groups
        size = randint(gen, 3, 8)
        correct = randint(gen, 1, size - 1)
        if Fraction(correct, size) in means:
            continue
        means.add(Fraction(correct, size))
        group = [1.0] * correct + [0.0] * (size - correct)
        group = [group[i] for i in torch.randperm(size, generator=gen).tolist()]
        other = (torch.rand(size, generator=gen) < uniform(gen, 0.0, 1.0)).double().tolist()
        out.append(
            conventions_case(
                "test_conventions_question_visible",
                _conventions_format,
                group,
                other,
                f"计分问题的答案格式（G={size}，{correct} 个答对）",
            )
        )
        out.append(
            conventions_case(
                "test_conventions_question_hidden",
                _conventions_values,
                group,
                other,
                f"七种约定对一组 0/1 奖励（G={size}，{correct} 个答对）的优势",
            )
        )
    out.append(
        conventions_case(
            "test_conventions_question_hidden",
            _conventions_values,
            [0.0, 0.0, 0.0, 1.0],
            [1.0, 1.0, 1.0, 1.0],
            "七种约定对 [0, 0, 0, 1] 的优势",
        )
    )
    for case in out:  # as in the notebook, only the hidden tests check that inputs are left alone
        case.inputs_unchanged = case.test.endswith("_hidden")
    return out


CONVENTION_NAMES = ("course", "minimind", "trl_group", "trl_batch", "trl_none", "cs336", "dr_grpo")


def _pairs(answers) -> dict:
    if not isinstance(answers, dict):
        raise Mismatch(f"应返回 dict，实际 {type(answers).__name__}")
    missing = sorted(set(CONVENTION_NAMES) - set(answers))
    extra = sorted(set(answers) - set(CONVENTION_NAMES))
    if missing or extra:
        raise Mismatch(f"键应恰为 {sorted(CONVENTION_NAMES)}；缺少 {missing}，多出 {extra}")
    out = {}
    for name, pair in answers.items():
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise Mismatch(f"{name} 的值应是二元组 (答错的优势, 答对的优势)，实际 {pair!r}"[:200])
        values = []
        for x in pair:
            if torch.is_tensor(x) and x.numel() == 1 and x.dtype.is_floating_point:
                x = float(x.reshape(-1)[0])
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise Mismatch(f"{name} 的值应是两个有限的数，实际 {pair!r}"[:200])
            values.append(float(x))
        out[name] = tuple(values)
    return out


def conventions_reference(group: list[float], other: list[float]) -> dict[str, tuple[float, float]]:
    """{convention: (advantage of a wrong answer, of a correct one)} for the 0/1 rewards ``group``, with ``other``
    as the rest of the batch for trl_batch (float64 sums)."""
    size = len(group)
    mean = math.fsum(group) / size
    squares = math.fsum((v - mean) ** 2 for v in group)
    population, sample = math.sqrt(squares / size), math.sqrt(squares / (size - 1))
    batch = list(group) + list(other)
    batch_mean = math.fsum(batch) / len(batch)
    batch_std = math.sqrt(math.fsum((v - batch_mean) ** 2 for v in batch) / (len(batch) - 1))
    scales = {
        "course": max(population, 1e-6),
        "minimind": population + 1e-4,
        "trl_group": sample + 1e-4,
        "trl_batch": batch_std + 1e-4,
        "trl_none": 1.0,
        "cs336": sample + 1e-6,
        "dr_grpo": 1.0,
    }
    return {name: ((0.0 - mean) / scale, (1.0 - mean) / scale) for name, scale in scales.items()}


def _conventions_format(group: list[float], other: list[float]):
    """The visible test's checks on a drawn group: every convention's advantages sum to 0 over the group, correct
    answers above the mean, wrong ones below, and the one known entry (Dr. GRPO only subtracts the mean)."""
    correct = sum(1 for v in group if v == 1.0)
    wrong_count = len(group) - correct
    known = conventions_reference(group, other)["dr_grpo"]

    def check(answers) -> str | None:
        for name, (wrong, right) in _pairs(answers).items():
            if not close_number(wrong_count * wrong + correct * right, 0.0, 1e-4):
                return (
                    f"{name}：{wrong_count} 个答错与 {correct} 个答对的优势之和应为 0，"
                    f"实际 {wrong_count}×{wrong:.6g} + {correct}×{right:.6g}"
                )
            if not right > 0 > wrong:
                return f"{name}：答对的优势应为正、答错的应为负，实际 ({wrong:.6g}, {right:.6g})"
        got = _pairs(answers)["dr_grpo"]
        if not all(close_number(g, w, 1e-5) for g, w in zip(got, known)):
            return f"已知条目 dr_grpo：期望 ({known[0]:.6f}, {known[1]:.6f})，实际 ({got[0]:.6f}, {got[1]:.6f})"
        return None

    return check


def _conventions_values(group: list[float], other: list[float]):
    expected = conventions_reference(group, other)

    def check(answers) -> str | None:
        for name, (wrong, right) in _pairs(answers).items():
            want = expected[name]
            if not (close_number(wrong, want[0], 1e-5) and close_number(right, want[1], 1e-5)):
                return f"约定 {name}：期望 ({want[0]:.6f}, {want[1]:.6f})，实际 ({wrong:.6f}, {right:.6f})"
        return None

    return check


__all__ = ["TESTS", "FLAGS", "cases", "course_advantages", "minimind_advantages", "Each"]
