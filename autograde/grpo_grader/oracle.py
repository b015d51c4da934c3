"""The trusted side of grading: a lesson's oracle module loaded, and its cases drawn from the secret seed.

A lesson's oracle is a module ``autograde/grpo_grader/oracles/<assignment>.py`` (see "Writing an oracle for
a lesson" in autograde/README.md), written with the words of ``vocabulary.py``. In the pipeline it never enters a
learner kernel: the grader process imports it, asks it for cases, sends only the cases' *inputs* (plain data,
``wire.py``) to the sandboxed kernel that executes the learner's notebook, where the case runner (``case_runner.py``)
calls the learner's functions at each test cell, and judges what comes back (``judging.py``) against the expectations
that stayed here. Outside the pipeline, the lessons' hidden tests run the same cases in the kernel
(``oracles.run_in_kernel``, fresh draws): one specification per check.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .vocabulary import Case


# ----------------------------------------------------------------------------- the secret seed
def case_generator(seed: str, assignment: str, learner: str = "") -> torch.Generator:
    """The torch generator an oracle draws a learner's cases from: a key derived from the secret seed, the learner
    and the assignment (HMAC-SHA256), so that inputs leaking through one learner's feedback say nothing about
    another learner's, and nothing about the seed."""
    digest = hmac.new(seed.encode(), f"cases\0{learner}\0{assignment}".encode(), hashlib.sha256).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


# ----------------------------------------------------------------------------- oracle modules
@dataclass
class Oracle:
    assignment: str
    module: Any

    @property
    def tests(self) -> dict[str, str]:
        """{test-cell grade_id: answer-cell grade_id it grades} (the answer cell gets the comments)."""
        return dict(self.module.TESTS)

    @property
    def harness(self) -> Path | None:
        """The oracle's learner-side harness (``HARNESS``: a module file next to the oracle), or None."""
        path = getattr(self.module, "HARNESS", None)
        return None if path is None else Path(path)

    @property
    def prelude(self) -> str:
        """The harness's source: the case runner runs it at the lesson's first test cell, in a namespace of its own
        whose ``_NOTEBOOK`` is the notebook's (calls of the learner's functions that cannot travel as plain data)."""
        return "" if self.harness is None else self.harness.read_text(encoding="utf-8")

    @property
    def zygote_warm(self) -> tuple[str, ...]:
        """``"module:function"`` calls (``ZYGOTE_WARM``) that a slot's zygote makes once before it forks this lesson's
        kernels: what every kernel's cases would otherwise build themselves (lesson 7's grading policy)."""
        return tuple(getattr(self.module, "ZYGOTE_WARM", ()))

    @property
    def zygote_imports(self) -> tuple[str, ...]:
        """Modules this lesson's kernels import beyond what every zygote imports (``zygotes.WARM``):
        ``ZYGOTE_IMPORTS``, imported once by a slot's zygote where the run grades this lesson. Only speed depends on
        it: a module left out is imported by each kernel itself."""
        return tuple(getattr(self.module, "ZYGOTE_IMPORTS", ()))

    def cases(self, seed: str, flags: dict | None = None, learner: str = "") -> list[Case]:
        flags = {**getattr(self.module, "FLAGS", {}), **(flags or {})}
        cases = list(self.module.cases(case_generator(seed, self.assignment, learner), flags))
        unknown = sorted({c.test for c in cases} - set(self.tests))
        if unknown:
            raise ValueError(f"oracle {self.assignment}: cases for unknown tests {unknown}")
        for index, case in enumerate(cases):
            case.id = f"{case.test}#{index}"
            case.after = case.test  # the kernel runs it at this test cell of the learner's notebook
        return cases


def load_oracle(assignment: str) -> Oracle | None:
    """The oracle module of ``assignment`` (``autograde.grpo_grader.oracles.<assignment>``), or None."""
    name = f"{__package__}.oracles.{assignment}"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    return Oracle(assignment, importlib.import_module(name))
