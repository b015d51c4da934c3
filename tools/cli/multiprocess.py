"""Lesson 7's ``GRPOTrainer`` in several processes: ``python -m tools.cli.online --processes N`` (``make online
ONLINE_ARGS="--processes 2"``) calls ``run``, which launches ``torchrun --standalone --nproc_per_node ...`` three
times, each running this module's ``worker`` in every process:

1. ``worker train``: ``GRPOTrainer.train()`` with the run's ``OnlineConfig``, the global batch split over N processes;
2. ``worker losses`` with 1 process, then 3. with N: one training step per ``loss_type`` on a fixed batch.

On a machine without CUDA, accelerate runs them as ``MULTI_CPU`` over gloo. The ranks write their results into a
temporary folder; ``run`` builds the record ``online-multiprocess_<label>.json``
(``tools.online.trl_multiprocess``), validates it, writes it atomically and prints every check that fails.

Exit status: 0 - record written and every check holds; 1 - a launch failed or a check does not hold (the record, if
one could be built, is written all the same: it is the evidence); 2 - bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCH_TIMEOUT_S = 1800  # one torchrun launch; the committed record's training launch takes a few minutes


def torchrun_command(processes: int, *worker_args: str) -> list[str]:
    """The command that runs ``worker`` in ``processes`` processes (torchrun's standalone rendezvous: one machine,
    a free port)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "tools.cli.multiprocess",
        "worker",
        *worker_args,
    ]


def _launch(processes: int, out_dir: Path, *worker_args: str) -> None:
    from tools.project_runtime import venv_env

    out_dir.mkdir(parents=True, exist_ok=True)
    command = torchrun_command(processes, *worker_args, "--out", str(out_dir), "--processes", str(processes))
    print("$ " + " ".join(command[1:]), flush=True)
    env = venv_env({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"})
    done = subprocess.run(command, env=env, timeout=LAUNCH_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun exited with status {done.returncode}: {' '.join(command[1:])}")


def run(label: str, config, processes: int, root=None) -> int:
    """Launch the three runs, write the record of ``label``; 0 when every check holds."""
    from tools.online import trl_multiprocess as mpr
    from tools.online import trl_ranks as mp
    from tools.online.record import resolve_root

    if processes < 2:
        raise ValueError(f"--processes 必须 >= 2，收到 {processes} (the multi-process run needs at least 2)")
    mp.split_batch(config.prompts_per_step * config.num_generations, processes)
    root = Path(root) if root is not None else resolve_root()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-multiprocess-") as tmp:
        tmp = Path(tmp)
        _launch(processes, tmp / "train", "train", "--config", json.dumps(config.to_dict()))
        _launch(1, tmp / "losses1", "losses")
        _launch(processes, tmp / "losses", "losses")
        training = mpr.training_part(mp.read_rank_results(tmp / "train", processes))
        loss_types = mpr.loss_types_part(
            mp.read_rank_results(tmp / "losses1", 1),
            mp.read_rank_results(tmp / "losses", processes),
            tmp / "losses1",
            tmp / "losses",
        )
    launch = ["torchrun", "--standalone", f"--nproc_per_node={processes}", "-m", "tools.cli.multiprocess", "worker"]
    record = mpr.build_record(label, config, launch, training, loss_types, time.perf_counter() - started)
    path = mpr.write_multiprocess_record(root, record)
    print(f"record: {path.relative_to(root) if path.is_relative_to(root) else path}")
    print(mpr.sync_table(record))
    print(mpr.loss_types_table(record))
    problems = mpr.multiprocess_problems(record)
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    return 1 if problems else 0


def worker(argv) -> int:
    """One rank's part (torchrun runs this in every process)."""
    parser = argparse.ArgumentParser(prog="python -m tools.cli.multiprocess worker")
    parser.add_argument("part", choices=("train", "losses"))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--processes", required=True, type=int)
    parser.add_argument("--config", default=None, help="the OnlineConfig as JSON (train)")
    args = parser.parse_args(argv)
    from tools.online import trl_ranks as mp

    if args.part == "losses":
        mp.loss_types_rank(args.out, args.processes)
        return 0
    from tools.lessons.nb04_verifiable_rewards import verify_integer_response
    from tools.online.config import OnlineConfig

    config = OnlineConfig(**json.loads(args.config))
    result = mp.train_rank(config, verify_integer_response, args.out, args.processes)
    print(
        f"[rank {result['process_index']}] {result['distributed_type']} {result['backend']} "
        f"world {result['world_size']}: {result['steps']} steps, weights {result['weights_after'][:12]}",
        flush=True,
    )
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        return worker(argv[1:])
    raise SystemExit("usage: python -m tools.cli.online --processes N [flags]  (this module runs the workers)")


if __name__ == "__main__":
    sys.exit(main())
