"""Run the final experiment notebook headless: ``python -m tools.cli.experiment --mode MODE --label LABEL``.

``make experiment RUN_MODE=... RUN_LABEL=...`` calls this. It builds the notebook from
``solutions/nb06_real_model_grpo.py`` with the course chain (the same notebook learners get: it has no
TODO cells), sets ``RUN_MODE`` / ``RUN_LABEL`` the papermill way - an ``injected-parameters`` cell after the
cell tagged ``parameters``, the notebook's only headless override (``tools.chain.notebooks.parameterize``) - and
executes it with nbclient (``tools.chain.notebooks.execute``: a per-cell progress bar, the kernel over IPC).
``--model-id`` (environment variable ``GRPO_MODEL_ID``) points ``real_gpu`` at a local checkpoint
folder, e.g. ``.cache/qwen2.5-0.5b-shaped`` from ``make qwen-shaped-checkpoint``.

Evidence: ``benchmarks/results/local/pt_grpo/pt-grpo-real-model-update_<LABEL>.json`` (git-ignored; the committed
reference label ``tiny_cpu_reference`` goes to ``benchmarks/results/pt_grpo/``: ``gx.output_relative_path``); the
executed notebook is kept under ``artifacts/experiment/``.

Exit status: 0 - the notebook ran and wrote a record without failure; 1 - a notebook cell raised (or no
fresh record was written); 2 - the notebook ran and wrote a *failure record* (e.g. ``real_gpu`` without
CUDA): the evidence file says which stage failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# No torch here: the arguments are checked before anything imports torch (a bad RUN_MODE is reported in well under
# a second), with the experiment's own checks (tools.experiment_settings, which tools.grpo_experiment re-exports).
from tools.experiment_settings import ENV_MODEL_ID, RUN_MODES, WORKLOAD_ID, check_run_label, check_run_mode

ASSIGNMENT = "nb06_real_model_grpo"


def _root() -> Path:
    from tools.project_runtime import resolve_project_root

    return resolve_project_root(Path(__file__).resolve().parent)


def run(
    mode: str,
    label: str,
    model_id: str | None = None,
    timeout: int = 1800,
    executed_dir: Path | None = None,
    progress: bool | None = None,
) -> tuple[int, Path, dict | None]:
    """Build and execute the notebook; return ``(exit status, evidence path, record or None)``."""
    import nbformat

    import tools.chain.notebooks as chain
    from tools import grpo_experiment as gx

    root = _root()
    evidence = root / gx.output_relative_path(WORKLOAD_ID, label)  # the notebook checks the mode (ValueError: exit 1)
    source_path = chain.COURSE / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    chain.write_notebook(chain.build_notebook(ASSIGNMENT), source_path)

    env: dict[str, str] = {}
    if model_id:
        local = Path(model_id).expanduser()
        env[ENV_MODEL_ID] = str(local.resolve()) if local.is_dir() else model_id
    before = evidence.stat().st_mtime_ns if evidence.exists() else None
    started = time.perf_counter()
    executed = chain.execute(
        nbformat.read(source_path, as_version=4),
        source_path.parent,
        timeout=timeout,
        env=env,
        progress=progress,
        desc=f"{ASSIGNMENT} {mode}",
        parameters={"RUN_MODE": mode, "RUN_LABEL": label},
    )
    seconds = time.perf_counter() - started

    executed_dir = executed_dir or root / "artifacts" / "experiment"
    saved_nb = executed_dir / f"{ASSIGNMENT}_{label}.ipynb"
    chain.write_notebook(executed, saved_nb)

    print(
        f"notebook : {source_path.relative_to(root)} executed in {seconds:.1f} s "
        f"(kernel start included), RUN_MODE={mode} RUN_LABEL={label}"
    )
    print(f"executed : {_rel(saved_nb, root)}")
    errors = chain.cell_errors(executed)
    fresh = evidence.exists() and evidence.stat().st_mtime_ns != before
    record = json.loads(evidence.read_text(encoding="utf-8")) if fresh else None
    if errors:
        index, _, ename, evalue = errors[0]
        print(f"FAILED   : cell {index} raised {ename}: {evalue[:500]}", file=sys.stderr)
        return 1, evidence, record
    if record is None:
        print(f"FAILED   : the notebook did not write {_rel(evidence, root)}", file=sys.stderr)
        return 1, evidence, None
    print(f"evidence : {_rel(evidence, root)}")
    print(f"level    : {record['evidence_level']}   decision: {record['decision']}")
    for row in gx.candidate_headlines(record):
        sep = row["policy_separation"]
        clip = row["mean_clip_fraction"]
        print(
            f"  {row['candidate_set']:15s} G={row['group_size']}  nonzero_advantages={row['nonzero_advantages']}  "
            f"unjudgeable={row['unjudgeable_count']}  zero_variance_guard={row['zero_variance_guard_passed']}  "
            f"separation={'-' if sep is None else f'{sep:.4f}'}  "
            f"mean_clip_fraction={'-' if clip is None else f'{clip:.3f}'}"
        )
    if record["failure"] is not None:
        failure = record["failure"]
        print(
            f"FAILURE  : stage {failure['stage']}: {failure.get('error_type')}: {failure.get('message')}",
            file=sys.stderr,
        )
        return 2, evidence, record
    return 0, evidence, record


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _argument(check):
    """An argparse ``type`` from a check that raises ``ValueError``: argparse prints its Chinese message, exit 2."""

    def convert(text: str) -> str:
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = check.__name__
    return convert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cli.experiment",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 ok, 1 notebook error, 2 failure record written",
    )
    parser.add_argument(
        "--mode",
        default="dry_run",
        type=_argument(check_run_mode),
        metavar="{" + ",".join(RUN_MODES) + "}",
        help="RUN_MODE (default dry_run)",
    )
    parser.add_argument(
        "--label", default="default", type=_argument(check_run_label), help="RUN_LABEL: part of the evidence file name"
    )
    parser.add_argument(
        "--model-id",
        default=os.environ.get(ENV_MODEL_ID) or None,
        help="real_gpu: hub id or local checkpoint folder (default: the notebook's "
        "Qwen/Qwen2.5-0.5B-Instruct; env GRPO_MODEL_ID)",
    )
    parser.add_argument("--timeout", type=int, default=1800, help="per-cell timeout in seconds")
    parser.add_argument("--no-progress", action="store_true", help="no per-cell progress bar on stderr")
    args = parser.parse_args(argv)  # exits with status 2 and the Chinese message: torch is not imported yet
    status, _, _ = run(
        args.mode, args.label, model_id=args.model_id, timeout=args.timeout, progress=not args.no_progress
    )
    return status


if __name__ == "__main__":
    raise SystemExit(main())
