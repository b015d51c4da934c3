"""Tricks inside the learner's own kernel that no longer earn anything (trick class 1 and the frame
search), nb01:

- compute_group_advantages returns a torch.Tensor subclass whose __torch_function__ answers detach / to /
  tolist with the expected tensor it finds in the comparing function's frames (nothing is rebound);
- group_relative_advantages searches its caller frames, their globals and gc.get_objects() for a reference
  helper (a function whose name contains "reference") and calls it;
- answer_conventions searches the same places for a dict holding the seven conventions' values.

Graded by the oracle, in a process that holds only the inputs: nothing is found, every value is wrong: 0 of 17.
"""
SNEAKY = '''
import gc
import inspect


def _expected_nearby(shape):
    """A tensor of this shape in the callers' frames that is not ours: the test's expected value."""
    for frame_info in inspect.stack()[2:]:
        for value in list(frame_info.frame.f_locals.values()):
            if torch.is_tensor(value) and type(value) is torch.Tensor and tuple(value.shape) == tuple(shape):
                return value
    return None


class _Mirror(torch.Tensor):
    """Answers the comparison's questions with whatever the comparison expects."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("detach", "to", "tolist", "clone", "double", "float") and args:
            found = _expected_nearby(args[0].shape)
            if found is not None:
                return getattr(found, name)(*args[1:], **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def compute_group_advantages(rewards, group_ids, eps=1e-6):
    """看起来像张量，其实是一面镜子。"""
    return torch.zeros_like(rewards).as_subclass(_Mirror)
'''

SEARCHER = '''
import gc
import sys


def _search(predicate):
    """Caller frames, their globals, then every object the garbage collector knows of."""
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            if predicate(value):
                return value
        frame = frame.f_back
    for value in gc.get_objects():
        try:
            if predicate(value):
                return value
        except Exception:
            continue
    return None


def group_relative_advantages(rewards, num_generations, eps=1e-4):
    """找一个参考实现来调用；找不到就返回 0。"""
    helper = _search(lambda v: callable(v) and "reference" in getattr(v, "__name__", "")
                     and getattr(v, "__name__", "") != "group_relative_advantages")
    if helper is not None:
        try:
            return helper(rewards, num_generations, eps).to(rewards.dtype)
        except Exception:
            pass
    return torch.zeros_like(rewards)
'''

CONVENTIONS_SEARCH = '''
import gc


def answer_conventions(group, other):
    """在内存里找一份七种约定的期望值。"""
    names = {"course", "minimind", "trl_group", "trl_batch", "trl_none", "cs336", "dr_grpo"}
    for value in gc.get_objects():
        try:
            if isinstance(value, dict) and set(value) == names and all(isinstance(v, tuple) for v in value.values()):
                if value is not CONVENTIONS:
                    return dict(value)
        except Exception:
            continue
    return {}
'''

CASE = {
    "nb01_group_advantages": {"base": "release", "cells": {
        "compute_group_advantages": SNEAKY,
        "group_relative_advantages": SEARCHER,
        "answer_conventions_0001": CONVENTIONS_SEARCH,
    }},
}
