"""The trusted side of grading: cases drawn from a secret seed, expected values, verdicts.

A lesson's oracle is a module ``autograde/grpo_grader/oracles/<assignment>.py`` (see "Writing an oracle for
a lesson" in autograde/README.md). In the pipeline it never enters a learner kernel: the grader process imports it,
asks it for cases, sends only the cases' *inputs* (plain JSON) to a sandboxed driver process that runs the learner's
notebook as written (``driver.py``), and compares what comes back (plain JSON, parsed without executing anything)
with the expectations that stayed here. Outside the pipeline, the lessons' hidden tests run the same cases in the
kernel (``oracles.run_in_kernel``, fresh draws): one specification per check.

The data format between the two sides (``job.json`` in, ``results.jsonl`` out):

- a tensor is ``{"__tensor__": "<dtype>", "shape": [...], "data": [flat list]}`` (dtypes: bool, uint8,
  int8/16/32/64, float16/bfloat16/float32/float64), a tuple ``{"__tuple__": [...]}``, a dict with string keys
  ``{"__dict__": [[key, value], ...]}``, a torch dtype (an argument only) ``{"__dtype__": "float32"}``; numbers, strings, booleans, None and lists are themselves;
  a NumPy scalar or 0-d array the learner returns arrives as the number its ``.item()`` gives; anything else
  arrives as ``{"__object__": "<type name>"}`` and fails every check;
- a case sent to the driver: ``{"id", "call", "after": its test cell, "args", "kwargs", "grad": [arg indices], "backward": {"output":
  index or null, "weights": tensor or null}}``;
- one result line per case: ``{"case": id, "status": "returned" | "raised" | "missing", "value", "grads":
  {index: tensor or null}, "mutated": [arg indices], "type": exception name, "mro": [...], "message"}``.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import importlib.util
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .digests import SEED_ENV, SEED_NAME, grading_seed, oracle_digest, seed_digest  # noqa: F401
from .driver import dtype_table
from .transport import MAX_LINE_BYTES, MAX_RESULTS_BYTES

MAX_DEPTH = 32  # nesting deeper than this in a returned value fails the case
DTYPES = dtype_table(torch)  # the driver's table: one list of the dtypes a value may travel as
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


# ----------------------------------------------------------------------------- the secret seed
def case_generator(seed: str, assignment: str, learner: str = "") -> torch.Generator:
    """The torch generator an oracle draws a learner's cases from: a key derived from the secret seed, the learner
    and the assignment (HMAC-SHA256), so that inputs leaking through one learner's feedback say nothing about
    another learner's, and nothing about the seed."""
    digest = hmac.new(seed.encode(), f"cases\0{learner}\0{assignment}".encode(), hashlib.sha256).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


