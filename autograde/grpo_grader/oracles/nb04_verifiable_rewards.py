"""Oracle of lesson 4 (nb04_verifiable_rewards): the integer verifier, the reward table, the weighted sum.

References are the grader's own: an integer scanner without regular expressions, plain float64 sums.
Each test cell of this lesson holds a visible and a hidden part; its cases cover both.
"""

from __future__ import annotations

import math

import torch

from tools.experiment_settings import VERIFIER_ID

from ..vocabulary import Case, Close, Mismatch, Raises, Satisfies
from ._common import choice, normal, randint, uniform

TESTS = {
    "test_verify_integer_response_visible": "verify_integer_response",
    "test_rewards_per_func_from_lists_visible": "rewards_per_func_from_lists",
    "test_combine_rewards_visible": "combine_rewards",
}
# where each case family comes from: (regex over a case's ``what``, the line of the released notebook - TODO
# text, docstring, provided check or visible test - that states it); a case no family matches is an orphan
CASE_SOURCES = [
    (r"^回答 ", "integer-answer-v1 的解析（最后一个整数）、状态、正确性、格式分与加权总分"),
    (r"^response=", "`response` 必须是 `str`"),
    (r"^expected_answer=", "`expected_answer` 必须是 `int`"),
    (r"^(correctness|format)_weight=", "两个权重必须是有限、非负的实数（同样拒绝 `bool`）"),
    (r"的 rewards_per_func（None -> NaN）$", "`None` 的位置是 `NaN`"),
    (r"^outputs=|^dtype 为整数类型$", "输入契约（`ValueError`）：`outputs` 为空、不是列表/元组"),
    (r"的加权奖励（跳过 NaN 列，全 NaN 行保持 NaN）$", "加权和跳过 NaN 列、全 NaN 行保持 NaN"),
    (r"^rewards_per_func 不合法$", "`rewards_per_func` 不是浮点张量或不是二维"),
    (r"^weights=", "权重个数与 `F` 不一致、不是一维、含有 NaN/inf"),
]
FLAGS: dict = {}
KEYS = {"verifier_id", "status", "parsed_answer", "correctness", "format_pass", "total_reward"}
DIGITS = "0123456789"


def scan_integers(text: str) -> list[str]:
    """Non-overlapping ``-?[0-9]+`` pieces, left to right."""
    pieces, i = [], 0
    while i < len(text):
        if text[i] == "-" and i + 1 < len(text) and text[i + 1] in DIGITS:
            j = i + 1
        elif text[i] in DIGITS:
            j = i
        else:
            i += 1
            continue
        k = j
        while k < len(text) and text[k] in DIGITS:
            k += 1
        pieces.append(text[i:k])
        i = k
    return pieces


def verify_reference(response: str, expected: int, cw: float = 1.0, fw: float = 0.1) -> dict:
    stripped = response.strip()
    pieces = scan_integers(stripped)
    parsed = int(pieces[-1]) if pieces else None
    correct = 1.0 if parsed is not None and parsed == expected else 0.0
    body = stripped[1:] if stripped.startswith("-") else stripped
    fmt = 1.0 if body and all(ch in DIGITS for ch in body) else 0.0
    return {
        "verifier_id": VERIFIER_ID,
        "status": "ok" if parsed is not None else "unjudgeable",
        "parsed_answer": parsed,
        "correctness": correct,
        "format_pass": fmt,
        "total_reward": cw * correct + fw * fmt,
    }


def _record_check(text: str, want: dict):
    def check(got):
        if not isinstance(got, dict):
            return f"回答 {text!r}：应返回 dict，实际 {type(got).__name__}"
        if set(got) != KEYS:
            return f"返回的键应为 {sorted(KEYS)}，实际 {sorted(got)}"
        for key in ("verifier_id", "status"):
            if got[key] != want[key]:
                return f"回答 {text!r}：{key} 期望 {want[key]!r}，实际 {got[key]!r}"
        parsed = got["parsed_answer"]
        if want["parsed_answer"] is None:
            if parsed is not None:
                return f"回答 {text!r}：parsed_answer 应为 None，实际 {parsed!r}"
        elif type(parsed) is not int or parsed != want["parsed_answer"]:
            return f"回答 {text!r}：parsed_answer 期望 {want['parsed_answer']}（最后一个整数），实际 {parsed!r}"
        for key in ("correctness", "format_pass", "total_reward"):
            value = got[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value - want[key]) <= 1e-9:
                return f"回答 {text!r}：{key} 期望 {want[key]:g}，实际 {value!r}"
        return None

    return check


