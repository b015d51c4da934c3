"""``python -m autograde.pipeline sample --rebuild | --check``: the sample class's submissions (``sample_class/``),
regenerated from its cases or checked; ``autograde --sample`` copies them into the course first (``install``)."""

from __future__ import annotations

from autograde.grpo_grader.course import GradingPipeline
from autograde.sample_class import build as sample_class


def install(settings: GradingPipeline) -> None:
    """``autograde --sample``: the sample class's learners copied into the course's ``submitted/``."""
    learners = sample_class.install(settings.dir("submitted"))
    print(f"[autograde] sample class: {len(learners)} learner(s) copied into {settings.dir('submitted')}")


def sample(rebuild: bool) -> int:
    if rebuild:
        for path in sample_class.rebuild():
            print(f"wrote {path}")
        return 0
    stale = sample_class.check()
    for line in stale:
        print(f"STALE {line}")
    print("sample class up to date" if not stale else "run `python -m autograde.pipeline sample --rebuild`")
    return 1 if stale else 0
