"""``make test`` / ``make test-fast`` / ``make test-integration``: run pytest, time it, keep the timing as a record.

The measurement lives in a git-ignored record, never in prose: each run appends one entry (target, commit, machine,
wall and busy-CPU seconds, pytest's outcome counts, exit status) to ``benchmarks/results/local/tests/test-runs.json``
(the last ``KEEP`` runs; schema ``tools/schemas/test-runs-v1.json``, written atomically) and prints it. The budget
each target aims at is stated once, in README.md.

    python -m tools.cli.testrun --target test -- -q -n 2 -m "not integration" tests
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from tools.notebook_runtime import save_json, schema_validator
from tools.project_runtime import LOCAL_RESULTS_RELATIVE_DIR, resolve_project_root
from tools.training_mechanism_runtime import cpu_model_name

RECORD_RELATIVE = LOCAL_RESULTS_RELATIVE_DIR / "tests" / "test-runs.json"
SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "test-runs-v1.json"
KEEP = 50  # runs kept in the record, newest last
OUTCOMES = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)\b")


def outcome_counts(output: str) -> dict[str, int]:
    """pytest's final summary line (``== 3 failed, 490 passed, 3 skipped in 300.1s ==``) as counts."""
    summary = ""
    for line in output.splitlines():
        if " in " in line and OUTCOMES.search(line):
            summary = line
    counts: dict[str, int] = {}
    for number, word in OUTCOMES.findall(summary):
        key = {"error": "errors", "warning": "warnings"}.get(word, word)
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def _git_commit(root: Path) -> str | None:
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "-uno"], capture_output=True)
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.decode().strip() + ("+dirty" if dirty.stdout.strip() else "")


def _busy_cpu_seconds() -> float | None:
    """Machine-wide busy CPU seconds so far (``/proc/stat``: all but idle and iowait), or None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields]
    return (sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)) / os.sysconf("SC_CLK_TCK")


def run_pytest(args: list[str], root: Path) -> tuple[int, str, float, float | None]:
    """Run ``python -m pytest *args`` in ``root``, echoing its output; (exit status, output, wall s, busy CPU s)."""
    busy0, start = _busy_cpu_seconds(), time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    chunks = []
    assert process.stdout is not None
    for raw in iter(process.stdout.readline, b""):
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        chunks.append(raw.decode("utf-8", "replace"))
    status = process.wait()
    wall = time.monotonic() - start
    busy1 = _busy_cpu_seconds()
    busy = None if busy0 is None or busy1 is None else busy1 - busy0
    return status, "".join(chunks), wall, busy


def entry(target: str, status: int, output: str, wall: float, busy: float | None, root: Path) -> dict:
    return {
        "target": target,
        "finished_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _git_commit(root),
        "cpu": cpu_model_name() or None,
        "cores": os.cpu_count(),
        "wall_s": round(wall, 1),
        "busy_cpu_s": None if busy is None else round(busy, 1),
        "exit_status": status,
        "outcomes": outcome_counts(output),
    }


def append_record(path: Path, new: dict) -> dict:
    """The record at ``path`` with ``new`` appended, validated and written atomically. A record that is not JSON
    or not this schema is kept beside it as ``<name>.invalid`` and a new one started."""
    runs: list = []
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
            schema_validator(SCHEMA).validate(old)
            runs = old["runs"]
        except Exception:  # noqa: BLE001 - not JSON or not this schema: keep it aside, start afresh
            path.replace(path.with_name(path.name + ".invalid"))
    record = {"schema_version": "test-runs/v1", "runs": [*runs, new][-KEEP:]}
    schema_validator(SCHEMA).validate(record)
    save_json(path, record)
    return record


def summary_line(run: dict, path: Path) -> str:
    busy = "" if run["busy_cpu_s"] is None else f", {run['busy_cpu_s']:.0f} busy CPU-s"
    counts = ", ".join(f"{n} {k}" for k, n in run["outcomes"].items()) or "no pytest summary"
    return (
        f"[test] make {run['target']}: {run['wall_s']:.0f} s wall{busy} on {run['cores']} cores; {counts}; "
        f"exit {run['exit_status']} (record: {path})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the make target being timed (test, test-fast, ...)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then pytest's arguments")
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    root = resolve_project_root()
    status, output, wall, busy = run_pytest(pytest_args, root)
    run = entry(args.target, status, output, wall, busy, root)
    path = root / RECORD_RELATIVE
    try:
        append_record(path, run)
    except OSError as error:  # a read-only checkout still gets its test result
        print(f"[test] could not write the timing record {path}: {error}", file=sys.stderr)
    print(summary_line(run, path.relative_to(root)))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
