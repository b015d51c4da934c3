"""Untouched learner versions: every TODO still raises NotImplementedError (0 everywhere)."""
from autograde.grpo_grader.sample import LESSONS

CASE = {lesson: {"base": "release"} for lesson in LESSONS}
