"""Benchmarks of the course's code against baselines measured in the same run.

    python benchmarks/run.py                # full run, writes benchmarks/results/latest.json
    python benchmarks/run.py --tiny         # every benchmark once at tiny sizes (used by the tests)
    python benchmarks/run.py --only NAME    # one benchmark group (repeatable), see --help
    python benchmarks/run.py --readme-table [--write | --check]   # the README's table of the committed results

Every figure is a ratio against (or is reported next to) a baseline timed in this process, in this run,
on this machine: medians of repeats. Results: ``{"machine": {...}, "metrics": [{"name", "value", "unit",
"baseline", "detail"}]}``. A metric whose dependency is missing from the checkout reports ``value: null``
and ``detail.status: "not available: <reason>"``. See benchmarks/README.md for what each number means.

This file is the harness: the groups (one module each, ``BENCHMARKS``), the run, the result file and the
command line; ``benchmarks/harness.py`` holds what the groups share.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import notebooks  # noqa: E402
from benchmarks.grading import bench_autograde, bench_autograde_class, bench_autograde_vs_floor  # noqa: E402
from benchmarks.group_advantages import bench_group_advantages  # noqa: E402
from benchmarks.grpo_loss import bench_grpo_loss  # noqa: E402
from benchmarks.harness import RESULTS  # noqa: E402
from benchmarks.logprobs import bench_logprobs, logprobs_worker  # noqa: E402
from benchmarks.logprobs_bf16 import bench_logprobs_bf16  # noqa: E402
from benchmarks.machine import machine  # noqa: E402
from benchmarks.report import LATEST, markdown_table, readme_table_command, table  # noqa: E402

BENCHMARKS = {
    "group_advantages": bench_group_advantages,
    "logprobs": bench_logprobs,
    "logprobs_bf16": bench_logprobs_bf16,
    "grpo_loss": bench_grpo_loss,
    "autograde": bench_autograde,
    "autograde_floor": bench_autograde_vs_floor,
    "autograde_class": bench_autograde_class,
    "series": notebooks.bench_series,
}


def run(tiny: bool, only: list[str] | None = None, threads: int = 1) -> dict:
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    results = {"machine": machine(), "mode": "tiny" if tiny else "full", "metrics": []}
    for key, bench in BENCHMARKS.items():
        if only and key not in only:
            continue
        started = time.perf_counter()
        produced = bench(tiny)
        elapsed = time.perf_counter() - started
        for m in produced:
            m["detail"].setdefault("bench_wall_s", round(elapsed, 2))
            if tiny and "goal_met" in m["detail"]:  # tiny sizes check that the code runs, they claim nothing
                m["detail"]["goal_met"] = None
        results["metrics"].extend(produced)
        print(f"[bench] {key}: {elapsed:.1f} s", file=sys.stderr, flush=True)
    if hasattr(os, "getloadavg"):
        results["machine"]["load_average_at_end"] = list(os.getloadavg())
    return results


def save(results: dict, path: Path) -> None:
    try:
        from tools.notebook_runtime import save_json
    except ImportError:  # pragma: no cover - the runtime ships with the course
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return
    save_json(path, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="every benchmark once at tiny sizes (no timing claim)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only this group")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result file (default: benchmarks/results/latest.json for a full run, none for --tiny)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for the tensor benchmarks (default 1: stable ratios on a shared "
        "machine; 0 = torch's default). Notebooks and grading kernels keep their own setting.",
    )
    parser.add_argument(
        "--released-course",
        type=Path,
        default=None,
        metavar="COURSE",
        help="autograde: copy this released course (e.g. the tests' shared one) instead of releasing",
    )
    parser.add_argument(
        "--series-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="series: read <assignment>.json ({notebook, seconds}: an execution of the solution "
        "made in this test run) instead of executing the solution again",
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        metavar="RESULTS",
        help="print the markdown table of a results file and exit (for the README)",
    )
    parser.add_argument(
        "--logprobs-worker", nargs=5, metavar=("VARIANT", "B", "T", "V", "REPEATS"), help=argparse.SUPPRESS
    )
    readme = parser.add_argument_group("the table of figures in benchmarks/README.md (from benchmarks/results/*.json)")
    readme.add_argument("--readme-table", action="store_true", help="print the table and exit")
    readme.add_argument("--write", action="store_true", help="with --readme-table: write it into the README")
    readme.add_argument("--check", action="store_true", help="with --readme-table: exit 1 when the README's is stale")
    args = parser.parse_args(argv)
    if (args.write or args.check) and not args.readme_table:
        parser.error("--write and --check go with --readme-table")
    if args.readme_table:
        return readme_table_command(write=args.write, check=args.check)
    if args.logprobs_worker:
        variants, *numbers = args.logprobs_worker
        print(json.dumps({variant: logprobs_worker(variant, *map(int, numbers)) for variant in variants.split(",")}))
        return 0
    if args.markdown:
        print(markdown_table(json.loads(args.markdown.read_text(encoding="utf-8"))))
        return 0
    notebooks.configure(args.released_course, args.series_from)
    results = run(args.tiny, args.only, threads=args.threads)
    print(table(results))
    out = args.out if args.out is not None else (None if args.tiny else RESULTS / LATEST)
    if out is not None:
        save(results, out)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
