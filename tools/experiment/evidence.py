"""The evidence record on disk and on screen: where a run label's record goes, schema validation, writing (an
invalid record becomes a failure record), and the headline fields and Markdown table the notebook shows."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.experiment.record import mark_failure
from tools.experiment_settings import SCHEMA_PATH, check_run_label
from tools.project_runtime import record_relative_path

RESULTS_KIND = "pt_grpo"  # benchmarks/results/pt_grpo/ (reference records) or benchmarks/results/local/pt_grpo/
# The committed reference records (benchmarks/results/pt_grpo/): every other label is written under the git-ignored
# benchmarks/results/local/pt_grpo/ (tools.project_runtime.record_relative_path).
REFERENCE_RUN_LABELS = ("tiny_cpu_reference",)


def output_relative_path(workload_id: str, run_label: str) -> Path:
    """``benchmarks/results/pt_grpo/{workload_id}_{run_label}.json`` for a committed reference label, else
    ``benchmarks/results/local/pt_grpo/...`` (git-ignored), relative to the course root."""
    return record_relative_path(RESULTS_KIND, workload_id, check_run_label(run_label), REFERENCE_RUN_LABELS)


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def validate_record(record: Mapping[str, Any]) -> None:
    """Raise if ``record`` breaks the schema (jsonschema) or holds a NaN/inf (which JSON cannot carry)."""
    import jsonschema

    from tools.notebook_runtime import schema_validator

    json.dumps(record, allow_nan=False)  # ValueError on NaN / inf anywhere
    errors = sorted(schema_validator(SCHEMA_PATH).iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "<root>"
        raise jsonschema.ValidationError(f"{len(errors)} schema error(s); first at {where}: {first.message}")


def write_record(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Validate, then write atomically with ``save_json``. An invalid record is replaced by a failure
    record at stage ``evidence_validation`` (itself validated) so that a file is always written."""
    from tools.notebook_runtime import save_json

    try:
        validate_record(record)
    except Exception as error:  # the record is broken: say so in the file rather than lose the run
        record = mark_failure(record, "evidence_validation", error)
        validate_record(record)
    save_json(Path(path), record)
    return record


def headline(record: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a reader checks first (used by the notebook's 5.3 cell)."""
    keys = (
        "run_mode",
        "run_label",
        "model",
        "evidence_level",
        "decision",
        "decision_rules",
        "highest_separation_candidate",
        "failure",
    )
    return {key: record.get(key) for key in keys}


CANDIDATE_HEADLINE_KEYS = (
    "candidate_set",
    "group_size",
    "correctness_pass_rate",
    "format_pass_rate",
    "unjudgeable_count",
    "reward_std_mean",
    "nonzero_advantages",
    "zero_variance_guard_passed",
    "policy_separation",
    "noise_margin",
    "scaler_skipped_steps",
    "mean_clip_fraction",
    "median_update_ms",
    "p95_update_ms",
    "peak_memory_metric",
    "peak_allocated_bytes",
    "peak_rss_bytes",
)


def candidate_headlines(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{key: c.get(key) for key in CANDIDATE_HEADLINE_KEYS} for c in record.get("candidates", [])]


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-style Markdown table (cells converted with ``str``; ``|`` escaped)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
