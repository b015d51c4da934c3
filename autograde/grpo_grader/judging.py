"""The verdicts: what the learner side sent back parsed as data (``parse_results``), each case judged against the expectations and the copy of its inputs that never left the grader (``judge``),
one verdict per test cell (``verdicts``: it passes iff every case mapped to it passes). Every decision is made here,
from data: whether the call wrote into its inputs, whether an exception was a ``ValueError`` (the interpreter's own
class, by the (module, qualname) pairs the runner read with captured descriptors); no flag or name the learner's
process computed decides anything. Text the learner controls reaches a message only as ``outcomes.learner_words``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .outcomes import STUB_MESSAGE, learner_words
from .transport import MAX_LINE_BYTES
from .vocabulary import Case, Mismatch, NoGrad, Raises
from .wire import Malformed, decode

if TYPE_CHECKING:
    from .oracle import Oracle


def parse_results(data: bytes, dropped: int = 0) -> tuple[dict[str, dict], dict[str, dict], str]:
    """(case results by id, setup-cell results by cell id, a problem) from what the driver sent (JSON lines; the
    learner controls every byte: a line too long, malformed or of the wrong shape is skipped with a reason, never an
    exception). ``dropped``: bytes the grader did not keep (beyond ``MAX_RESULTS_BYTES``)."""
    cases, cells, problems = {}, {}, []
    if dropped:
        problems.append(f"评测结果过多，超出的 {dropped / 2**20:.1f} MB 未读取（results too large）")
    lines = data.split(b"\n")
    if lines and lines[-1]:
        problems.append("评测结果的最后一行不完整（truncated results）")
    for raw in lines[:-1]:
        if len(raw) > MAX_LINE_BYTES:
            problems.append(f"评测结果中有一行过长（{len(raw) / 2**20:.1f} MB），未读取（oversized line）")
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            problems.append("评测结果中有无法解析的行（ignored a malformed line）")
            continue
        if not isinstance(record, dict):
            continue
        if isinstance(record.get("case"), str):
            cases.setdefault(record["case"], record)  # the first line for a case counts
        elif isinstance(record.get("cell"), str):
            cells.setdefault(record["cell"], record)
    return cases, cells, "；".join(dict.fromkeys(problems))


def raised_classes(record: dict) -> list[tuple[str, str]]:
    """The (module, qualname) pairs of what a case raised, as sent (malformed entries left out)."""
    mro = record.get("mro")
    return [
        (p[0], p[1])
        for p in (mro if isinstance(mro, list) else [])
        if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
    ]


def raised_name(record: dict) -> str:
    """The raised class as a message names it: an interpreter class by its name, any other as the learner's words."""
    classes = raised_classes(record)
    if not classes:
        return "异常（exception）"
    module, qualname = classes[0]
    return qualname if module == "builtins" else learner_words(f"{module}.{qualname}", 100)


def written_inputs(case: Case, record: dict) -> list[str]:
    """The tensor inputs of ``case`` that its call wrote into: each one the learner side sent back after the call
    (``record["inputs"]``) compared with the grader's own copy - same dtype, shape and values, NaN where NaN. An
    input that was not sent back counts as written."""
    inputs = record.get("inputs") if isinstance(record.get("inputs"), dict) else {}
    sent = {kind: inputs.get(kind) if isinstance(inputs.get(kind), dict) else {} for kind in ("args", "kwargs")}
    mine = [("args", str(i), a) for i, a in enumerate(case.args)] + [("kwargs", k, v) for k, v in case.kwargs.items()]
    written = []
    for kind, key, before in mine:
        if not torch.is_tensor(before):
            continue
        try:
            after = decode(sent[kind].get(key))
        except Malformed:
            after = None
        if not (
            torch.is_tensor(after)
            and after.dtype == before.dtype
            and after.shape == before.shape
            and torch.equal(
                after.isnan() if after.is_floating_point() else after,
                before.isnan() if before.is_floating_point() else before,
            )
            and (not before.is_floating_point() or torch.equal(after.nan_to_num(0.0), before.nan_to_num(0.0)))
        ):
            written.append(f"第 {key} 个参数" if kind == "args" else f"参数 {key}")
    return written


