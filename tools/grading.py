"""Comparison helpers for the notebooks' visible and hidden tests.

The notebook's first (locked) cell imports this module before any learner code runs, so everything it
uses is bound here at import time: the builtins (``from builtins import ...`` makes them module globals,
so a later ``builtins.abs = ...`` does not reach this module), the module-level torch helpers and the
``torch.Tensor`` methods a comparison needs. Comparisons convert tensors to Python floats through the
captured ``Tensor.tolist`` and compare them with plain Python arithmetic, so a learner who rebinds
``torch.allclose``, ``torch.testing.assert_close``, ``builtins.abs`` or even ``torch.Tensor.any`` cannot
make a wrong answer pass. ``tampered()`` lists what was rebound and ``restore()`` puts it back (the
autograder calls it before the tests run).
"""

from __future__ import annotations

import builtins
import math
from builtins import (  # noqa: A004, UP029  module globals now, immune to later patches of builtins
    AssertionError,
    Exception,
    NotImplementedError,
    ValueError,
    abs,
    enumerate,
    float,
    getattr,
    isinstance,
    len,
    list,
    max,
    setattr,
    str,
    tuple,
    type,
    zip,
)

import torch
import torch.testing

_isnan = math.isnan
_BUILTIN_NAMES = ("abs", "isinstance", "len", "float", "max", "min", "all", "any", "sum", "round", "sorted")
_MODULE_ATTRS = {
    "torch": ("allclose", "isclose", "equal", "isfinite", "isnan", "all", "any", "abs", "tensor", "as_tensor"),
    "torch.testing": ("assert_close",),
    "math": ("isclose", "isfinite", "isnan"),
}
_TENSOR_METHODS = (
    "any",
    "all",
    "abs",
    "item",
    "tolist",
    "allclose",
    "isclose",
    "equal",
    "eq",
    "ne",
    "isnan",
    "isfinite",
    "max",
    "min",
    "sum",
    "mean",
    "detach",
    "to",
    "size",
    "numel",
    "float",
    "double",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__sub__",
    "__abs__",
    "__bool__",
)
_MODULES = {"torch": torch, "torch.testing": torch.testing, "math": math}

# Captured at import time (the bootstrap cell), before learner code can patch anything.
_ORIGINALS: dict[str, object] = {name: getattr(builtins, name) for name in _BUILTIN_NAMES}
for _module_name, _attrs in _MODULE_ATTRS.items():
    for _attr in _attrs:
        _ORIGINALS[f"{_module_name}.{_attr}"] = getattr(_MODULES[_module_name], _attr)
for _attr in _TENSOR_METHODS:
    _ORIGINALS[f"torch.Tensor.{_attr}"] = torch.Tensor.__dict__.get(_attr, getattr(torch.Tensor, _attr))

_float64 = torch.float64
_as_tensor = torch.as_tensor
_is_tensor = torch.is_tensor
_detach = torch.Tensor.detach
_to = torch.Tensor.to
_tolist = torch.Tensor.tolist
_size = torch.Tensor.size


def trusted(name: str):
    """Return the genuine function captured before learner code ran (e.g. ``trusted("torch.allclose")``)."""
    return _ORIGINALS[name]


def _current(name: str):
    if name.startswith("torch.Tensor."):
        attr = name[len("torch.Tensor.") :]
        return torch.Tensor.__dict__.get(attr, getattr(torch.Tensor, attr))
    module_name, _, attr = name.rpartition(".")
    return getattr(_MODULES[module_name] if module_name else builtins, attr)


def tampered() -> list[str]:
    """Names among the captured helpers that learner code has rebound since the bootstrap cell."""
    return [name for name, original in _ORIGINALS.items() if _current(name) is not original]


def restore() -> list[str]:
    """Put every rebound helper back; return the names that had been rebound."""
    changed = tampered()
    for name in changed:
        if name.startswith("torch.Tensor."):
            setattr(torch.Tensor, name[len("torch.Tensor.") :], _ORIGINALS[name])
        else:
            module_name, _, attr = name.rpartition(".")
            setattr(_MODULES[module_name] if module_name else builtins, attr, _ORIGINALS[name])
    return changed


def _flatten(nested, out: list) -> list:
    if isinstance(nested, list):
        for item in nested:
            _flatten(item, out)
    else:
        out.append(float(nested))
    return out


def _values(value) -> tuple[tuple, list]:
    """(shape, flat list of Python floats) through the captured tensor methods only."""
    tensor = value if _is_tensor(value) else _as_tensor(value, dtype=_float64)
    tensor = _to(_detach(tensor), "cpu", _float64)
    return tuple(_size(tensor)), _flatten(_tolist(tensor), [])


def max_abs_diff(actual, expected) -> float:
    """Largest |actual - expected| as a Python float (NaN where one side is NaN and the other is not)."""
    (a_shape, a), (e_shape, e) = _values(actual), _values(expected)
    if a_shape != e_shape:
        raise AssertionError(f"形状不一致：期望 {e_shape}，实际 {a_shape}")
    worst = 0.0
    for x, y in zip(a, e):
        if _isnan(x) and _isnan(y):
            continue
        if _isnan(x) or _isnan(y):
            return float("nan")
        worst = max(worst, abs(x - y))
    return worst


def assert_close(actual, expected, *, atol: float = 1e-6, rtol: float = 1e-5, what: str = "结果") -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` elementwise, with a Chinese message.

    Plain Python arithmetic on captured conversions; NaN matches NaN; shapes must agree exactly.
    """
    (a_shape, a), (e_shape, e) = _values(actual), _values(expected)
    if a_shape != e_shape:
        raise AssertionError(f"{what}：形状不一致，期望 {e_shape}，实际 {a_shape}")
    bad = []
    for index, (x, y) in enumerate(zip(a, e)):
        if _isnan(x) and _isnan(y):
            continue
        if _isnan(x) or _isnan(y) or not abs(x - y) <= atol + rtol * abs(y):
            bad.append(index)
    if bad:
        index = bad[0]
        raise AssertionError(
            f"{what}不符：第 {index} 个元素期望 {e[index]:.6g}，实际 {a[index]:.6g}"
            f"（容差 atol={atol:g}, rtol={rtol:g}；共 {len(bad)} 个元素超出）\n"
            f"期望：{e if len(e) <= 16 else '…'}\n实际：{a if len(a) <= 16 else '…'}"
        )


def expect_value_error(call, contract: str) -> str:
    """Run ``call()`` and require a ``ValueError``; return its message.

    ``contract`` names the broken input contract, for the failure message.
    """
    try:
        call()
    except ValueError as error:  # the contract: invalid input -> ValueError
        message = str(error)
        if not message.strip():
            raise AssertionError(f"违反输入契约（{contract}）时应抛出带说明的 ValueError，但错误信息为空") from None
        return message
    except NotImplementedError:
        raise
    except Exception as error:  # another exception type is a contract failure too
        raise AssertionError(
            f"违反输入契约（{contract}）时应抛出 ValueError，实际抛出 {type(error).__name__}: {error}"
        ) from None
    raise AssertionError(f"违反输入契约（{contract}）时应抛出 ValueError，但函数正常返回了")
