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


def _documented(path: str):
    """The ``EnvVar`` of every ``NAME = "GRPO_..."`` line of this file, its ``#: set by | meaning`` comment lines just
    above it (Sphinx's doc-comment form) giving the rest: the table's rows, in the file's order."""
    comment: list[str] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("#: "):
            comment.append(line[3:])
            continue
        match = re.match(r'^[A-Z][A-Z0-9_]* = "(GRPO_[A-Z0-9_]+)"$', line)
        if match and comment:
            set_by, meaning = " ".join(comment).split(" | ", 1)
            yield EnvVar(match.group(1), meaning, set_by)
        comment = []


# --- learners and the lessons
#: learner | a hub id or a local checkpoint folder for `real_gpu` (nb06, nb07, the device check)
MODEL_ID = "GRPO_MODEL_ID"
#: learner | `float16` / `bfloat16` forces nb06's `real_gpu` dtype (unset: the card decides)
REAL_GPU_DTYPE = "GRPO_REAL_GPU_DTYPE"
#: grader | nb07's `RUN_MODE` over the notebook's value (the grading kernels set `smoke`)
ONLINE_RUN_MODE = "GRPO_ONLINE_RUN_MODE"
#: tests | nb07's `RUN_LABEL` over the notebook's value
ONLINE_RUN_LABEL = "GRPO_ONLINE_RUN_LABEL"
#: make | `1`: per-cell progress of a headless notebook run (`make demo`, `make experiment`)
PROGRESS = "GRPO_PROGRESS"

# --- the bootstrap cell (Colab, ModelScope, a local clone)
#: learner | the bootstrap cell's platform: `colab`, `modelscope` or `local` (default: detected)
COURSE_PLATFORM = "GRPO_COURSE_PLATFORM"
#: learner | the clone URL the bootstrap cell uses (default: course.toml's repository)
COURSE_REPO_URL = "GRPO_COURSE_REPO_URL"
#: learner | the branch the bootstrap cell clones (default: course.toml's branch)
COURSE_BRANCH = "GRPO_COURSE_BRANCH"

# --- the bootstrap cell: where the course goes
#: learner | where the bootstrap cell clones the course (default: the platform's folder)
COURSE_DIR = "GRPO_COURSE_DIR"
#: learner | `1`: the bootstrap cell runs `git pull --ff-only` on a stale clone
COURSE_UPDATE = "GRPO_COURSE_UPDATE"
#: tests | tests: a temporary `/` under which the platforms' folders lie
PLATFORM_ROOT = "GRPO_PLATFORM_ROOT"

# --- instructors and the grader
#: instructor | the instructor's secret grading seed (else `autograde/.grading_seed`)
GRADING_SEED = "GRPO_GRADING_SEED"
#: tests | a public seed for reproducible in-kernel oracle runs (tests); unset: fresh cases
KERNEL_CASES_SEED = "GRPO_KERNEL_CASES_SEED"
#: grader | set by the grader inside a sandbox: the sandbox mode
GRADING_SANDBOX = "GRPO_GRADING_SANDBOX"

# --- set inside the grading sandbox, and the Slurm recipe
#: grader | set by the grader inside a sandbox: `1` where the root is read-only
GRADING_READONLY_ROOT = "GRPO_GRADING_READONLY_ROOT"
#: instructor | the Slurm recipe's course checkout on the compute nodes
COURSE_ROOT = "GRPO_COURSE_ROOT"

# --- maintainers: benchmarks and the tests' switches
#: benchmarks | the torch thread count of a benchmark's worker process
BENCH_THREADS = "GRPO_BENCH_THREADS"
#: tests | `0`: every test notebook execution gets a fresh kernel
TEST_WARM_KERNELS = "GRPO_TEST_WARM_KERNELS"
#: tests | `1`: run the opt-in test that installs the GPU wheelhouse
TEST_GPU_WHEELHOUSE = "GRPO_TEST_GPU_WHEELHOUSE"
#: tests | the device `tests/test_device_*.py` run on (`cuda`: set by `benchmarks/gpu_check.sh`; unset: their CPU default)
TEST_DEVICE = "GRPO_TEST_DEVICE"
#: tests | seconds a browser test may take (default 180)
BROWSER_TIMEOUT_S = "GRPO_BROWSER_TIMEOUT_S"

# --- maintainers: the opt-in realistic launch test
#: tests | `1`: run the opt-in realistic launch test (a fresh interpreter installs a profile)
REALISTIC_LAUNCH = "GRPO_REALISTIC_LAUNCH"
#: tests | the torch wheel or spec the realistic launch test installs
REALISTIC_TORCH = "GRPO_REALISTIC_TORCH"
#: tests | the interpreter the realistic launch test uses
REALISTIC_PYTHON = "GRPO_REALISTIC_PYTHON"

VARIABLES = tuple(_documented(__file__))  # in the order above


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
