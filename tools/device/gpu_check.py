"""Notebook 6 on the device for ``benchmarks/gpu_check.sh`` (its steps: ``tools/device/gpu_steps.py``;
tests/test_gpu_check.py tests both).

Subcommands:

* ``hardware --out FILE``: the card's snapshot (``cuda_hardware_snapshot``), printed and written to ``FILE``.
* ``run-notebook --label L``: execute notebook 6 (``solutions/nb06_real_model_grpo.py``, its code cells in
  order, in this process) with ``RUN_MODE=real_gpu``. The environment says which checkpoint
  (``GRPO_MODEL_ID``) and dtype (``GRPO_REAL_GPU_DTYPE``). Not run: the generated bootstrap cell (it
  installs the PT-RL-CUDA profile from the network and prints the preflight: the device is offline and
  gets its packages from the wheelhouse) and the figure cell (matplotlib is not in the wheelhouse).
  Everything else - the experiment cell, the schema check, the reading cells - is the notebook's code.
* ``verify RECORD... --expect-dtype D --expect-choice C``: schema validation plus the check's invariants.
* ``report RECORD...``: the key figures beside the reference document's.

Exit status of ``verify``: 0 all invariants hold, 1 otherwise (each failure is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NOTEBOOK = ROOT / "solutions" / "nb06_real_model_grpo.py"
# r = 8 on q_proj (896 -> 896) and v_proj (896 -> 128) of Qwen2.5-0.5B's 24 layers:
# 24 * ((8*896 + 896*8) + (8*896 + 128*8)) = 540,672.
EXPECTED_LORA_PARAMETERS = 540_672
# [B, T] of the two candidate sets with Qwen2.5's chat template and token counts (tools.tiny_model).
QWEN25_SHAPES = [(4, 44), (8, 49)]
# What one candidate set may leave allocated when the next one starts: its batch and advantages only.
LEFTOVER_LIMIT_BYTES = 16 * 2**20
# The reference document's figures (RTX 5070 Ti, workload v3, label default3, Qwen2.5-0.5B-Instruct),
# as notebook 6 quotes them: minimal_pair / expanded_group.
REFERENCE = {
    "policy_separation": (1.476, 1.731),
    "mean_clip_fraction": (0.438, 0.594),
    "median_update_ms": (47.58, 76.88),
    "peak_gb": (2.16, 3.29),
}


# --------------------------------------------------------------------------------------- notebook
def code_cells(path: Path = NOTEBOOK) -> list[str]:
    """The code cells of a jupytext percent file, in order (markdown cells and the header dropped)."""
    return [source for _, source in _code_cells(path)]


def _code_cells(path: Path) -> list[tuple[str, str]]:
    """(the ``# %%`` header line, the source) of every non-empty code cell of a jupytext percent file."""
    cells, current, header = [], None, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# %%"):
            if current is not None and "[markdown]" not in header:
                cells.append((header, "\n".join(current).strip("\n")))
            header, current = line, []
            continue
        if current is not None:
            current.append(line)
    if current is not None and "[markdown]" not in header:
        cells.append((header, "\n".join(current).strip("\n")))
    return [(header, source) for header, source in cells if source.strip()]


def run_notebook(label: str) -> int:
    """Execute notebook 6's code cells for ``RUN_MODE=real_gpu``; 0 when every cell ran (the record may
    still be a failure record: ``verify`` judges it). The run mode and label are set as papermill does: an
    injected cell right after the cell tagged ``parameters``."""
    cells = _code_cells(NOTEBOOK)
    if not any('"parameters"' in header for header, _ in cells):
        raise RuntimeError(f"{NOTEBOOK.name} has no cell tagged parameters: RUN_MODE / RUN_LABEL cannot be set")
    os.chdir(ROOT)
    namespace: dict = {"__name__": "__main__"}
    for index, (header, source) in enumerate(cells):
        if "import matplotlib" in source:
            print(f"[gpu_check] cell {index}: figure cell skipped (matplotlib is not in the device wheelhouse)")
            continue
        print(f"[gpu_check] cell {index}: running", flush=True)
        exec(compile(source, f"nb06 code cell {index}", "exec"), namespace)  # noqa: S102 - the notebook's own code
        if '"parameters"' in header:
            exec(f"RUN_MODE = 'real_gpu'\nRUN_LABEL = {label!r}", namespace)  # noqa: S102 - injected parameters
    return 0


# --------------------------------------------------------------------------------------- invariants
def check_record(record: dict, expect_dtype: str, expect_choice: str) -> list[str]:
    """Every broken invariant of one device record, as a sentence (empty: all hold)."""
    from tools import grpo_experiment as gx

    problems = []
    try:
        gx.validate_record(record)
    except Exception as error:  # jsonschema.ValidationError or ValueError (NaN)
        problems.append(f"schema: {error}")
    if record.get("failure") is not None:
        failure = record["failure"]
        problems.append(
            f"failure record: stage {failure.get('stage')}: {failure.get('error_type')}: {failure.get('message')}"
        )
        return problems
    runtime = record.get("runtime", {})
    if record.get("run_mode") != "real_gpu" or runtime.get("device") != "cuda":
        problems.append(f"not a CUDA real_gpu run: run_mode={record.get('run_mode')} device={runtime.get('device')}")
    if runtime.get("dtype") != expect_dtype:
        problems.append(f"dtype {runtime.get('dtype')} (expected {expect_dtype})")
    if runtime.get("grad_scaler") != (expect_dtype == "float16"):
        problems.append(
            f"grad_scaler {runtime.get('grad_scaler')} with dtype {runtime.get('dtype')} "
            "(fp16 needs the GradScaler, bf16 must not use it)"
        )
    if runtime.get("dtype_choice") != expect_choice:
        problems.append(f"dtype_choice {runtime.get('dtype_choice')} (expected {expect_choice})")
    if record.get("model", {}).get("weights") != "random_init":
        problems.append(f"weights {record.get('model', {}).get('weights')} (the check uses the random-init checkpoint)")
    if record.get("decision") not in gx.RANDOM_INIT_DECISIONS:
        problems.append(f"decision {record.get('decision')} is not in the random-init vocabulary")
    names = [c.get("candidate_set") for c in record.get("candidates", [])]
    if names != ["minimal_pair", "expanded_group"]:
        problems.append(f"candidate sets {names} (expected minimal_pair, expanded_group)")
    for c in record.get("candidates", []):
        name = c.get("candidate_set")
        if c.get("trainable_parameters") != EXPECTED_LORA_PARAMETERS:
            problems.append(
                f"{name}: {c.get('trainable_parameters')} trainable LoRA parameters "
                f"(expected {EXPECTED_LORA_PARAMETERS:,} for r=8 on q_proj/v_proj over 24 layers)"
            )
        if len(c.get("losses") or []) != record["workload"]["update_steps"]:
            problems.append(
                f"{name}: {len(c.get('losses') or [])} effective steps (expected {record['workload']['update_steps']})"
            )
        if expect_dtype != "float16" and c.get("scaler_skipped_steps") not in (0, None):
            problems.append(f"{name}: {c.get('scaler_skipped_steps')} scaler skips without a scaler")
        leftover = c.get("allocated_bytes_at_start")
        if not isinstance(leftover, int) or leftover > LEFTOVER_LIMIT_BYTES:
            problems.append(
                f"{name}: {leftover} bytes allocated when the candidate set started "
                f"(the previous set's model and optimizer were not freed; limit {LEFTOVER_LIMIT_BYTES})"
            )
    shapes = [tuple(s["input_ids_shape"]) for s in (record.get("workload", {}).get("batch_shapes") or [])]
    if shapes and shapes != QWEN25_SHAPES:
        problems.append(f"batch shapes {shapes}: not the Qwen2.5-like token workload [(4, 44), (8, 49)]")
    return problems


def verify(paths: list[Path], expect_dtype: str, expect_choice: str) -> int:
    status = 0
    for path in paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        problems = check_record(record, expect_dtype, expect_choice)
        print(f"[gpu_check] {path}: " + ("all invariants hold" if not problems else f"{len(problems)} problem(s)"))
        for problem in problems:
            print(f"    - {problem}")
        status = status or (1 if problems else 0)
    return status


# --------------------------------------------------------------------------------------- report
def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report_lines(record: dict) -> list[str]:
    """The record's key figures beside the reference document's (with the comparability label)."""
    cands = record.get("candidates", [])
    runtime = record.get("runtime", {})
    hardware = record.get("hardware", {})
    weights = record.get("model", {}).get("weights")
    random_init = weights == "random_init"
    lines = [
        f"record   : {record.get('run_label')}  ({record.get('run_mode')}, {record.get('evidence_level')}, "
        f"decision {record.get('decision')})",
        f"hardware : {hardware.get('gpu_name', hardware.get('cpu', '?'))}  capability "
        f"{hardware.get('compute_capability', '-')}  bf16 native {hardware.get('bf16_supported', '-')}  "
        f"torch {hardware.get('torch')}  CUDA {hardware.get('cuda_runtime', '-')}  driver {hardware.get('driver_version', '-')}",
        f"runtime  : dtype {runtime.get('dtype')} ({runtime.get('dtype_choice')})  grad_scaler {runtime.get('grad_scaler')}  "
        f"weights {weights}",
    ]
    for shape in record.get("workload", {}).get("batch_shapes") or []:
        lines.append(
            f"workload : {shape['candidate_set']:15s} [B, T] = {shape['input_ids_shape']}  "
            f"response tokens {shape['response_tokens_total']}  tokenizer {record['workload']['tokenizer_hash'][:12]}"
        )
    if record.get("decision_rules"):
        rules = record["decision_rules"]
        lines.append(
            f"rules    : course (separation > noise margin) {rules['course_rule']['passed']}; "
            f"reference (separation > 0) {rules['reference_rule']['passed']}"
        )
    behaviour = (
        "NOT COMPARABLE (random-init weights)" if random_init else "comparable in kind (other card, same workload)"
    )
    shapes = [tuple(s["input_ids_shape"]) for s in record.get("workload", {}).get("batch_shapes") or []]
    if not random_init:
        resources = "other card and code path"
    elif shapes == QWEN25_SHAPES:
        resources = "Qwen2.5's token counts (estimated); other card and code path"
    else:
        resources = f"NOT COMPARABLE (token workload {shapes}, not Qwen2.5's)"
    header = f"{'figure':22s} {'this run (minimal / expanded)':32s} {'reference (RTX 5070 Ti)':26s} comparability"
    lines += [header, "-" * len(header)]

    def pair(key, spec, scale=1.0):
        return " / ".join(
            _fmt(None if c.get(key) is None else (c[key] * scale if scale != 1.0 else c[key]), spec) for c in cands
        )

    def ref(key, spec):
        return " / ".join(format(v, spec) for v in REFERENCE[key])

    rows = [
        ("policy_separation", pair("policy_separation", ".3f"), ref("policy_separation", ".3f"), behaviour),
        (
            "precision_logprob_gap",
            pair("precision_logprob_gap", ".2g"),
            "- (not recorded)",
            "bf16/fp16 rounding vs float32",
        ),
        ("noise_margin", pair("noise_margin", ".2g"), "- (not recorded)", "course's decision threshold"),
        ("mean_clip_fraction", pair("mean_clip_fraction", ".3f"), ref("mean_clip_fraction", ".3f"), behaviour),
        ("scaler_skipped_steps", pair("scaler_skipped_steps", "d"), "-", "fp16 only"),
        ("median_update_ms", pair("median_update_ms", ".2f"), ref("median_update_ms", ".2f"), resources),
        ("peak_allocated_GB", pair("peak_allocated_bytes", ".2f", 1e-9), ref("peak_gb", ".2f"), resources),
        ("left_at_start_MiB", pair("allocated_bytes_at_start", ".1f", 2**-20), "-", "0 = nothing left between sets"),
    ]
    lines += [f"{name:22s} {now:32s} {reference:26s} {label}" for name, now, reference, label in rows]
    return lines


def report(paths: list[Path]) -> int:
    for path in paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        print("\n".join(report_lines(record)))
        print()
    return 0


def hardware(out: Path) -> int:
    """The card's snapshot, printed and written to ``out``; 1 without CUDA."""
    from tools.training_mechanism_runtime import cuda_hardware_snapshot

    snapshot = cuda_hardware_snapshot()
    print("[gpu_check] hardware:", json.dumps(snapshot))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(snapshot, indent=2) + "\n", encoding="utf-8")
    return 0 if snapshot.get("cuda_available") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/device/gpu_check.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    hw = sub.add_parser("hardware")
    hw.add_argument("--out", required=True, type=Path)
    run = sub.add_parser("run-notebook")
    run.add_argument("--label", required=True)
    ver = sub.add_parser("verify")
    ver.add_argument("records", nargs="+", type=Path)
    ver.add_argument("--expect-dtype", required=True, choices=["bfloat16", "float16"])
    ver.add_argument("--expect-choice", required=True, choices=["auto", "forced"])
    rep = sub.add_parser("report")
    rep.add_argument("records", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "hardware":
        return hardware(args.out)
    if args.command == "run-notebook":
        return run_notebook(args.label)
    if args.command == "verify":
        return verify(args.records, args.expect_dtype, args.expect_choice)
    return report(args.records)


if __name__ == "__main__":
    raise SystemExit(main())
