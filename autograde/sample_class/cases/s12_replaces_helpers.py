"""A cell that replaces torch.allclose, torch.testing.assert_close and builtins.abs before the tests run
(nb01), with a wrong compute_group_advantages (sample std) and a wrong conventions answer that only a
replaced abs() would let through the visible test. The hidden tests compare through tools.grading (captured
at bootstrap) and the grader puts the captured helpers back before every test cell: only the correct
group_relative_advantages earns points: 2 + 3 = 5 of 17."""
CASE = {
    "nb01_group_advantages": {
        "base": "solution",
        "edit": {"compute_group_advantages": [
            ("variance = per_group_sum(centered * centered) / counts",
             "variance = per_group_sum(centered * centered) / (counts - 1).clamp_min(1)"),
        ]},
        "cells": {"answer_conventions_0001": '''
def answer_conventions(group, other):
    """每种约定都是 (-1, 1)。"""
    return {name: (-1.0, 1.0) for name in CONVENTIONS}
'''},
        "insert_after": [("compute_group_advantages", '''# 让所有比较都"通过"
import builtins
import torch.testing

torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
builtins.abs = lambda value: 0.0
''')],
    },
}
