"""Lesson 7's GRPOTrainer in two processes (``make online ONLINE_ARGS="--processes 2"``, tools/cli/multiprocess.py).

Cheap: the committed record (benchmarks/results/online/online-multiprocess_multiprocess.json) validates and shows
what the lesson says - two processes (MULTI_CPU, gloo, world size 2), the global batch split, every rank's weights
equal after training, ``bnpo`` alone changing with the number of processes; every way a record can fail to show it
is reported (one mutation per check); the lesson's tables and sentence are computed from the record; the accelerate
configurations are set beside it; the command line refuses a bad ``--processes`` before launching anything.

Integration (``make test-integration``): the real thing on this machine - torchrun launches two CPU processes that
train with GRPOTrainer and measure the loss types; and the same training with DDP's all-reduce removed
(tests/fixtures/unsynced_worker.py) leaves the ranks' weights apart, which the check reports.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tools import online_trl
from tools.online import trl_multiprocess as mpr
from tools.online import trl_ranks

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / mpr.record_path(mpr.MULTIPROCESS_LABEL)


@pytest.fixture(scope="module")
def committed():
    record = mpr.load_multiprocess_record(ROOT)
    assert record is not None, f"{COMMITTED} is missing: make online RUN_LABEL=multiprocess ONLINE_ARGS=--processes 2"
    return record


def test_the_committed_record_is_two_processes_in_sync(committed):
    assert COMMITTED.parent.as_posix().endswith("benchmarks/results/online")
    training = committed["training"]
    assert committed["num_processes"] == 2 == training["distributed"]["world_size"] == len(training["ranks"])
    assert training["distributed"]["distributed_type"] == "MULTI_CPU" and training["distributed"]["backend"] == "gloo"
    config = committed["config"]
    assert training["global_batch"] == config["prompts_per_step"] * config["num_generations"]
    assert training["per_process_batch"] * 2 == training["global_batch"]
    assert training["steps"] == config["num_steps"] and training["weights_in_sync"]
    assert mpr.multiprocess_problems(committed) == []


def test_bnpo_alone_changes_with_the_number_of_processes(committed):
    rows = committed["loss_types"]["rows"]
    assert {r["loss_type"] for r in rows if r["changes"]} == set(mpr.DEPENDS_ON_PROCESSES) == {"bnpo"}
    for r in rows:
        assert len(set(r["rank_tokens"])) == 2  # the two slices hold different token counts
        if r["loss_type"] == "bnpo":  # what the two processes log is the mean of the slices' own bnpo losses
            assert abs(r["loss_processes"] - r["predicted_loss"]) <= 1e-5 * abs(r["predicted_loss"])


def _rank(record, i):
    return record["training"]["ranks"][i]


def _row(record, loss_type, seed=0):
    return next(r for r in record["loss_types"]["rows"] if r["loss_type"] == loss_type and r["seed"] == seed)


MUTATIONS = {
    "ranks' weights differ": (lambda r: _rank(r, 1).update(weights_after="0" * 64), "not in sync"),
    "weights_in_sync claims sync": (
        lambda r: (_rank(r, 1).update(weights_after="0" * 64), r["training"].update(weights_in_sync=True)),
        "weights_in_sync does not match",
    ),
    "nothing trained": (
        lambda r: [x.update(weights_after=x["weights_before"]) for x in r["training"]["ranks"]],
        "nothing was trained",
    ),
    "different starting weights": (lambda r: _rank(r, 1).update(weights_before="1" * 64), "different weights"),
    "batch not split": (
        lambda r: _rank(r, 1).update(batches=copy.deepcopy(_rank(r, 0)["batches"])),
        "trained on the same rows",
    ),
    "a step missing on a rank": (lambda r: _rank(r, 0)["batches"].pop(), "batches, not"),
    "one process": (lambda r: r.update(num_processes=1), "not a multi-process run"),
    "world size differs": (lambda r: r["training"]["distributed"].update(world_size=1), "not a multi-process run"),
    "no data parallelism": (
        lambda r: r["training"]["distributed"].update(distributed_type="NO"),
        "no data parallelism",
    ),
    "a rank reports another set-up": (lambda r: _rank(r, 1)["distributed"].update(backend="mpi"), "different set-ups"),
    "global batch not the one-process batch": (lambda r: r["config"].update(prompts_per_step=8), "batch:"),
    "bnpo unchanged": (lambda r: _row(r, "bnpo").update(loss_rel=0.0, grad_rel=0.0, changes=False), "the lesson says"),
    "grpo changes": (lambda r: _row(r, "grpo").update(loss_rel=1e-3, changes=True), "the lesson says"),
    "dapo gradient changes": (lambda r: _row(r, "dapo").update(grad_rel=1e-3, changes=True), "the lesson says"),
    "changes flag wrong": (lambda r: _row(r, "dr_grpo").update(changes=True), "'changes' says"),
    "prediction off": (lambda r: _row(r, "bnpo").update(predicted_loss_rel=1e-2), "slices computed alone"),
    "equal token counts": (lambda r: _row(r, "grpo").update(rank_tokens=[50, 50]), "bnpo cannot differ"),
    "fewer than 3 seeds": (
        lambda r: r["loss_types"].update(
            rows=[x for x in r["loss_types"]["rows"] if x["seed"] != r["loss_types"]["batch"]["seeds"][-1]]
        ),
        "over >= 3 seeds",
    ),
    "a loss type missing": (
        lambda r: r["loss_types"].update(rows=[x for x in r["loss_types"]["rows"] if x["loss_type"] != "dapo"]),
        "every loss type",
    ),
    "not compared with one process": (
        lambda r: r["loss_types"]["one_process"].update(num_processes=2),
        "does not compare 1 process",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_broken_record_is_reported(committed, name):
    mutate, expected = MUTATIONS[name]
    record = copy.deepcopy(committed)
    mutate(record)
    problems = mpr.multiprocess_problems(record)
    assert any(expected in p for p in problems), (name, problems)


def test_the_schema_rejects_a_record_without_its_parts(committed):
    import jsonschema

    for drop in (("num_processes",), ("training", "per_process_batch"), ("loss_types", "rows")):
        record = copy.deepcopy(committed)
        parent = record
        for key in drop[:-1]:
            parent = parent[key]
        del parent[drop[-1]]
        with pytest.raises(jsonschema.ValidationError):
            mpr.validate_multiprocess_record(record)


def test_the_lessons_tables_are_computed_from_the_record(committed):
    table, sync, verdict = mpr.loss_types_table(committed), mpr.sync_table(committed), mpr.loss_types_verdict(committed)
    for r in committed["loss_types"]["rows"]:
        assert format(r["loss_one_process"], ".5f") in table and format(r["loss_processes"], ".5f") in table
    assert "`bnpo`" in verdict.split("不变的是")[0] and "`grpo`" in verdict.split("不变的是")[1]
    for rank in committed["training"]["ranks"]:
        assert rank["weights_after"][:12] in sync
    changed = copy.deepcopy(committed)
    _row(changed, "bnpo", seed=1)["loss_processes"] = 9.87654
    assert "9.87654" in mpr.loss_types_table(changed)
    for r in changed["loss_types"]["rows"]:  # a record where grpo changed too: the sentence follows it
        if r["loss_type"] == "grpo":
            r.update(changes=True, loss_rel=0.5)
    assert "`grpo`" in mpr.loss_types_verdict(changed).split("不变的是")[0]


def test_the_accelerate_configs_are_set_beside_the_cpu_run(committed):
    rows = online_trl.check_accelerate_configs(ROOT / "environments" / "accelerate")
    table = online_trl.scaling_comparison(rows, committed)
    for row in rows:
        assert (
            f"`{row['file']}` | {row['distributed_type']} | {row['num_processes']} | {row['mixed_precision']}" in table
        )
    assert "| MULTI_CPU | 2 | no | gloo |" in table
    other = copy.deepcopy(committed)
    other["training"]["distributed"]["backend"] = "mpi"  # the CPU row is read from the record
    assert "| MULTI_CPU | 2 | no | mpi |" in online_trl.scaling_comparison(rows, other)
    with pytest.raises(ValueError, match="FSDP"):
        online_trl.scaling_comparison([dict(rows[0], distributed_type="FSDP")], committed)


@pytest.mark.parametrize(
    "argv",
    [["--processes", "0"], ["--processes", "2", "--seeds", "3"], ["--processes", "x"]],
)
def test_bad_processes_arguments_exit_2(argv):
    from tools.cli import online

    with pytest.raises(SystemExit) as exit_:
        online.parse(argv)
    assert exit_.value.code == 2


def test_an_uneven_split_is_refused_before_anything_is_launched():
    from tools.cli import multiprocess
    from tools.online.config import OnlineConfig

    with pytest.raises(ValueError, match="does not split evenly"):
        multiprocess.run("unused", OnlineConfig(prompts_per_step=3, num_generations=3), 2)
    with pytest.raises(ValueError, match=">= 2"):
        multiprocess.run("unused", OnlineConfig(), 1)
    assert trl_ranks.split_batch(128, 2) == 64


# --------------------------------------------------------------------------------------- integration
SMALL = ["--num-steps", "2", "--prompts-per-step", "2", "--num-generations", "4"]


@pytest.mark.integration
@pytest.mark.slow
def test_two_cpu_processes_train_in_sync_and_measure_the_loss_types():
    """The real launch on this machine (about 35 s on 2 idle cores): three torchrun launches, the record checked."""
    label = f"test-multiprocess-{uuid.uuid4().hex[:8]}"
    path = ROOT / mpr.record_path(label)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tools.cli.online", "--processes", "2", "--label", label, *SMALL],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        record = mpr.load_multiprocess_record(ROOT, label)
        assert record["num_processes"] == 2 and record["training"]["distributed"]["distributed_type"] == "MULTI_CPU"
        assert record["training"]["per_process_batch"] == 4 and record["training"]["global_batch"] == 8
        assert mpr.multiprocess_problems(record) == []
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.integration
@pytest.mark.slow
def test_training_without_the_gradient_all_reduce_is_caught(tmp_path, committed):
    """The mutation of the real path: DDP's all-reduce replaced by a hook that keeps each rank's own gradient. The
    ranks then end with different weights, and the check of a record holding that training says so."""
    from tools.cli.multiprocess import torchrun_command
    from tools.online.config import OnlineConfig

    config = OnlineConfig(num_steps=2, prompts_per_step=2, num_generations=4)
    command = torchrun_command(2, "train")
    command[command.index("-m", 2) : command.index("worker") + 1] = [str(ROOT / "tests/fixtures/unsynced_worker.py")]
    command += ["--out", str(tmp_path), "--processes", "2", "--config", json.dumps(config.to_dict())]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    training = mpr.training_part(trl_ranks.read_rank_results(tmp_path, 2))
    assert not training["weights_in_sync"]
    record = dict(copy.deepcopy(committed), training=training, config=config.to_dict())
    mpr.validate_multiprocess_record(record)
    assert any("not in sync" in p for p in mpr.multiprocess_problems(record))