def judge(case: Case, record: dict | None, not_run: str, answer_error: str = "") -> tuple[bool, str]:
    """(passed, Chinese message) for one case and its result record. ``answer_error``: why the answer cell that
    should define the function failed, as the executed notebook says (the learner's words already quoted)."""
    what = f"{case.what}：" if case.what else ""
    if record is None:
        return False, f"{what}未运行（{not_run}）"
    status = record.get("status")
    classes = raised_classes(record)
    message = str(record.get("message", ""))
    if status == "raised" and ("builtins", "NotImplementedError") in classes:  # an untouched TODO
        said = STUB_MESSAGE if message == STUB_MESSAGE else learner_words(message, 160)
        return False, f"NotImplementedError: {said}"
    if status == "missing":
        why = f"，或定义时出错：{answer_error}" if answer_error else "，或定义时出错"
        return False, f"{what}找不到函数 {case.call}（答案单元没有定义它{why}）"
    if isinstance(case.expect, Raises):
        if status == "raised" and ("builtins", case.expect.exception) in classes:
            return True, ""
        got = f"抛出了 {raised_name(record)}: {learner_words(message, 160)}" if status == "raised" else "没有抛出异常"
        return False, f"{what}违反输入契约时应抛出 {case.expect.exception}，实际{got}"
    if status == "raised":
        return False, f"{what}{raised_name(record)}: {learner_words(message)}"
    if status != "returned":
        return False, f"{what}评测结果格式不对（bad record）"
    try:
        value = decode(record.get("value"))
        case.expect.check(value)
        if case.grads:
            grads = record.get("grads") if isinstance(record.get("grads"), dict) else {}
            if record.get("grad_error"):
                raise Mismatch(f"无法反向传播：{learner_words(record['grad_error'])}")
            for index, check in case.grads.items():
                grad = grads.get(str(index))
                if isinstance(check, NoGrad):
                    check.check(grad)
                    continue
                if grad is None:
                    raise Mismatch(f"第 {index} 个参数没有得到梯度（结果必须能反向传播到输入）")
                try:
                    check.check(decode(grad))
                except Mismatch as error:
                    raise Mismatch(f"对第 {index} 个参数的梯度：{error}") from None
        written = written_inputs(case, record) if case.inputs_unchanged else []
        if written:
            raise Mismatch(f"函数原地修改了输入（{'、'.join(written)}），输入不应被修改")
    except Mismatch as error:
        return False, f"{what}{error}"
    except Malformed as error:
        return False, f"{what}返回值无法读取：{error}"
    except Exception as error:  # a check that cannot even compare what came back: the learner's fault
        return False, f"{what}返回值无法比较（{type(error).__name__}）"
    return True, ""


@dataclass
class TestVerdict:
    grade_id: str
    passed: bool
    message: str
    cases: int
    failed: int


def verdicts(
    oracle: Oracle,
    cases: list[Case],
    results: dict[str, dict],
    not_run: str,
    answer_errors: dict[str, str] | None = None,
) -> dict[str, TestVerdict]:
    """One verdict per test cell of the oracle: passed iff every case mapped to it passed. ``answer_errors``: {answer
    cell grade_id: why it failed} (quoted), to explain a function that is missing."""
    out: dict[str, TestVerdict] = {}
    by_test: dict[str, list[Case]] = {gid: [] for gid in oracle.tests}
    for case in cases:
        by_test[case.test].append(case)
    for gid, group in by_test.items():
        failures = []
        for case in group:
            answer_error = (answer_errors or {}).get(oracle.tests.get(case.test, ""), "")
            ok, message = judge(case, results.get(case.id), not_run, answer_error)
            if not ok:
                failures.append(message)
        if not group:
            failures.append("这个测试没有评测用例（no cases）")
        message = (
            ""
            if not failures
            else (
                failures[0]
                + (f"（另有 {len(failures) - 1} 个用例未通过，共 {len(group)} 个）" if len(failures) > 1 else "")
            )
        )
        out[gid] = TestVerdict(gid, not failures, message, len(group), len(failures))
    return out
