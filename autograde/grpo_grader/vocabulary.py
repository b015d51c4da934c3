"""The words an oracle module writes its cases with (see "Writing an oracle for a lesson" in autograde/README.md):
``Case`` (one call of a learner's function and what it must give), the checks of a value (``Close``, ``Exact``,
``Number``, ``Each``, ``Satisfies``, ``NoGrad``) or ``Raises``, ``Mismatch`` for a check of its own, and the comparisons
that NaN and ±inf cannot fool (``close_number``, ``close_tensor``, ``as_number``).

    from ..vocabulary import Case, Close, Each, Exact, Number, Raises, Satisfies, Mismatch
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .wire import DTYPE_NAMES, Foreign, encode


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
