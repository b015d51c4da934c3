"""Every ``GRPO_*`` environment variable the course reads: its one home, with what it means and who reads it.

Code reads a variable through the constant here (``os.environ.get(env_vars.MODEL_ID)``), never by typing its name;
``tests/test_one_home.py`` fails on a name typed anywhere else, except in ``SANDBOX_SIDE_COPIES`` (code that runs
before the course is importable or inside the grading sandbox with the standard library only, where the name is
written again with a comment naming this module). The table in ``docs/CONVENTIONS.md`` is generated from ``VARIABLES``
(``python -m tools.env_vars --write``, run by ``make release``; ``--check`` by ``make check-release``).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EnvVar:
    name: str
    meaning: str
    read_by: str


# --- learners and the lessons
MODEL_ID = "GRPO_MODEL_ID"
REAL_GPU_DTYPE = "GRPO_REAL_GPU_DTYPE"
ONLINE_RUN_MODE = "GRPO_ONLINE_RUN_MODE"
ONLINE_RUN_LABEL = "GRPO_ONLINE_RUN_LABEL"
PROGRESS = "GRPO_PROGRESS"
# --- the bootstrap cell (Colab, ModelScope, a local clone)
COURSE_PLATFORM = "GRPO_COURSE_PLATFORM"
COURSE_REPO_URL = "GRPO_COURSE_REPO_URL"
COURSE_BRANCH = "GRPO_COURSE_BRANCH"
COURSE_DIR = "GRPO_COURSE_DIR"
COURSE_UPDATE = "GRPO_COURSE_UPDATE"
PLATFORM_ROOT = "GRPO_PLATFORM_ROOT"
# --- instructors and the grader
GRADING_SEED = "GRPO_GRADING_SEED"
KERNEL_CASES_SEED = "GRPO_KERNEL_CASES_SEED"
GRADING_SANDBOX = "GRPO_GRADING_SANDBOX"
GRADING_READONLY_ROOT = "GRPO_GRADING_READONLY_ROOT"
COURSE_ROOT = "GRPO_COURSE_ROOT"
# --- maintainers: benchmarks and tests
BENCH_THREADS = "GRPO_BENCH_THREADS"
TEST_WARM_KERNELS = "GRPO_TEST_WARM_KERNELS"
TEST_GPU_WHEELHOUSE = "GRPO_TEST_GPU_WHEELHOUSE"
BROWSER_TIMEOUT_S = "GRPO_BROWSER_TIMEOUT_S"
REALISTIC_LAUNCH = "GRPO_REALISTIC_LAUNCH"
REALISTIC_TORCH = "GRPO_REALISTIC_TORCH"
REALISTIC_PYTHON = "GRPO_REALISTIC_PYTHON"

VARIABLES = (
    EnvVar(MODEL_ID, "a hub id or a local checkpoint folder for `real_gpu` (nb06, nb07, the device check)", "learner"),
    EnvVar(
        REAL_GPU_DTYPE, "`float16` / `bfloat16` forces nb06's `real_gpu` dtype (unset: the card decides)", "learner"
    ),
    EnvVar(ONLINE_RUN_MODE, "nb07's `RUN_MODE` over the notebook's value (the grading kernels set `smoke`)", "grader"),
    EnvVar(ONLINE_RUN_LABEL, "nb07's `RUN_LABEL` over the notebook's value", "tests"),
    EnvVar(PROGRESS, "`1`: per-cell progress of a headless notebook run (`make demo`, `make experiment`)", "make"),
    EnvVar(
        COURSE_PLATFORM,
        "the bootstrap cell's platform: `colab`, `modelscope` or `local` (default: detected)",
        "learner",
    ),
    EnvVar(COURSE_REPO_URL, "the clone URL the bootstrap cell uses (default: course.toml's repository)", "learner"),
    EnvVar(COURSE_BRANCH, "the branch the bootstrap cell clones (default: course.toml's branch)", "learner"),
    EnvVar(COURSE_DIR, "where the bootstrap cell clones the course (default: the platform's folder)", "learner"),
    EnvVar(COURSE_UPDATE, "`1`: the bootstrap cell runs `git pull --ff-only` on a stale clone", "learner"),
    EnvVar(PLATFORM_ROOT, "tests: a temporary `/` under which the platforms' folders lie", "tests"),
    EnvVar(GRADING_SEED, "the instructor's secret grading seed (else `autograde/.grading_seed`)", "instructor"),
    EnvVar(
        KERNEL_CASES_SEED, "a public seed for reproducible in-kernel oracle runs (tests); unset: fresh cases", "tests"
    ),
    EnvVar(GRADING_SANDBOX, "set by the grader inside a sandbox: the sandbox mode", "grader"),
    EnvVar(GRADING_READONLY_ROOT, "set by the grader inside a sandbox: `1` where the root is read-only", "grader"),
    EnvVar(COURSE_ROOT, "the Slurm recipe's course checkout on the compute nodes", "instructor"),
    EnvVar(BENCH_THREADS, "the torch thread count of a benchmark's worker process", "benchmarks"),
    EnvVar(TEST_WARM_KERNELS, "`0`: every test notebook execution gets a fresh kernel", "tests"),
    EnvVar(TEST_GPU_WHEELHOUSE, "`1`: run the opt-in test that installs the GPU wheelhouse", "tests"),
    EnvVar(BROWSER_TIMEOUT_S, "seconds a browser test may take (default 180)", "tests"),
    EnvVar(
        REALISTIC_LAUNCH, "`1`: run the opt-in realistic launch test (a fresh interpreter installs a profile)", "tests"
    ),
    EnvVar(REALISTIC_TORCH, "the torch wheel or spec the realistic launch test installs", "tests"),
    EnvVar(REALISTIC_PYTHON, "the interpreter the realistic launch test uses", "tests"),
)

# Files that must write a name or a literal again, each with why: they run where ``tools`` cannot be imported (inside
# the grading sandbox with the standard library only, or before the course is found). Each says which home it
# mirrors in a comment. tests/test_one_home.py reads this list for the environment names and the literals.
SANDBOX_SIDE_COPIES = {
    "autograde/grpo_grader/sandbox.py": "the kernel launcher and zygote: standard library only, inside the sandbox",
    "autograde/grpo_grader/probe.py": "the pre-flight's sandbox side: standard library only, inside the sandbox",
    "autograde/nbgrader_config.py": "nbgrader loads it before the course is importable: it finds the checkout",
}

TABLE_BEGIN = "<!-- env-vars-table (generated) -->"
TABLE_END = "<!-- /env-vars-table -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "CONVENTIONS.md"
NAME = re.compile(r"\bGRPO_[A-Z0-9_]*[A-Z0-9]\b")


def table() -> str:
    rows = ["| variable | meaning | set by |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.meaning} | {v.read_by} |" for v in VARIABLES]
    return "\n".join(rows)


def with_table(text: str) -> str:
    """``text`` with the generated table between its markers (ValueError when a marker is missing)."""
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise ValueError(f"{DOC.name} lacks the markers {TABLE_BEGIN} ... {TABLE_END}")
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_BEGIN}\n{table()}\n{TABLE_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the GRPO_* environment variables' table in docs/CONVENTIONS.md")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite the table")
    group.add_argument("--check", action="store_true", help="exit 1 when the table is stale")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    new = with_table(text)
    if args.write:
        if new != text:
            DOC.write_text(new, encoding="utf-8")
        return 0
    if args.check:
        if new != text:
            print(f"{DOC} 的环境变量表已过期，请运行 make release（the GRPO_* table is stale）", file=sys.stderr)
            return 1
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