WORDS = ["the", "answer", "is", "so", "=", "+", "x", ".", ",", "step", "final:", "not", "-", "--", "e", "Answer"]


def _text(gen, expected: int) -> str:
    kind = randint(gen, 0, 5)
    if kind == 0:
        value = expected if randint(gen, 0, 1) else randint(gen, -60, 60)
        return choice(gen, ["", " ", "\n", "\t "]) + str(value) + choice(gen, ["", " ", "\n", " \t"])
    if kind == 1:
        numbers = [randint(gen, -60, 60) for _ in range(randint(gen, 2, 5))]
        numbers[-1 if randint(gen, 0, 1) else 0] = expected
        return " ".join(f"{choice(gen, WORDS)} {n}" for n in numbers)
    if kind == 2:
        return " ".join(choice(gen, WORDS) for _ in range(randint(gen, 0, 6)))
    if kind == 3:
        return choice(gen, ["--", "+", "", "0", "00", "a-"]) + str(abs(expected)) + choice(gen, ["", "-3", ".0", "x"])
    if kind == 4:
        return f"{expected} or maybe {expected + choice(gen, [-2, -1, 1, 2])}"
    tokens = [
        choice(gen, WORDS) if uniform(gen, 0, 1) < 0.6 else str(randint(gen, -99, 99))
        for _ in range(randint(gen, 1, 8))
    ]
    return choice(gen, ["", " "]).join(tokens)


def _table_reference(outputs, dtype) -> torch.Tensor:
    n, f = len(outputs[0]), len(outputs)
    rows = [[math.nan if outputs[j][i] is None else float(outputs[j][i]) for j in range(f)] for i in range(n)]
    return torch.tensor(rows, dtype=torch.float64).to(dtype)


def _combine_reference(table: torch.Tensor, weights) -> torch.Tensor:
    values = table.to(torch.float64).tolist()
    w = [float(x) for x in (weights.tolist() if torch.is_tensor(weights) else weights)]
    out = []
    for row in values:
        terms = [w[j] * v for j, v in enumerate(row) if not math.isnan(v)]
        out.append(math.fsum(terms) if terms else math.nan)
    return torch.tensor(out, dtype=torch.float64)


