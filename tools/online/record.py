"""Where lesson 7's records live and what they hold besides the run: the course root, the record paths (committed
reference labels under RESULTS_DIR, every other label under the git-ignored local folder), the hardware and framework
snapshot, and the validated read and write of the two evidence files - one run's record
(``tools/schemas/online-grpo-v2.json``) and a multi-seed summary (``tools/schemas/online-grpo-seeds-v2.json``).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from tools.project_runtime import check_run_label, record_relative_path, resolve_project_root

SCHEMA_VERSION = "online-grpo/v2"
WORKLOAD_ID = "online-grpo"
SEEDS_SCHEMA_VERSION = "online-grpo-seeds/v2"
SEEDS_WORKLOAD_ID = "online-grpo-seeds"
RESULTS_KIND = "online"  # benchmarks/results/online/ (reference labels) or benchmarks/results/local/online/ (others)
RESULTS_DIR = Path("benchmarks") / "results" / RESULTS_KIND
_SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"
_SCHEMAS = {"record": "online-grpo-v2.json", "seeds": "online-grpo-seeds-v2.json"}  # under _SCHEMAS_DIR

# (name, RUN_LABEL, extra `make online` arguments) of the ablation records the lesson reads and plots.
ABLATIONS = [
    ("主实验（μ=1, grpo, ε_high=0.2）", "reference", ""),
    ("μ = 4", "mu4", "--num-iterations 4"),
    ("loss_type = dr_grpo", "dr_grpo", "--loss-type dr_grpo"),
    ("loss_type = dapo", "dapo", "--loss-type dapo"),
    ("β = 0.04（到热启动的 KL，use_bias_correction_kl=True）", "beta", "--beta 0.04"),
    ("μ = 4, ε_high = 0.28（clip-higher；对照 μ = 4）", "mu4_clip_higher", "--num-iterations 4 --epsilon-high 0.28"),
    ("奖励投机：起点有时列出三个数，包含即得分", "loophole", "--warm-start sft-list --reward contains-answer-loophole"),
    ("同一起点，严格验证器（修复后的奖励）", "loophole_fixed", "--warm-start sft-list"),
]


# The labels of the committed records (the ablations above, the multi-seed summary and GRPOTrainer's): only these
# are written under RESULTS_DIR.
SEEDS_REFERENCE_LABEL = "reference"
TRL_SEEDS_LABEL = "trl"  # the committed multi-seed record of GRPOTrainer on the lesson's task (`--trainer trl`)
REFERENCE_LABELS = frozenset(label for _, label, _ in ABLATIONS) | {SEEDS_REFERENCE_LABEL, TRL_SEEDS_LABEL}


def resolve_root() -> Path:
    """The course root: the folder holding ``course.toml`` above this package (``.cache/`` and the records live
    there)."""
    return resolve_project_root(Path(__file__).resolve().parent)


def output_relative_path(label: str, workload: str = WORKLOAD_ID, seed: int | None = None) -> Path:
    """Where the record of ``label`` lives: the committed reference labels (REFERENCE_LABELS) under RESULTS_DIR,
    every other label (a learner's run, a test's scratch run) under the git-ignored local folder
    (``tools.project_runtime.record_relative_path``). ``seed``: one seed's record of a multi-seed run
    (``<workload>_<label>_seed<k>.json``)."""
    name = check_run_label(label) if seed is None else f"{label}_seed{int(seed)}"
    return record_relative_path(RESULTS_KIND, workload, name, (name,) if label in REFERENCE_LABELS else ())


def seeds_summary_path(label: str) -> Path:
    return output_relative_path(label, SEEDS_WORKLOAD_ID)


def load_average() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return [0.0, 0.0, 0.0]


def hardware_snapshot() -> dict:
    import torch

    return {
        "cpu_count": os.cpu_count() or 1,
        "torch_threads": torch.get_num_threads(),
        "load_average_before": load_average(),
        "load_average_after": load_average(),
        "cuda_available": bool(torch.cuda.is_available()),
        "platform": platform.platform(),
    }


def framework_versions() -> dict:
    import torch

    from tools.notebook_runtime import package_version

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": package_version("transformers"),
        "trl": package_version("trl"),
    }


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _validate(instance, schema_name: str) -> None:
    """Raise ``jsonschema.ValidationError`` (the most relevant error, as ``jsonschema.validate`` picks it) when
    ``instance`` breaks the schema ``schema_name``."""
    import jsonschema

    from tools.notebook_runtime import schema_validator

    validator = schema_validator(_SCHEMAS_DIR / _SCHEMAS[schema_name])
    if not validator.is_valid(instance):
        raise jsonschema.exceptions.best_match(validator.iter_errors(instance))


def validate_record(record) -> None:
    _validate(record, "record")


def validate_seeds_summary(summary) -> None:
    _validate(summary, "seeds")


_VALID_TEXTS: set[tuple[str, str]] = set()  # (schema name, sha256 of a file's text) that validated in this process


def read_validated(path, schema_name: str = "record") -> dict:
    """The JSON file ``path``, parsed, after it validates against ``schema_name`` ("record" or "seeds"). Its text's
    sha256 is remembered: the same bytes read again are parsed but not validated again (the lesson reads each
    committed record a few times)."""
    import hashlib

    text = Path(path).read_text(encoding="utf-8")
    value = json.loads(text)
    key = (schema_name, hashlib.sha256(text.encode("utf-8")).hexdigest())
    if key not in _VALID_TEXTS:
        _validate(value, schema_name)
        _VALID_TEXTS.add(key)
    return value


def write_record(path, record) -> Path:
    """Validate against the schema, then write atomically (tools.notebook_runtime.save_json)."""
    from tools.notebook_runtime import save_json

    validate_record(record)
    return save_json(path, record)


def write_seeds_summary(path, summary) -> Path:
    from tools.notebook_runtime import save_json

    validate_seeds_summary(summary)
    return save_json(path, summary)


def load_seeds_summary(root, label: str):
    """The validated multi-seed summary of ``label``, or None when there is none."""
    path = Path(root) / seeds_summary_path(label)
    if not path.exists():
        return None
    return read_validated(path, "seeds")


def load_seed_records(root, label: str) -> list[dict]:
    """The per-seed records of the multi-seed run ``label`` (those its summary lists), validated."""
    summary = load_seeds_summary(root, label)
    if summary is None:
        return []
    records = []
    for entry in summary["seeds"]:
        path = Path(root) / output_relative_path(label, seed=entry["seed"])
        records.append(read_validated(path))
    return records


def load_records(root, labels) -> dict:
    """{label: record} for the labels whose record exists and validates: the single run's, else seed 0's of the
    multi-seed run (the committed ablations keep only their seeds' records)."""
    out = {}
    for label in labels:
        path = Path(root) / output_relative_path(label)
        if not path.exists():
            path = Path(root) / output_relative_path(label, seed=0)
        if path.exists():
            out[label] = read_validated(path)
    return out
