"""The steps of ``benchmarks/gpu_check.sh`` (the one script for whoever has a CUDA card), their runner and its record.

``bash benchmarks/gpu_check.sh`` installs the wheelhouse (``make gpu-wheelhouse``), then runs ``python
tools/device/gpu_steps.py run``: every step of ``STEPS`` in order, each in its own process with a time limit, and
writes one record, ``gpu-check_<label>.json`` (``tools/schemas/gpu-check-v1.json``, validated, written atomically)
under ``benchmarks/results/local/gpu-check/``. ``--dry-run`` prints the steps and checks that everything each step
names exists (files, make targets, pytest selections, Python modules) without running any of them.

The steps: the card's snapshot; the Qwen-shaped random-init checkpoint; the device and dtype tests
(``tests/test_device_*.py``) on ``cuda`` (the device comes from ``tools.env_vars.TEST_DEVICE``); notebook 6's
``real_gpu`` experiment on that checkpoint with the automatic dtype and with fp16 + GradScaler forced, each verified
(``tools/device/gpu_check.py``); lesson 7's ``real_gpu`` preset for two training steps. The record sets the peak
memory and median update time of notebook 6's experiment (the reference chapter's, the seed's) beside the chapter's
figures (``gpu_check.REFERENCE``: 3.29 GB and 76.88 ms for ``expanded_group`` on an RTX 5070 Ti).

Imports only the standard library and ``tools.env_vars`` at module level: ``--dry-run`` runs before the wheelhouse
is installed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import env_vars  # noqa: E402 - after the course root is on sys.path

SCHEMA_VERSION = "gpu-check/v1"
BUDGET_S = 600  # the whole script on one 24-80 GB card, the wheelhouse install included
CHECKPOINT = ".cache/qwen2.5-0.5b-shaped"
HARDWARE_JSON = ".cache/gpu_check_hardware.json"
NB07_JSON = ".cache/gpu_check_nb07.json"
DEVICE_TESTS = "tests/test_device_*.py"
RESULTS_KIND = "gpu-check"


@dataclass(frozen=True)
class Step:
    """One step: ``argv`` (``{python}``, ``{label}``, ``{auto_dtype}`` are filled in when it runs), run from the
    course root with ``env`` added, at most ``timeout_s`` seconds; ``needs``: what it names (``file:``, ``make:``,
    ``pytest:``, ``module:``), which ``--dry-run`` checks; ``after``: the steps it needs to have passed."""

    name: str
    argv: tuple[str, ...]
    timeout_s: int
    needs: tuple[str, ...]
    env: dict = field(default_factory=dict)
    after: tuple[str, ...] = ()
    stdout_to: str | None = None


def _nb06_steps(case: str, force: str, expect_dtype: str, choice: str) -> tuple[Step, Step]:
    """Notebook 6's real_gpu experiment on the checkpoint (``GRPO_REAL_GPU_DTYPE=force``; empty: the card decides),
    then ``gpu_check.py verify`` of its record: dtype ``expect_dtype``, ``dtype_choice`` ``choice``."""
    run = Step(
        f"nb06_{case}",
        ("{python}", "tools/device/gpu_check.py", "run-notebook", "--label", f"{{label}}_{case}"),
        240,
        ("file:solutions/nb06_real_model_grpo.py", "file:tools/device/gpu_check.py"),
        env={env_vars.MODEL_ID: CHECKPOINT, env_vars.REAL_GPU_DTYPE: force},
        after=("checkpoint",),
    )
    verify = Step(
        f"nb06_{case}_verify",
        ("{python}", "tools/device/gpu_check.py", "verify", f"{{nb06_{case}}}", "--expect-dtype", expect_dtype)
        + ("--expect-choice", choice),
        60,
        ("module:tools.grpo_experiment",),
        after=(run.name,),
    )
    return run, verify


STEPS = (
    Step(
        "hardware",
        ("{python}", "tools/device/gpu_check.py", "hardware", "--out", HARDWARE_JSON),
        60,
        ("file:tools/device/gpu_check.py", "module:tools.training_mechanism_runtime"),
    ),
    Step(
        "checkpoint",
        ("{python}", "-m", "tools.tiny_model", "--qwen-shaped", "--out", CHECKPOINT),
        300,
        ("module:tools.tiny_model", "make:qwen-shaped-checkpoint"),
        after=("hardware",),
    ),
    Step(
        "device_tests",
        ("{python}", "-m", "pytest", "-q", "--noconftest", "-p", "no:cacheprovider", DEVICE_TESTS),
        180,
        (f"pytest:{DEVICE_TESTS}", "module:pytest"),
        env={env_vars.TEST_DEVICE: "cuda"},
        after=("hardware",),
    ),
    *_nb06_steps("auto", "", "{auto_dtype}", "auto"),
    *_nb06_steps("fp16", "float16", "float16", "forced"),
    Step(
        "nb07_real_gpu",
        ("{python}", "-m", "tools.cli.online", "--preset-check", "real_gpu", "--model", CHECKPOINT),
        180,
        ("module:tools.cli.online", "file:solutions/nb07_online_grpo.py"),
        after=("checkpoint",),
        stdout_to=NB07_JSON,
    ),
)


# --------------------------------------------------------------------------------------- dry run: what each names
def _make_targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+):", makefile.read_text(encoding="utf-8"), re.M))


def _collects(selection: str, python: str) -> int:
    """How many tests ``pytest --collect-only --noconftest`` finds for ``selection`` (a glob of test files)."""
    files = sorted(glob.glob(str(ROOT / selection)))
    if not files:
        return 0
    done = subprocess.run(
        [python, "-m", "pytest", "--collect-only", "-q", "--noconftest", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return len([line for line in done.stdout.splitlines() if "::" in line]) if done.returncode == 0 else 0


def unmet(step: Step, python: str = sys.executable, root: Path = ROOT, steps=STEPS) -> list[str]:
    """What ``step`` names that does not exist here, as sentences (empty: everything exists)."""
    import importlib.util

    missing = []
    for need in step.needs:
        kind, _, what = need.partition(":")
        if kind == "file":
            ok = (root / what).is_file()
        elif kind == "make":
            ok = what in _make_targets(root / "Makefile")
        elif kind == "module":
            try:
                ok = importlib.util.find_spec(what) is not None
            except ModuleNotFoundError:
                ok = False
        elif kind == "pytest":
            ok = _collects(what, python) > 0
        else:
            raise ValueError(f"{step.name}: unknown kind of need {need!r}")
        if not ok:
            missing.append(f"{step.name}: {kind} {what} does not exist")
    for name in step.after:
        if name not in {s.name for s in steps}:
            missing.append(f"{step.name}: runs after an unknown step {name}")
    return missing


def dry_run(steps=STEPS, python: str = sys.executable) -> int:
    """Print every step (command, environment, time limit, what it names) and check what it names; 1 when
    something is missing."""
    missing = []
    total = 0
    for index, step in enumerate(steps, 1):
        total += step.timeout_s
        print(f"STEP {index} {step.name} (limit {step.timeout_s} s, after {', '.join(step.after) or '-'})")
        env = " ".join(f"{k}={v!r}" for k, v in step.env.items())
        print(
            f"  run: {env + ' ' if env else ''}{' '.join(step.argv)}"
            + (f" > {step.stdout_to}" if step.stdout_to else "")
        )
        print(f"  needs: {' '.join(step.needs)}")
        missing += unmet(step, python, steps=steps)
    print(f"TOTAL {len(steps)} steps, limits add up to {total} s; the script's budget is {BUDGET_S} s")
    for line in missing:
        print(f"MISSING {line}")
    return 1 if missing else 0


# --------------------------------------------------------------------------------------- the run
def _auto_dtype() -> str:
    hardware = json.loads((ROOT / HARDWARE_JSON).read_text(encoding="utf-8"))
    return "bfloat16" if hardware.get("bf16_supported") else "float16"


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


def command(step: Step, fill: dict, python: str) -> list[str]:
    """``step.argv`` with its placeholders filled in and each glob (``tests/test_device_*.py``) expanded to the
    matching files, relative to the course root, as a shell would (no shell runs the steps)."""
    argv = []
    for part in (p.format(python=python, **fill) for p in step.argv):
        matches = sorted(glob.glob(part, root_dir=ROOT)) if any(c in part for c in "*?[") else [part]
        argv += matches or [part]
    return argv


def run_step(step: Step, fill: dict, python: str, timeout_s: float | None = None) -> dict:
    """Run ``step`` with its placeholders filled in, at most ``timeout_s`` (default: its own limit) seconds."""
    argv = command(step, fill, python)
    env = dict(os.environ, **{k: v.format(**fill) for k, v in step.env.items()})
    print(f"[gpu_check] {step.name}: {' '.join(argv)}", flush=True)
    started = time.perf_counter()
    try:
        limit = step.timeout_s if timeout_s is None else timeout_s
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
        status, code, out, err = (
            ("passed" if done.returncode == 0 else "failed"),
            done.returncode,
            done.stdout,
            done.stderr,
        )
    except subprocess.TimeoutExpired as error:
        status, code = "timeout", None
        out = error.stdout.decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
        err = error.stderr.decode() if isinstance(error.stderr, bytes) else (error.stderr or "")
    seconds = time.perf_counter() - started
    if step.stdout_to:
        (ROOT / step.stdout_to).write_text(out, encoding="utf-8")
    print(_tail(out + ("\n" + err if status != "passed" else "")), flush=True)
    print(f"[gpu_check] {step.name}: {status} in {seconds:.1f} s", flush=True)
    return {
        "name": step.name,
        "command": argv,
        "env": {k: v.format(**fill) for k, v in step.env.items()},
        "status": status,
        "returncode": code,
        "seconds": round(seconds, 3),
        "output_tail": _tail(out + "\n" + err, 30),
    }


def seed_comparison(nb06: dict | None) -> list[dict]:
    """Notebook 6's peak memory and median update time per candidate set beside the reference chapter's figures
    (the seed's experiment): this card / the chapter's RTX 5070 Ti, both as measured (other card, random-init
    weights with Qwen2.5's token workload: a comparison of size, not of quality)."""
    from tools.device.gpu_check import REFERENCE

    rows = []
    for index, name in enumerate(("minimal_pair", "expanded_group")):
        c = next((c for c in (nb06 or {}).get("candidates", []) if c.get("candidate_set") == name), {})
        peak = c.get("peak_allocated_bytes")
        ms = c.get("median_update_ms")
        ref_gb, ref_ms = REFERENCE["peak_gb"][index], REFERENCE["median_update_ms"][index]
        rows.append(
            {
                "candidate_set": name,
                "peak_allocated_gb": None if peak is None else round(peak / 1e9, 4),
                "reference_peak_gb": ref_gb,
                "peak_ratio": None if peak is None else round(peak / 1e9 / ref_gb, 4),
                "median_update_ms": ms,
                "reference_median_update_ms": ref_ms,
                "update_time_ratio": None if ms is None else round(ms / ref_ms, 4),
            }
        )
    return rows


def build_record(label: str, results: list[dict], seconds: float, hardware: dict, nb06, nb07, steps=STEPS) -> dict:
    """The gpu-check/v1 record; ``result`` is ``passed`` only when every step of ``steps`` passed within BUDGET_S."""
    from tools.online.record import utc_now

    passed = (
        [r["name"] for r in results] == [s.name for s in steps]
        and all(r["status"] == "passed" for r in results)
        and seconds <= BUDGET_S
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "run_label": label,
        "created_utc": utc_now(),
        "hardware": hardware,
        "budget_seconds": BUDGET_S,
        "total_seconds": round(seconds, 3),
        "steps": results,
        "seed_comparison": seed_comparison(nb06),
        "nb06_dtype": None if nb06 is None else nb06.get("runtime", {}).get("dtype"),
        "nb07_real_gpu": nb07,
        "result": "passed" if passed else "failed",
    }


def record_path(label: str) -> Path:
    from tools.project_runtime import check_run_label, record_relative_path

    return record_relative_path(RESULTS_KIND, RESULTS_KIND, check_run_label(label), ())


def validate_record(record: dict) -> None:
    """Raise ``jsonschema.ValidationError`` when ``record`` breaks ``tools/schemas/gpu-check-v1.json``."""
    import jsonschema

    from tools.notebook_runtime import schema_validator

    validator = schema_validator(ROOT / "tools" / "schemas" / "gpu-check-v1.json")
    if not validator.is_valid(record):
        raise jsonschema.exceptions.best_match(validator.iter_errors(record))


def write_record(record: dict) -> Path:
    """Validate, then write atomically (``tools.notebook_runtime.save_json``) to ``record_path``."""
    from tools.notebook_runtime import save_json

    validate_record(record)
    return save_json(ROOT / record_path(record["run_label"]), record)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run(label: str, python: str, started: float, copy_to: Path | None = None, steps=STEPS) -> int:
    """Run every step (a step whose ``after`` did not pass is recorded as ``skipped``), write the record, print the
    comparison with the chapter; 0 when every step passed within BUDGET_S."""
    from tools.experiment.evidence import output_relative_path
    from tools.experiment_settings import WORKLOAD_ID as NB06_WORKLOAD

    results, status = [], {}
    fill = {"label": label, "auto_dtype": "bfloat16"}
    for case in ("auto", "fp16"):  # where notebook 6 writes the record of RUN_LABEL <label>_<case>
        fill[f"nb06_{case}"] = output_relative_path(NB06_WORKLOAD, f"{label}_{case}").as_posix()
    for stale in (HARDWARE_JSON, NB07_JSON, fill["nb06_auto"], fill["nb06_fp16"]):  # never read an earlier run's
        (ROOT / stale).unlink(missing_ok=True)
    for step in steps:
        blocked = [name for name in step.after if status.get(name) != "passed"]
        left = BUDGET_S - (time.time() - started)
        if blocked or left < 1:
            why = f"{', '.join(blocked)} did not pass" if blocked else f"the {BUDGET_S} s budget is spent"
            results.append(
                {
                    "name": step.name,
                    "command": list(step.argv),
                    "env": dict(step.env),
                    "status": "skipped",
                    "returncode": None,
                    "seconds": 0.0,
                    "output_tail": f"not run: {why}",
                }
            )
            status[step.name] = "skipped"
            continue
        if status.get("hardware") == "passed":
            fill["auto_dtype"] = _auto_dtype()
        result = run_step(step, fill, python, min(step.timeout_s, left))
        results.append(result)
        status[step.name] = result["status"]
    hardware = _read_json(ROOT / HARDWARE_JSON) or {}
    nb06 = _read_json(ROOT / fill["nb06_auto"])
    nb07 = _read_json(ROOT / NB07_JSON)
    record = build_record(label, results, time.time() - started, hardware, nb06, nb07, steps)
    path = write_record(record)
    print(f"[gpu_check] record: {path.relative_to(ROOT)}")
    from tools.device.gpu_check import report_lines

    for case in ("auto", "fp16"):
        nb06_case = _read_json(ROOT / fill[f"nb06_{case}"])
        if nb06_case is not None:
            print("\n".join(report_lines(nb06_case)))
    if copy_to is not None:
        import shutil

        Path(copy_to).mkdir(parents=True, exist_ok=True)
        for source in (
            path,
            ROOT / HARDWARE_JSON,
            ROOT / NB07_JSON,
            ROOT / fill["nb06_auto"],
            ROOT / fill["nb06_fp16"],
        ):
            if source.is_file():
                shutil.copy(source, Path(copy_to) / source.name)
    for row in record["seed_comparison"]:
        print(
            f"[gpu_check] {row['candidate_set']:15s} peak {row['peak_allocated_gb']} GB (chapter {row['reference_peak_gb']} GB)"
            f"   median update {row['median_update_ms']} ms (chapter {row['reference_median_update_ms']} ms)"
        )
    for r in results:
        print(f"[gpu_check] {r['status']:8s} {r['name']} ({r['seconds']:.1f} s)")
    print(f"[gpu_check] total {record['total_seconds']:.0f} s (budget {BUDGET_S} s): {record['result'].upper()}")
    return 0 if record["result"] == "passed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/device/gpu_steps.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dry-run", help="print the steps and check what they name; run nothing")
    go = sub.add_parser("run", help="run every step and write the record")
    go.add_argument("--label", default="gpu_check")
    go.add_argument("--started", type=float, default=None, help="the script's start (epoch seconds)")
    go.add_argument("--copy-to", type=Path, default=None, help="copy the record and the steps' files there")
    args = parser.parse_args(argv)
    if args.command == "dry-run":
        return dry_run()
    return run(args.label, sys.executable, args.started or time.time(), args.copy_to)


if __name__ == "__main__":
    raise SystemExit(main())
