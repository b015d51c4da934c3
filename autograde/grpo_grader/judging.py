"""The verdicts: what the driver sent back parsed as data (``parse_results``; ``read_results`` for a results file),
each case judged against the expectations that never left the grader (``judge``), one verdict per test cell
(``verdicts``: it passes iff every case mapped to it passes)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .transport import MAX_LINE_BYTES, MAX_RESULTS_BYTES
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


def read_results(path: Path) -> tuple[dict[str, dict], dict[str, dict], str]:
    """``parse_results`` of a results file written by a driver run outside the pipeline (the pipeline's driver sends
    its results over a pipe). Opened without following a symlink, without blocking on a FIFO, as a regular file
    only, and read up to ``MAX_RESULTS_BYTES``: whatever the file is, the answer is a problem, never an exception."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        return {}, {}, f"评测进程没有写出可读的结果（no results: {type(error).__name__}）"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {}, {}, "评测结果不是普通文件，未读取（results not a regular file）"
        data = bytearray()
        while len(data) < MAX_RESULTS_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_RESULTS_BYTES - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError as error:
        return {}, {}, f"评测结果无法读取（unreadable results: {type(error).__name__}）"
    finally:
        os.close(fd)
    return parse_results(bytes(data), max(0, info.st_size - len(data)))


def judge(case: Case, record: dict | None, not_run: str) -> tuple[bool, str]:
    """(passed, Chinese message) for one case and its result record."""
    what = f"{case.what}：" if case.what else ""
    if record is None:
        return False, f"{what}未运行（{not_run}）"
    status = record.get("status")
    if status == "raised" and record.get("type") == "NotImplementedError":  # an untouched TODO
        return False, f"NotImplementedError: {str(record.get('message', ''))[:160]}"
    if status == "missing":
        return (
            False,
            f"{what}找不到函数 {case.call}（答案单元没有定义它，或定义时出错：{str(record.get('message', ''))[:160]}）",
        )
    if isinstance(case.expect, Raises):
        mro = record.get("mro") if isinstance(record.get("mro"), list) else []
        if status == "raised" and case.expect.exception in mro:
            return True, ""
        got = (
            f"抛出了 {record.get('type')}: {str(record.get('message', ''))[:160]}"
            if status == "raised"
            else "没有抛出异常"
        )
        return False, f"{what}违反输入契约时应抛出 {case.expect.exception}，实际{got}"
    if status == "raised":
        return False, f"{what}{record.get('type')}: {str(record.get('message', ''))[:200]}"
    if status != "returned":
        return False, f"{what}评测结果格式不对（bad record）"
    try:
        value = decode(record.get("value"))
        case.expect.check(value)
        if case.grads:
            grads = record.get("grads") if isinstance(record.get("grads"), dict) else {}
            if record.get("grad_error"):
                raise Mismatch(f"无法反向传播：{str(record['grad_error'])[:200]}")
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
        mutated = record.get("mutated") if isinstance(record.get("mutated"), list) else []
        if case.inputs_unchanged and mutated:
            raise Mismatch(f"函数原地修改了输入（第 {', '.join(map(str, mutated))} 个参数），输入不应被修改")
    except Mismatch as error:
        return False, f"{what}{error}"
    except Malformed as error:
        return False, f"{what}返回值无法读取：{error}"
    except Exception as error:  # a check that cannot even compare what came back: the learner's fault
        return False, f"{what}返回值无法比较（{type(error).__name__}: {str(error)[:160]}）"
    return True, ""


@dataclass
class TestVerdict:
    grade_id: str
    passed: bool
    message: str
    cases: int
    failed: int


def verdicts(oracle: Oracle, cases: list[Case], results: dict[str, dict], not_run: str) -> dict[str, TestVerdict]:
    """One verdict per test cell of the oracle: passed iff every case mapped to it passed."""
    out: dict[str, TestVerdict] = {}
    by_test: dict[str, list[Case]] = {gid: [] for gid in oracle.tests}
    for case in cases:
        by_test[case.test].append(case)
    for gid, group in by_test.items():
        failures = []
        for case in group:
            ok, message = judge(case, results.get(case.id), not_run)
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