def cases(gen: torch.Generator, flags: dict) -> list[Case]:
    out: list[Case] = []
    test = "test_verify_integer_response_visible"
    fixed = [
        (str(e := randint(gen, 1, 99)), e, None),
        (f"  The answer is {e}.  ", e, None),
        (f"{e} + {e} = {2 * e + 1}", 2 * e, None),
        ("I do not know.", e, None),
        (f"\n-{e}\t", -e, (round(uniform(gen, 0.5, 3), 3), round(uniform(gen, 0.1, 1), 3))),
    ]
    for _ in range(60):
        expected = randint(gen, -60, 60)
        weights = (
            choice(gen, [1.0, 0.5, 2.0, 0.0, round(uniform(gen, 0, 3), 3)]),
            choice(gen, [0.1, 0.0, 1.0, round(uniform(gen, 0, 1), 3)]),
        )
        fixed.append((_text(gen, expected), expected, weights))
    for text, expected, weights in fixed:
        kwargs = {} if weights is None else {"correctness_weight": weights[0], "format_weight": weights[1]}
        want = verify_reference(text, expected, *(weights or (1.0, 0.1)))
        out.append(
            Case(
                test,
                "verify_integer_response",
                (text, expected),
                kwargs,
                Satisfies(_record_check(text, want)),
                what=f"回答 {text!r}",
            )
        )
    for bad in [None, 4, 4.0, ["4"]]:
        out.append(Case(test, "verify_integer_response", (bad, 4), {}, Raises("ValueError"), what=f"response={bad!r}"))
    for bad in [4.0, "4", None, False, True, 4.5]:
        out.append(
            Case(test, "verify_integer_response", ("4", bad), {}, Raises("ValueError"), what=f"expected_answer={bad!r}")
        )
    for bad in [-uniform(gen, 0.1, 2), float("inf"), float("-inf"), float("nan"), "1", None, True]:
        for name in ("correctness_weight", "format_weight"):
            out.append(
                Case(
                    test, "verify_integer_response", ("4", 4), {name: bad}, Raises("ValueError"), what=f"{name}={bad!r}"
                )
            )

    test = "test_rewards_per_func_from_lists_visible"
    for trial in range(16):
        n, f = randint(gen, 1, 9), randint(gen, 1, 4)
        dtype = choice(gen, [torch.float32, torch.float64])
        outputs = [
            [
                None
                if uniform(gen, 0, 1) < 0.3
                else (round(uniform(gen, -3, 3), 6) if randint(gen, 0, 1) else randint(gen, -2, 2))
                for _ in range(n)
            ]
            for _ in range(f)
        ]
        if trial % 2:
            outputs = tuple(tuple(column) for column in outputs)
        tol = 1e-6 if dtype == torch.float32 else 1e-12
        kwargs = {} if (dtype == torch.float32 and trial % 3 == 0) else {"dtype": dtype}
        out.append(
            Case(
                test,
                "rewards_per_func_from_lists",
                (outputs,),
                kwargs,
                Close(_table_reference(outputs, dtype), atol=tol, rtol=tol, dtype=dtype),
                what=f"N={n}, F={f}, {dtype} 的 rewards_per_func（None -> NaN）",
            )
        )
    for bad in [
        [],
        (),
        None,
        [1.0, 2.0],
        [[]],
        [[1.0], [None, 2.0]],
        [[True, 1.0]],
        [[1.0, float("inf")]],
        [[1.0, float("-inf")]],
        [[None, "0.5"]],
        [[1.0], None],
        [[1.0, float("nan")]],
    ]:
        out.append(Case(test, "rewards_per_func_from_lists", (bad,), {}, Raises("ValueError"), what=f"outputs={bad!r}"))
    out.append(
        Case(
            test,
            "rewards_per_func_from_lists",
            ([[1.0]],),
            {"dtype": torch.int64},
            Raises("ValueError"),
            what="dtype 为整数类型",
        )
    )

    test = "test_combine_rewards_visible"
    for n, f in [
        (1, 1),
        (randint(gen, 3, 6), 1),
        (randint(gen, 4, 8), 3),
        (randint(gen, 12, 20), 4),
        (randint(gen, 25, 40), 2),
    ]:
        for dtype in (torch.float32, torch.float64):
            values = normal(gen, (n, f), 2.0)
            holes = torch.rand(n, f, generator=gen) < 0.35
            holes[0] = True
            if n > 1:
                holes[1] = False
            values[holes] = math.nan
            table = values.to(dtype)
            weights = [round(x, 6) for x in (normal(gen, (f,), 1.5)).tolist()]
            arg = torch.tensor(weights, dtype=torch.float64) if f % 2 == 0 else weights
            tol = 1e-5 if dtype == torch.float32 else 1e-10
            out.append(
                Case(
                    test,
                    "combine_rewards",
                    (table, arg),
                    {},
                    Close(_combine_reference(table, weights).to(dtype), atol=tol, rtol=tol, dtype=dtype),
                    what=f"N={n}, F={f}, {dtype} 的加权奖励（跳过 NaN 列，全 NaN 行保持 NaN）",
                )
            )
    table = torch.tensor([[1.0, math.nan], [math.nan, math.nan]])
    for bad in [[1.0], [1.0, 2.0, 3.0], [[1.0, 2.0]], [1.0, math.nan], [math.inf, 1.0]]:
        out.append(Case(test, "combine_rewards", (table, bad), {}, Raises("ValueError"), what=f"weights={bad!r}"))
    for bad in [
        [[1.0, 2.0]],
        torch.ones(3),
        torch.ones(2, 0),
        torch.ones(2, 2, 2),
        torch.tensor([[1.0, math.inf]]),
        torch.ones(2, 2, dtype=torch.int32),
    ]:
        out.append(
            Case(test, "combine_rewards", (bad, [1.0, 1.0]), {}, Raises("ValueError"), what="rewards_per_func 不合法")
        )
    return out


__all__ = ["TESTS", "FLAGS", "cases", "verify_reference", "Mismatch"]
