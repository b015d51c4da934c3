"""`make demo`: the whole course in one run, printing what it did and where the results went.

Steps: tiny model -> execute every solution notebook -> learner release (+ check) -> autograde the
bundled sample class -> feedback and grade table -> final experiment in dry_run and tiny_cpu.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tools.project_runtime import resolve_project_root

ROOT = resolve_project_root(Path(__file__))  # the checkout this module belongs to
PY = sys.executable


def _step(title: str, command: list[str]) -> tuple[str, bool, float]:
    print(f"\n=== {title}\n$ {' '.join(command)}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT)
    seconds = time.perf_counter() - started
    ok = done.returncode == 0
    print(f"--- {'ok' if ok else f'FAILED (exit {done.returncode})'} in {seconds:.1f} s", flush=True)
    return title, ok, seconds


EXPERIMENT_RUNS = (("dry_run", "demo_dry_run"), ("tiny_cpu", "demo_tiny_cpu"))  # (RUN_MODE, RUN_LABEL)


def evidence_paths() -> list[Path]:
    """Where ``make experiment`` writes the demo's records (the labels are not reference labels: the git-ignored
    ``benchmarks/results/local/``), relative to the course root."""
    from tools import grpo_experiment as gx
    from tools.experiment_settings import WORKLOAD_ID

    return [gx.output_relative_path(WORKLOAD_ID, label) for _, label in EXPERIMENT_RUNS]


def main() -> int:
    executed = ROOT / "build" / "executed"
    steps = [
        ("tiny Qwen2 checkpoint (tools.tiny_model)", [PY, "-m", "tools.tiny_model"]),
        (
            "execute every solution notebook",
            [PY, "-m", "tools.chain.notebooks", "execute", "--which", "solution", "--save", str(executed)],
        ),
        ("learner release (nbgrader generate_assignment)", [PY, "-m", "tools.chain.notebooks", "release"]),
        ("release check (stale / leaks)", [PY, "-m", "tools.chain.notebooks", "check"]),
        ("autograde the sample class", [PY, "-m", "autograde.pipeline", "autograde", "--sample"]),
        ("feedback per learner", [PY, "-m", "autograde.pipeline", "feedback"]),
        ("grade export", [PY, "-m", "autograde.pipeline", "grades"]),
        *(
            (f"final experiment, {mode}", [PY, "-m", "tools.cli.experiment", "--mode", mode, "--label", label])
            for mode, label in EXPERIMENT_RUNS
        ),
    ]
    results = [_step(title, command) for title, command in steps]
    print("\n=== summary")
    for title, ok, seconds in results:
        print(f"  {'ok    ' if ok else 'FAILED'} {seconds:7.1f} s  {title}")
    print("\nwhere things went:")
    print(f"  executed solution notebooks : {executed.relative_to(ROOT)}/solution/")
    print("  learner notebooks           : notebooks/<assignment>/<assignment>.ipynb")
    print("  gradebook / grades          : autograde/gradebook.db, autograde/grades.csv, autograde/grades_by_test.csv")
    print("  feedback (HTML)             : autograde/feedback/<learner>/<assignment>/")
    for path in evidence_paths():
        print(f"  experiment evidence (JSON)  : {path.as_posix()}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
