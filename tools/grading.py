"""Comparison helpers for the notebooks' visible and hidden tests.

The notebook's first (locked) cell imports this module before any learner code runs, so the references
below are the genuine functions even if a learner later rebinds ``torch.allclose``,
``torch.testing.assert_close`` or ``builtins.abs``. Hidden tests compare only through these helpers.
"""
from __future__ import annotations

import builtins
import math

import torch

# Captured at import time (the bootstrap cell), before learner code can patch anything.
_ORIGINALS = {
    "abs": builtins.abs,
    "isinstance": builtins.isinstance,
    "len": builtins.len,
    "float": builtins.float,
    "max": builtins.max,
    "all": builtins.all,
    "any": builtins.any,
    "torch.allclose": torch.allclose,
    "torch.isclose": torch.isclose,
    "torch.equal": torch.equal,
    "torch.isfinite": torch.isfinite,
    "torch.testing.assert_close": torch.testing.assert_close,
    "math.isclose": math.isclose,
    "math.isfinite": math.isfinite,
}
_float64 = torch.float64
_as_tensor = torch.as_tensor
_is_tensor = torch.is_tensor


def trusted(name: str):
    """Return the genuine function captured before learner code ran (e.g. ``trusted("torch.allclose")``)."""
    return _ORIGINALS[name]


def tampered() -> list[str]:
    """Names among the captured helpers that learner code has rebound since the bootstrap cell."""
    import torch.testing as _tt

    current = {
        "abs": builtins.abs, "isinstance": builtins.isinstance, "len": builtins.len,
        "float": builtins.float, "max": builtins.max, "all": builtins.all, "any": builtins.any,
        "torch.allclose": torch.allclose, "torch.isclose": torch.isclose, "torch.equal": torch.equal,
        "torch.isfinite": torch.isfinite, "torch.testing.assert_close": _tt.assert_close,
        "math.isclose": math.isclose, "math.isfinite": math.isfinite,
    }
    return [name for name, fn in current.items() if fn is not _ORIGINALS[name]]


def _to_f64(value):
    if _is_tensor(value):
        return value.detach().to("cpu", _float64)
    return _as_tensor(value, dtype=_float64)


def max_abs_diff(actual, expected) -> float:
    """Largest |actual - expected| as a Python float (NaN where one side is NaN and the other is not)."""
    a, e = _to_f64(actual), _to_f64(expected)
    if tuple(a.shape) != tuple(e.shape):
        raise AssertionError(f"形状不一致：期望 {tuple(e.shape)}，实际 {tuple(a.shape)}")
    if a.numel() == 0:
        return 0.0
    both_nan = a.isnan() & e.isnan()
    diff = (a - e).abs().masked_fill(both_nan, 0.0)
    worst = diff.max().item()
    return worst if worst == worst else _ORIGINALS["float"]("nan")


def assert_close(actual, expected, *, atol: float = 1e-6, rtol: float = 1e-5, what: str = "结果") -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` elementwise, with a Chinese message.

    Uses only the references captured at import time; NaN matches NaN; shapes must agree exactly.
    """
    a, e = _to_f64(actual), _to_f64(expected)
    if tuple(a.shape) != tuple(e.shape):
        raise AssertionError(f"{what}：形状不一致，期望 {tuple(e.shape)}，实际 {tuple(a.shape)}")
    if a.numel() == 0:
        return
    both_nan = a.isnan() & e.isnan()
    bad = ((a - e).abs() > atol + rtol * e.abs()) | (a.isnan() ^ e.isnan())
    bad = bad & ~both_nan
    if bad.any().item():
        index = int(bad.flatten().nonzero()[0].item())
        raise AssertionError(
            f"{what}不符：第 {index} 个元素期望 {e.flatten()[index].item():.6g}，实际 {a.flatten()[index].item():.6g}"
            f"（容差 atol={atol:g}, rtol={rtol:g}；共 {int(bad.sum().item())} 个元素超出）\n"
            f"期望：{e.tolist() if e.numel() <= 16 else '…'}\n实际：{a.tolist() if a.numel() <= 16 else '…'}"
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
