"""Full marks and a ``copies-reference`` flag: nb01's reference answers copied from ``solutions/`` with
local names renamed, comments added and a dead assignment (``_ = None``) in each function. Copying is never a
score change; the winnowed fingerprint still finds most of the reference in every answer (the exact-hash check
missed it, and a lone copier was never compared with the reference at all).
"""


def _disguise(source):
    lines = []
    for line in source.splitlines():
        lines.append(line)
        if line.startswith("def ") and line.rstrip().endswith(":"):
            lines.append("    _ = None  # 先占个位")
    text = "\n".join(lines)
    for old, new in (("centered", "dev"), ("variance", "var_"), ("grouped", "rows"), ("shifted", "moved"),
                     ("counts", "sizes")):
        text = text.replace(old, new)
    return "# 我的实现\n" + text


def _cells():
    from autograde.sample_class.build import worked_answers

    answers = worked_answers("nb01_group_advantages")
    return {gid: _disguise(answers[gid]) for gid in ("compute_group_advantages", "group_relative_advantages",
                                                     "answer_conventions_0001")}


CASE = {"nb01_group_advantages": {"base": "solution", "cells": _cells()}}
