"""Infinite loops. nb01: answer_conventions never advances its loop index; the two tests that call it
are interrupted at the cell timeout and the rest of the notebook is graded (13 of 17). nb02: compute_grpo_loss
retries forever and swallows the interrupt (`except BaseException`), so the whole notebook is killed at the
hard per-notebook limit: 0 with a reason, and the other learners are graded meanwhile.

Each loop turn sleeps 10 ms: the grader's limits are wall-clock and the interrupt arrives the same way (a
signal between bytecodes, or during the sleep), but the loops do not spin a core for the time they hold a
grading slot, so the rest of the class (and the test suite around it) keeps the CPU.
"""
CASE = {
    "nb01_group_advantages": {"base": "solution", "cells": {"answer_conventions_0001": '''
import time


def answer_conventions(group, other):
    """逐个约定填表。"""
    batch = torch.stack([group, other]).double()
    table = advantages_by_convention(batch)
    wrong, right = int(group.argmin()), int(group.argmax())
    names = list(CONVENTIONS)
    answers = {}
    i = 0
    while i < len(names):  # the index is never advanced
        time.sleep(0.01)
        name = names[i]
        answers[name] = (table[name][0, wrong].item(), table[name][0, right].item())
    return answers
'''}},
    "nb02_grpo_objective": {"base": "solution", "edit": {"compute_grpo_loss": [
        ("    advantages = compute_group_advantages(rewards, group_ids, eps=eps)",
         "    import time\n"
         "    while True:  # wait for a 'stable' result, and never give up\n"
         "        try:\n"
         "            time.sleep(0.01)\n"
         "            advantages = compute_group_advantages(rewards, group_ids, eps=eps)\n"
         "        except BaseException:\n"
         "            pass\n"
         "    advantages = compute_group_advantages(rewards, group_ids, eps=eps)"),
    ]}},
}
