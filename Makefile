# GRPO in practice - one entry point for learners, instructors and maintainers.
# `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    ?= .venv
PY      := $(VENV)/bin/python
PROFILE ?= PT-CPU
RUN_MODE  ?= dry_run
RUN_LABEL ?= default
SEEDS ?= 1
PORT      ?= 8888
LAB_FLAGS ?=
export PYTHONUNBUFFERED := 1
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help ready setup build release check-release demo test test-fast test-integration lint format lab lab-instructor workspace \
        autograde merge-shards feedback grades review experiment online bench tiny-model warm-starts qwen-shaped-checkpoint \
        gpu-wheelhouse preflight clean

help: ## list the targets
	@echo "GRPO in practice (组相对策略优化实战) - make targets:"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | awk -F'\t' '{printf "  %-24s %s\n", $$1, $$2}'

$(VENV)/.setup-stamp: environments/*.txt pyproject.toml tools/cli/setup_env.py
	@python3 tools/cli/setup_env.py --venv $(VENV) --profile $(PROFILE)
	@touch $@

# What the course targets need beyond the venv (bubblewrap, the graded checkpoints, lesson 7's warm starts, the
# browser tests' playwright-core): tools/cli/ready.py, idempotent, a few seconds when everything is there. Every
# target that grades, tests or trains depends on it, so `make demo` and `make test` on a fresh machine need no
# other command.
ready: $(VENV)/.setup-stamp
	@$(PY) -m tools.cli.ready

setup: ready ## create .venv, install the CPU profile + grading tools (PROFILE=BASE-CPU|PT-CPU|PT-RL-CUDA), bubblewrap, the tiny checkpoints and lesson 7's warm starts
	@$(PY) -m tools.preflight --profile $(PROFILE) --quiet-ok

preflight: $(VENV)/.setup-stamp ## print the environment table for PROFILE
	@$(PY) -m tools.preflight --profile $(PROFILE)

build: $(VENV)/.setup-stamp ## build nbgrader source notebooks from solutions/*.py
	@$(PY) -m tools.chain.notebooks build

release: $(VENV)/.setup-stamp ## regenerate the learner versions under notebooks/ and the README notebook table
	@$(PY) -m tools.chain.notebooks release
	@$(PY) -m tools.chain.readme_table
	@$(PY) -m autograde.pipeline settings --write
	@$(PY) -m tools.env_vars --write
	@$(PY) -m tools.cli.workspace --notice

check-release: $(VENV)/.setup-stamp ## fail if notebooks/ or the README table is stale, or a learner version leaks
	@$(PY) -m tools.chain.notebooks check
	@$(PY) -m tools.chain.readme_table --check
	@$(PY) -m autograde.pipeline settings --check
	@$(PY) -m tools.env_vars --check

tiny-model: $(VENV)/.setup-stamp ## build (once) the tiny Qwen2-architecture checkpoint used by tests and tiny_cpu runs
	@$(PY) -m tools.tiny_model

warm-starts: $(VENV)/.setup-stamp ## build (once) lesson 7's SFT warm starts (sft, sft-list) of the tiny model -> .cache/online-sft*-seed0
	@$(PY) -c "from tools.online_grpo import build_warm_starts; build_warm_starts()"

qwen-shaped-checkpoint: $(VENV)/.setup-stamp ## random-init checkpoint with Qwen2.5-0.5B's shape (offline GPU timing)
	@$(PY) -m tools.tiny_model --qwen-shaped

gpu-wheelhouse: $(VENV)/.setup-stamp ## wheels for benchmarks/gpu_check.sh on a bare CUDA machine -> .cache/gpu-wheelhouse (GPU_PYTHONS="3.11 3.12")
	@$(PY) tools/device/gpu_wheelhouse.py $(foreach v,$(or $(GPU_PYTHONS),3.11 3.12),--python $(v))

# `make test` runs on 2 workers (pytest-xdist): a module's tests stay together, so its module fixtures run once, and
# modules are handed out in file order (tests/test_autograde_class.py, the longest chain, starts at once on the
# second worker); notebook executions are shared across workers by tests/conftest.py. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST_XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Each test target prints its wall and busy-CPU time and appends them to the git-ignored record
# benchmarks/results/local/tests/test-runs.json (tools/cli/testrun.py); the budgets are stated in README.md.
test: ready ## run the whole test suite (unit tests, notebooks, release check, grading, benchmarks at tiny size)
	@$(PY) -m tools.cli.testrun --target test -- -q $(PYTEST_XDIST) -m "not integration" --durations=10 tests

test-fast: $(VENV)/.setup-stamp ## the inner loop: no notebook execution, grading or release (markers slow, release)
	@$(PY) -m tools.cli.testrun --target test-fast -- -q $(PYTEST_XDIST) -m "not slow and not release and not integration" --durations=10 tests

# ruff check covers tools/, tests/, benchmarks/, solutions/ and autograde/; ruff format --check covers every Python
# file there except pyproject.toml's [tool.ruff.format] exclude (the jupytext lesson sources, the chain's fixtures,
# Markdown). Rules and exclusions live in pyproject.toml only.
# The environment's own integration checks (CI runs them after make test): a real single-node Slurm cluster (root,
# Debian's slurm-wlm + munge), grading as an unprivileged user in bubblewrap, the browser walk of the nbgrader
# exchange. Each reports itself skipped, with the reason, where the machine cannot provide what it needs.
test-integration: ready ## the environment integration tests: Slurm array, unprivileged bwrap grading, browser exchange walk
	@$(PY) -m tools.cli.testrun --target test-integration -- -q $(PYTEST_XDIST) -m integration --durations=10 tests

lint: $(VENV)/.setup-stamp ## ruff check + ruff format --check (rules and exclusions in pyproject.toml)
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .

format: $(VENV)/.setup-stamp ## ruff check --fix, then ruff format (the files pyproject.toml does not exclude)
	@$(PY) -m ruff check --fix .
	@$(PY) -m ruff format .

demo: ready ## the main job: build, execute, release, grade the sample class, run the experiment
	@GRPO_PROGRESS=1 $(PY) -m tools.cli.demo

lab: $(VENV)/.setup-stamp ## learner JupyterLab on your work copy work/ (made on the first start; PORT=8888)
	@$(PY) -m tools.cli.lab --role learner --port $(PORT) $(LAB_FLAGS)

lab-instructor: $(VENV)/.setup-stamp ## instructor JupyterLab: formgrader on autograde/, local exchange autograde/exchange/
	@$(PY) -m tools.cli.lab --role instructor --port $(PORT) $(LAB_FLAGS)

workspace: $(VENV)/.setup-stamp ## copy notebooks/ into your git-ignored work/ (UPDATE="nb01_... ..." takes new versions, old copy kept)
	@$(PY) -m tools.cli.workspace $(if $(UPDATE),--update $(UPDATE))

autograde: ready ## grade every autograde/submitted/<learner>/<assignment>/ in parallel (SHARD=k/N: 1/N of the learners)
	@$(PY) -m autograde.pipeline autograde $(if $(SHARD),--shard $(SHARD)) $(ARGS)

merge-shards: $(VENV)/.setup-stamp ## merge the results of `make autograde SHARD=k/N` runs into the course gradebook
	@$(PY) -m autograde.pipeline merge-shards $(ARGS)

feedback: $(VENV)/.setup-stamp ## HTML feedback per learner under autograde/feedback/
	@$(PY) -m autograde.pipeline feedback $(ARGS)

grades: $(VENV)/.setup-stamp ## export autograde/grades.csv (+ per-test CSV), the class report autograde/report.html, a summary (ARGS=--table: every row)
	@$(PY) -m autograde.pipeline grades $(ARGS)

review: $(VENV)/.setup-stamp ## the copy review: side-by-side similarity report autograde/review/similarity.html (+ .csv, .json)
	@$(PY) -m autograde.pipeline review $(ARGS)

experiment: ready ## run the final notebook headless (RUN_MODE=dry_run|tiny_cpu|real_gpu RUN_LABEL=...)
	@$(PY) -m tools.cli.experiment --mode "$(RUN_MODE)" --label "$(RUN_LABEL)"

online: ready ## lesson 7's online GRPO run -> benchmarks/results/local/online/online-grpo_<RUN_LABEL>.json (reference labels: results/online/); SEEDS=3 adds online-grpo-seeds_<RUN_LABEL>.json (ONLINE_ARGS="--num-iterations 4 ..."; ONLINE_ARGS="--processes 2": GRPOTrainer in 2 processes under torchrun -> online-multiprocess_<RUN_LABEL>.json)
	@$(PY) -m tools.cli.online --label "$(RUN_LABEL)" --seeds "$(SEEDS)" $(ONLINE_ARGS)

bench: ready ## run the benchmarks, write benchmarks/results/latest.json
	@$(PY) benchmarks/run.py

clean: ## remove generated files (keeps .venv and committed learner notebooks)
	rm -rf autograde/source autograde/release autograde/autograded autograde/feedback autograde/gradebook.db \
	       autograde/grades*.csv autograde/report.html autograde/review .cache artifacts build .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +
