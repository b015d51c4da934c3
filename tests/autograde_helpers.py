"""What the grading-pipeline test modules share: the checkout's paths, the graded lessons and how a test runs
``python -m autograde.pipeline`` (tests/test_autograde*.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from autograde.grpo_grader.course import venv_env
from autograde.sample_class import build as sample_class

ROOT = Path(__file__).resolve().parents[1]
AUTOGRADE = ROOT / "autograde"
ASSIGNMENTS = sample_class.LESSONS


def pipeline_env() -> dict[str, str]:
    """The pipeline's own subprocess environment (``course.venv_env``): interpreter first on PATH, checkout first
    on PYTHONPATH."""
    return venv_env()


def run_pipeline(*args: str, timeout: int = 1500, seed: str | None = None) -> subprocess.CompletedProcess:
    env = pipeline_env()
    if seed is not None:
        env["GRPO_GRADING_SEED"] = seed
    done = subprocess.run(
        [sys.executable, "-m", "autograde.pipeline", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
    )
    print(done.stdout[-6000:])
    return done


def run_probe(*args: str, seed: str, timeout: int = 300) -> tuple[dict, subprocess.CompletedProcess]:
    """``python -m autograde.pipeline probe --json ARGS``: its JSON result (stdout holds only that) and the process;
    the exit status agrees with the result's ``ok``."""
    import json

    env = {**pipeline_env(), "GRPO_GRADING_SEED": seed}
    done = subprocess.run(
        [sys.executable, "-m", "autograde.pipeline", "probe", "--json", *args],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )
    print(done.stderr[-3000:])
    result = json.loads(done.stdout)
    assert (done.returncode == 0) == result["ok"], (done.returncode, result)
    return result, done


def nb01_answers() -> dict:
    """A notebook namespace holding s02's independently written nb01 answers (the sample class's honest learner)."""
    import math

    import torch

    namespace = {"torch": torch, "math": math}
    for source in sample_class.load_cases()["s02_independent_answers"]["nb01_group_advantages"]["cells"].values():
        exec(source, namespace)  # noqa: S102
    return namespace