# ----------------------------------------------------------------------------- inputs and expectations
def encode(value: Any) -> Any:
    """A trusted value (tensors, tuples, dicts, numbers, strings) in the plain data format."""
    if torch.is_tensor(value):
        value = value.detach().cpu()
        return {
            "__tensor__": DTYPE_NAMES[value.dtype],
            "shape": list(value.shape),
            "data": value.reshape(-1).tolist() if value.dtype != torch.bfloat16 else value.float().reshape(-1).tolist(),
        }
    if isinstance(value, torch.dtype):
        return {"__dtype__": DTYPE_NAMES[value]}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"__dict__": [[str(k), encode(v)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot send {type(value).__name__} to the driver")


class Malformed(Exception):
    """What came back is not in the plain data format (a wrong kind of object, or broken data)."""


def decode(value: Any, depth: int = 0) -> Any:
    """Plain data from the driver -> Python values and tensors, without executing anything."""
    if depth > MAX_DEPTH:
        raise Malformed("返回值嵌套过深（nested too deep）")
    if isinstance(value, dict):
        if "__tensor__" in value:
            dtype = DTYPES.get(value.get("__tensor__"))
            shape, data = value.get("shape"), value.get("data")
            if dtype is None or not isinstance(shape, list) or not isinstance(data, list):
                raise Malformed(f"张量数据格式不对（bad tensor: dtype {value.get('__tensor__')!r}）")
            if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape) or len(shape) > 8:
                raise Malformed(f"张量形状不对（bad shape {shape!r}）")
            if math.prod(shape) != len(data):
                raise Malformed(f"张量元素个数 {len(data)} 与形状 {shape} 不符（bad tensor data）")
            if not all(isinstance(x, (int, float)) for x in data):
                raise Malformed("张量数据只能是数（tensor data must be numbers）")
            try:
                flat = torch.tensor(data, dtype=torch.float64 if dtype == torch.bfloat16 else dtype)
            except (OverflowError, RuntimeError, TypeError, ValueError) as error:
                raise Malformed(f"张量数据无法读取：{error}") from None
            return flat.to(dtype).reshape(shape)
        if "__tuple__" in value:
            items = value["__tuple__"]
            if not isinstance(items, list):
                raise Malformed("tuple 数据格式不对")
            return tuple(decode(v, depth + 1) for v in items)
        if "__dict__" in value:
            items = value["__dict__"]
            if not isinstance(items, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in items
            ):
                raise Malformed("dict 数据格式不对")
            return {k: decode(v, depth + 1) for k, v in items}
        if "__set__" in value:
            items = value["__set__"]
            if not isinstance(items, list) or not all(
                isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in items
            ):
                raise Malformed("set 数据格式不对（只支持数和字符串）")
            return set(items)
        if "__object__" in value:
            return Foreign(str(value["__object__"])[:100])
        raise Malformed("未知的数据格式（unknown record）")
    if isinstance(value, list):
        return [decode(v, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise Malformed(f"未知的数据（{type(value).__name__}）")


@dataclass(frozen=True)
class Foreign:
    """An object the driver could not send as plain data (e.g. a tensor subclass); it fails every check."""

    type_name: str


class Mismatch(AssertionError):
    """A check failed; the message (Chinese) says expected vs got."""


def _kind(value: Any) -> str:
    """The type that arrived, as a message names it (tensors with dtype and shape)."""
    if isinstance(value, Foreign):
        return value.type_name
    if torch.is_tensor(value):
        return f"torch.Tensor[{DTYPE_NAMES.get(value.dtype)}]，形状 {tuple(value.shape)}"
    return type(value).__name__


# ----------------------------------------------------------------------------- comparisons that cannot be fooled
NUMBER_KINDS = "Python int/float、NumPy 标量或 0 维浮点张量"  # what ``Number`` accepts, as messages say it


def as_number(value: Any, tensor_ok: bool = True) -> float | int | None:
    """The number a learner returned where the lesson asks for one (Python int/float; a NumPy scalar arrives as
    one, the driver sends its ``.item()``; a 0-d floating tensor when ``tensor_ok``), else None (bool is not a
    number)."""
    if tensor_ok and torch.is_tensor(value) and value.dim() == 0 and value.dtype.is_floating_point:
        return float(value.item())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def close_number(got: float, want: float, atol: float = 0.0, rtol: float = 0.0) -> bool:
    """``got`` equals ``want`` within ``atol + rtol * |want|``; NaN only where NaN is expected, ±inf only where
    the same infinity is (``abs(got - want) > tol`` is False for NaN: never compare that way)."""
    got, want = float(got), float(want)
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= atol + rtol * abs(want)


def close_tensor(got: Any, want: torch.Tensor, atol: float = 0.0, rtol: float = 0.0) -> bool:
    """A tensor of ``want``'s shape whose every element is ``close_number`` to ``want``'s (any dtype)."""
    if not torch.is_tensor(got) or tuple(got.shape) != tuple(want.shape):
        return False
    g, e = got.detach().to(torch.float64).reshape(-1), want.detach().to(torch.float64).reshape(-1)
    nan_g, nan_e = torch.isnan(g), torch.isnan(e)
    finite = torch.isfinite(e) & torch.isfinite(g)
    ok = torch.where(nan_e | nan_g, nan_e & nan_g, torch.where(finite, (g - e).abs() <= atol + rtol * e.abs(), g == e))
    return bool(ok.all())


def _fmt(values: list, limit: int = 6) -> str:
    shown = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in values[:limit])
    return f"[{shown}{', …' if len(values) > limit else ''}]"


@dataclass
class Close:
    """The value is a ``torch.Tensor`` of ``dtype`` (default: the expected tensor's) and the expected shape,
    with values within ``atol + rtol * |expected|`` (NaN where NaN is expected; exact when both are 0)."""

    expected: torch.Tensor
    atol: float = 1e-9
    rtol: float = 0.0
    dtype: torch.dtype | None = None
    what: str = ""
    where: torch.Tensor | None = None  # compare only where this bool mask is true (same shape)

    def check(self, got: Any) -> None:
        want_dtype = self.dtype or self.expected.dtype
        label = f"{self.what}：" if self.what else ""
        if not torch.is_tensor(got):
            raise Mismatch(f"{label}应返回 torch.Tensor，实际返回 {_kind(got)}")
        if got.dtype != want_dtype:
            raise Mismatch(f"{label}dtype 应为 {want_dtype}，实际 {got.dtype}")
        if tuple(got.shape) != tuple(self.expected.shape):
            raise Mismatch(f"{label}形状应为 {tuple(self.expected.shape)}，实际 {tuple(got.shape)}")
        if want_dtype == torch.bool or not want_dtype.is_floating_point:
            if not torch.equal(got, self.expected.to(got.dtype)):
                bad = (got != self.expected.to(got.dtype)).reshape(-1).nonzero()[0].item()
                raise Mismatch(
                    f"{label}第 {bad} 个元素期望 {self.expected.reshape(-1)[bad].item()}，"
                    f"实际 {got.reshape(-1)[bad].item()}"
                )
            return
        g = got.detach().to(torch.float64).reshape(-1)
        e = self.expected.detach().to(torch.float64).reshape(-1)
        if self.where is not None:
            keep = self.where.reshape(-1).bool()
            g, e = g[keep], e[keep]
        nan_g, nan_e = torch.isnan(g), torch.isnan(e)
        ok = (nan_g == nan_e) & (nan_e | ((g - e).abs() <= self.atol + self.rtol * e.abs()) | (g == e))
        if not bool(ok.all()):
            bad = int((~ok).nonzero()[0].item())
            raise Mismatch(
                f"{label}第 {bad} 个元素期望 {e[bad].item():.8g}，实际 {g[bad].item():.8g}"
                f"（容差 atol={self.atol:g}, rtol={self.rtol:g}；期望 {_fmt(e.tolist())}，实际 {_fmt(g.tolist())}）"
            )


@dataclass
class Exact:
    """The value equals ``expected`` (numbers, strings, None, lists, tuples, dicts; ints vs floats by value)."""

    expected: Any
    what: str = ""

    def check(self, got: Any) -> None:
        if not _equal(got, self.expected):
            raise Mismatch(f"{self.what + '：' if self.what else ''}期望 {self.expected!r}，实际 {got!r}"[:400])


def _equal(a: Any, b: Any) -> bool:
    if isinstance(b, bool) or isinstance(a, bool):
        return type(a) is type(b) and a == b
    if isinstance(b, (int, float)) and isinstance(a, (int, float)):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    if isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(b, dict):
        return isinstance(a, dict) and set(a) == set(b) and all(_equal(a[k], b[k]) for k in b)
    return type(a) is type(b) and a == b


@dataclass
class Number:
    """A real number close to ``expected``: what ``as_number`` accepts (Python int/float, a NumPy scalar, a 0-d
    floating tensor unless ``tensor_ok`` is False); compared by ``close_number`` (NaN and ±inf never pass for a
    finite expectation)."""

    expected: float
    atol: float = 1e-9
    rtol: float = 0.0
    tensor_ok: bool = True
    what: str = ""

    def check(self, got: Any) -> None:
        label = f"{self.what}：" if self.what else ""
        value = as_number(got, self.tensor_ok)
        if value is None:
            kinds = NUMBER_KINDS if self.tensor_ok else "Python int/float 或 NumPy 标量"
            raise Mismatch(f"{label}应返回一个数（{kinds}），实际返回 {_kind(got)}")
        if not close_number(value, self.expected, self.atol, self.rtol):
            raise Mismatch(
                f"{label}期望 {self.expected:.8g}，实际 {value:.8g}（容差 atol={self.atol:g}, rtol={self.rtol:g}）"
            )


@dataclass
class Each:
    """A tuple/list whose items pass the given checks (``kind`` = "tuple" | "list" | None for either)."""

    items: list
    kind: str | None = "tuple"
    what: str = ""

    def check(self, got: Any) -> None:
        label = f"{self.what}：" if self.what else ""
        allowed = {"tuple": (tuple,), "list": (list,), None: (tuple, list)}[self.kind]
        if not isinstance(got, allowed):
            raise Mismatch(f"{label}应返回 {self.kind or 'tuple/list'}（{len(self.items)} 项），实际返回 {_kind(got)}")
        if len(got) != len(self.items):
            raise Mismatch(f"{label}应有 {len(self.items)} 项，实际 {len(got)} 项")
        for index, (value, check) in enumerate(zip(got, self.items)):
            if check is not None:
                try:
                    check.check(value)
                except Mismatch as error:
                    raise Mismatch(f"{label}第 {index} 项：{error}") from None


@dataclass
class Satisfies:
    """A custom check: ``predicate(value)`` raises ``Mismatch`` (or returns a message) when wrong."""

    predicate: Callable[[Any], str | None]

    def check(self, got: Any) -> None:
        message = self.predicate(got)
        if message:
            raise Mismatch(message)


@dataclass
class NoGrad:
    """For ``Case.grads``: this argument must not receive a gradient (its ``.grad`` stays None)."""

    what: str = ""

    def check(self, got: Any) -> None:
        if got is not None:
            raise Mismatch(f"{self.what or '这个参数'}不应接收梯度（应 detach），实际得到了梯度")


@dataclass
class Raises:
    """The call raises ``exception`` (by name, or a subclass of it)."""

    exception: str = "ValueError"
    what: str = ""


@dataclass
class Case:
    """One call of a learner's function, mapped to the test cell ``test`` (a test-cell grade_id).

    ``expect`` is a check (``Close``, ``Exact``, ``Number``, ``Each``, ``Satisfies``) or ``Raises``;
    ``grads`` maps argument indices to checks on their ``.grad`` after backward (the driver calls
    ``backward()`` on the value, or on ``value[backward_output]``, weighted by ``backward_weights`` when it is
    not a scalar); ``inputs_unchanged`` also fails a case whose function wrote into its tensor arguments.
    """

    test: str
    call: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expect: Any = None
    what: str = ""
    grads: dict = field(default_factory=dict)
    backward_output: int | None = None
    backward_weights: torch.Tensor | None = None
    inputs_unchanged: bool = True
    read: bool = False  # ``call`` names a variable the answer cell sets: its value is the result
    id: str = ""

    after: str | None = None  # the test cell at whose place the driver runs this case (set by Oracle.cases)

    def wire(self) -> dict:
        """What the driver receives: inputs only, never the expectations."""
        return {
            "id": self.id,
            "call": self.call,
            "read": self.read,
            "after": self.after,
            "args": [encode(a) for a in self.args],
            "kwargs": {k: encode(v) for k, v in self.kwargs.items()},
            "grad": sorted(self.grads),
            "backward": {
                "output": self.backward_output,
                "weights": None if self.backward_weights is None else encode(self.backward_weights),
            }
            if self.grads
            else None,
        }


# ----------------------------------------------------------------------------- oracle modules
@dataclass
class Oracle:
    assignment: str
    module: Any

    @property
    def tests(self) -> dict[str, str]:
        """{test-cell grade_id: answer-cell grade_id it grades} (the answer cell gets the comments)."""
        return dict(self.module.TESTS)

    @property
    def harness(self) -> Path | None:
        """The oracle's learner-side harness (``HARNESS``: a module file next to the oracle), or None."""
        path = getattr(self.module, "HARNESS", None)
        return None if path is None else Path(path)

    @property
    def prelude(self) -> str:
        """The harness's source: the driver runs it before the notebook's cells, in the notebook's namespace (calls
        of the learner's functions that cannot travel as plain data, imports that skipped setup cells provide)."""
        return "" if self.harness is None else self.harness.read_text(encoding="utf-8")

    @property
    def zygote_warm(self) -> tuple[str, ...]:
        """``"module:function"`` calls (``ZYGOTE_WARM``) that a slot's oracle zygote makes once before it forks this
        lesson's drivers: what every driver would otherwise build itself (lesson 7's grading policy)."""
        return tuple(getattr(self.module, "ZYGOTE_WARM", ()))

    def zygote_imports(self, kind: str) -> tuple[str, ...]:
        """Modules this lesson's kernels (``kind`` "kernel") or drivers ("oracle") import beyond what every zygote
        imports (``sandbox.WARM``): ``ZYGOTE_IMPORTS[kind]``, imported once by a slot's zygote of that kind where the
        run grades this lesson. Only speed depends on it: a module left out is imported by each job itself."""
        return tuple(getattr(self.module, "ZYGOTE_IMPORTS", {}).get(kind, ()))

    def skip_setup(self, grade_id: str | None) -> bool:
        """Whether the driver leaves out this locked setup cell: its release grade_id is in ``SKIP_SETUP``
        (never a source substring: a learner's own cell has no grade_id and always runs)."""
        return grade_id is not None and grade_id in getattr(self.module, "SKIP_SETUP", ())

    def cases(self, seed: str, flags: dict | None = None, learner: str = "") -> list[Case]:
        flags = {**getattr(self.module, "FLAGS", {}), **(flags or {})}
        cases = list(self.module.cases(case_generator(seed, self.assignment, learner), flags))
        unknown = sorted({c.test for c in cases} - set(self.tests))
        if unknown:
            raise ValueError(f"oracle {self.assignment}: cases for unknown tests {unknown}")
        for index, case in enumerate(cases):
            case.id = f"{case.test}#{index}"
            case.after = case.test  # the driver runs it where the learner's notebook has this test cell
        return cases


from .oracles import oracle_assignments  # noqa: E402,F401 - (torch-free) the graded lessons, listed in one place


def load_oracle(assignment: str) -> Oracle | None:
    """The oracle module of ``assignment`` (``autograde.grpo_grader.oracles.<assignment>``), or None."""
    name = f"{__package__}.oracles.{assignment}"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    return Oracle(assignment, importlib.import_module(name))


# ----------------------------------------------------------------------------- verdicts
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
