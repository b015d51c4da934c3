"""One trusted oracle module per graded assignment, named like the assignment (see autograde/README.md,
"Writing an oracle for a lesson"). The pipeline imports them in the grader's process only: no sandboxed kernel
sees them (its hidden tests are stripped before execution).

``run_in_kernel`` is the other way the same cases are run: the hidden-test block of every graded test cell of a
lesson is one call of it, so that plain ``nbgrader autograde`` (and formgrader's Autograde button, where it is
enabled) grade a test cell with the oracle's own cases and verdicts - one specification per check. It draws the
cases from fresh entropy, never from the instructor's seed: the kernel runs learner code."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from tools import env_vars

# a public seed for reproducible in-kernel runs (the test suite sets it); unset, every run draws fresh cases
KERNEL_SEED_ENV = env_vars.KERNEL_CASES_SEED


def oracle_assignments() -> list[str]:
    """Every assignment with an oracle module (``oracles/<assignment>.py``; ``_*.py`` are the oracles' helpers):
    the graded lessons, found where a new lesson's oracle is added. Here, beside them, so that listing them
    imports no torch (``python -m autograde.pipeline feedback``, ``grades``... never need it)."""
    return sorted(path.stem for path in Path(__file__).resolve().parent.glob("*.py") if not path.stem.startswith("_"))


def run_in_kernel(
    assignment: str, test: str, namespace: dict, seed: str | None = None, flags: dict | None = None
) -> None:
    """Run the oracle's cases of the test cell ``test`` of ``assignment`` on the functions in ``namespace`` (the
    notebook's ``globals()``), in this process, as a pipeline kernel runs them (``case_runner.make_runner``, the same
    plain-data records, the same ``judging.verdicts``). Raises ``AssertionError`` with the oracle's Chinese message
    when a case fails; returns None: the hidden region ends with this call, and nbgrader reads a test cell's value as
    its partial credit (a count of cases above the cell's points made plain ``nbgrader autograde`` fail).
    ``flags``: the oracle's case families switched on (default: the course config's ``c.GradingPipeline.oracle_flags``,
    as the pipeline); ``seed``: for tests (default: the public ``GRPO_KERNEL_CASES_SEED`` if set, else fresh entropy;
    never the instructor's grading seed)."""
    from ..case_runner import make_runner
    from ..course import load_settings
    from ..judging import parse_results, verdicts
    from ..oracle import load_oracle

    oracle = load_oracle(assignment)
    if oracle is None or test not in oracle.tests:
        raise ValueError(f"run_in_kernel: no oracle test {test!r} for {assignment!r}")
    if flags is None:
        flags = load_settings().oracle_flags.get(assignment, {})
    cases = [
        case
        for case in oracle.cases(seed or os.environ.get(KERNEL_SEED_ENV) or secrets.token_hex(16), flags)
        if case.test == test
    ]
    lines: list[bytes] = []
    job = {"cases": [case.wire() for case in cases], "prelude": oracle.prelude}
    make_runner(json.loads(json.dumps(job)), lines.append)(test, namespace)
    results, _cells, _problem = parse_results(b"".join(lines))
    verdict = verdicts(oracle, cases, results, "没有结果（no result）")[test]
    if not verdict.passed:
        raise AssertionError(verdict.message)
    print(f"✅ {test}：{verdict.cases} 个用例全部通过")
