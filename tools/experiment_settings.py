"""The run settings of the final experiment (nb06): its run modes, read from the evidence schema (their one home)
and checked here, and the run-label rule every record shares (``tools.project_runtime.check_run_label``).

No torch here: ``python -m tools.cli.experiment`` checks its arguments with these before anything imports torch,
and ``tools.grpo_experiment`` (which the notebook imports) re-exports them. The values reach the notebook through
its ``parameters`` cell (papermill injects them headless; a learner edits the cell), and the notebook's
``ExperimentConfig`` checks them there, at the boundary.

nb07 (``tools.online.config.RUN_PRESETS``) has its own run modes on purpose: see docs/CONVENTIONS.md, "Run modes".
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from tools import env_vars
from tools.project_runtime import check_run_label  # noqa: F401 (re-exported: the run-label rule of every record)

# The evidence schema is the one home of the run modes: a record's `run_mode` must satisfy it, so the notebook and
# the CLI accept exactly what it accepts.
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "post-training-mechanism-gpu-v2.json"
_RECORD_FIELDS = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["properties"]
RUN_MODES: tuple[str, ...] = tuple(_RECORD_FIELDS["run_mode"]["enum"])  # ("dry_run", "tiny_cpu", "real_gpu")
# Optional: a local checkpoint folder for real_gpu on machines without hub access
# (e.g. the Qwen-shaped random-init checkpoint of `make qwen-shaped-checkpoint`).
ENV_MODEL_ID = env_vars.MODEL_ID
# The verifier every record of the course names (nb04's ``verify_integer_response``), and nb06's workload: the
# record's ``workload.id`` and the prefix of its file name.
VERIFIER_ID = "integer-answer-v1"
WORKLOAD_ID = "pt-grpo-real-model-update"
# The model real_gpu loads by default in nb06 and nb07 (the reference chapter's model).
REAL_GPU_MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"


def model_id_override(model_id: str, environ: Mapping[str, str] | None = None) -> str:
    """``GRPO_MODEL_ID`` when set (a hub id or a local folder), else ``model_id``."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV_MODEL_ID) or model_id


def check_run_mode(run_mode: str) -> str:
    """Return ``run_mode`` if it is one of :data:`RUN_MODES`, else raise ``ValueError`` (Chinese)."""
    if run_mode not in RUN_MODES:
        raise ValueError(f"RUN_MODE 只能是 {' / '.join(RUN_MODES)} 之一，收到 {run_mode!r}")
    return run_mode
