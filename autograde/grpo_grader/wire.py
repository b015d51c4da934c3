"""The plain data format between the grader and the learner side (``case_runner.py``: the cases' inputs in, one JSON
line per case out): only data travels, never an object, and what comes back is decoded without executing anything.

- a tensor is ``{"__tensor__": "<dtype>", "shape": [...], "data": [flat list]}`` (dtypes: bool, uint8,
  int8/16/32/64, float16/bfloat16/float32/float64), a tuple ``{"__tuple__": [...]}``, a dict with string keys
  ``{"__dict__": [[key, value], ...]}``, a torch dtype (an argument only) ``{"__dtype__": "float32"}``; numbers, strings, booleans, None and lists are themselves;
  a NumPy scalar or 0-d array the learner returns arrives as the number its ``.item()`` gives; anything else
  arrives as ``{"__object__": "<type name>"}`` and fails every check;
- a case sent to the learner side: ``{"id", "call", "read", "after": its test cell, "args", "kwargs", "grad": [arg
  indices], "backward": {"output": index or null, "weights": tensor or null}}``;
- one result line per case: ``{"case": id, "status": "returned" | "raised" | "missing", "value", "inputs": {"args":
  {index: tensor}, "kwargs": {name: tensor}} (what the call left in its tensor inputs), "grads": {index: tensor or
  null}, "grad_error", "mro": [[module, qualname], ...] (of what was raised: "builtins" only for the interpreter's own
  classes, known by identity), "message"}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .case_runner import dtype_table

MAX_DEPTH = 32  # nesting deeper than this in a returned value fails the case
DTYPES = dtype_table(torch)  # the learner side's table: one list of the dtypes a value may travel as
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


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
    raise TypeError(f"cannot send {type(value).__name__} to the learner side")


class Malformed(Exception):
    """What came back is not in the plain data format (a wrong kind of object, or broken data)."""


def decode(value: Any, depth: int = 0) -> Any:
    """Plain data from the learner side -> Python values and tensors, without executing anything."""
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
    """An object the learner side could not send as plain data (e.g. a tensor subclass); it fails every check."""

    type_name: str
