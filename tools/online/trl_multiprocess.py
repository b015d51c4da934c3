"""The record of lesson 7's multi-process run (``tools/schemas/online-multiprocess-v1.json``): built from the ranks'
results (``tools.online.trl_ranks``), checked (``multiprocess_problems``), written atomically after it
validates, and shown by the lesson (``sync_table``, ``loss_types_table``).

Two parts. ``training``: ``GRPOTrainer.train()`` with the global batch split over the processes; the weights' hash
of every rank after training (equal: the copies stayed in sync), the rows each rank trained on (different: the data
were split). ``loss_types``: one training step per ``loss_type`` on a fixed batch with 1 and with N processes, the
loss TRL logs (the mean over the ranks of each rank's loss) and the gradient (all-reduced), beside the prediction
from computing each process's slice alone in one process.
"""

from __future__ import annotations

from pathlib import Path

from tools.loss_types import CLIPPED_LOSS_TYPES
from tools.online.record import _SCHEMAS_DIR, RESULTS_KIND, framework_versions, hardware_snapshot, utc_now
from tools.online.trl_agreement import AGREEMENT_RTOL, relative_difference
from tools.online.trl_ranks import (
    HALVES,
    LOSS_EPSILON,
    LOSS_EPSILON_HIGH,
    LOSS_GENERATIONS,
    LOSS_PROMPTS,
    OLD_LOGP_NOISE,
)
from tools.project_runtime import check_run_label, record_relative_path

SCHEMA_VERSION = "online-multiprocess/v1"
WORKLOAD_ID = "online-multiprocess"
SCHEMA_FILE = _SCHEMAS_DIR / "online-multiprocess-v1.json"
MULTIPROCESS_LABEL = (
    "multiprocess"  # the committed record: benchmarks/results/online/online-multiprocess_multiprocess.json
)
# The loss types whose loss and gradient change with the number of processes (TRL 1.16's _compute_loss): bnpo divides
# each process's token sum by that process's own token count. grpo (mean of row means, equal rows per process),
# dr_grpo (B x max_completion_length, B the local rows) and dapo (the global token count / num_processes) do not.
DEPENDS_ON_PROCESSES = frozenset({"bnpo"})
DISTRIBUTED_KEYS = ("distributed_type", "backend", "world_size", "num_processes", "mixed_precision")
RTOL = AGREEMENT_RTOL  # float32 summation order: two computations of the same loss agree to this (relative)


def record_path(label: str) -> Path:
    """``online-multiprocess_<label>.json``: under benchmarks/results/online/ for MULTIPROCESS_LABEL, else under the
    git-ignored local folder."""
    return record_relative_path(RESULTS_KIND, WORKLOAD_ID, check_run_label(label), (MULTIPROCESS_LABEL,))


# --------------------------------------------------------------------------------------- building the record
def training_part(ranks: list[dict]) -> dict:
    """The ``training`` part from the ranks' ``train_rank`` results (rank order)."""
    first = ranks[0]
    keys = DISTRIBUTED_KEYS
    return {
        "distributed": {k: first[k] for k in keys},
        "per_process_batch": first["per_process_batch"],
        "global_batch": first["global_batch"],
        "steps": first["steps"],
        "ranks": [
            {
                k: r[k]
                for k in (
                    "process_index",
                    "device",
                    "weights_before",
                    "weights_after",
                    "batches",
                    "train_seconds",
                    "torch_threads",
                )
            }
            | {"distributed": {k: r[k] for k in keys}}
            for r in ranks
        ],
        "weights_in_sync": len({r["weights_after"] for r in ranks}) == 1,
        "log": first["log"],
    }


def loss_types_part(one: list[dict], many: list[dict], one_dir, many_dir) -> dict:
    """The ``loss_types`` part: ``one`` / ``many`` are the ranks' ``loss_types_rank`` results with 1 and with N
    processes, ``one_dir`` / ``many_dir`` the folders holding rank 0's gradients."""
    import torch

    processes = len(many)
    rows = []
    for index, entry in enumerate(one[0]["seeds"]):
        seed = entry["seed"]
        for loss_type in CLIPPED_LOSS_TYPES:
            single = entry[loss_type]
            ranked = [r["seeds"][index][loss_type] for r in many]
            if any(r["seeds"][index]["seed"] != seed for r in many):
                raise ValueError(f"the {processes}-process run measured other seeds than the 1-process run")
            g_one = torch.load(Path(one_dir) / f"grad_seed{seed}_{loss_type}.pt")
            g_many = torch.load(Path(many_dir) / f"grad_seed{seed}_{loss_type}.pt")
            halves = [torch.load(Path(one_dir) / f"grad_seed{seed}_{loss_type}_half{h}.pt") for h in range(HALVES)]
            loss_many = sum(r["loss"] for r in ranked) / processes  # what Trainer logs: the mean over the ranks
            predicted = sum(h["loss"] for h in single["halves"]) / HALVES
            row = {
                "seed": seed,
                "loss_type": loss_type,
                "loss_one_process": single["loss"],
                "loss_processes": loss_many,
                "rank_losses": [r["loss"] for r in ranked],
                "rank_tokens": [r["local_tokens"] for r in ranked],
                "predicted_loss": predicted,
                "loss_rel": relative_difference(single["loss"], loss_many),
                "grad_rel": relative_difference(g_one, g_many),
                "predicted_loss_rel": relative_difference(predicted, loss_many),
                "predicted_grad_rel": relative_difference(sum(halves) / HALVES, g_many),
                "grad_norm_one_process": single["grad_norm"],
            }
            row["changes"] = max(row["loss_rel"], row["grad_rel"]) > RTOL
            rows.append(row)
    keys = DISTRIBUTED_KEYS
    return {
        "batch": {
            "prompts": LOSS_PROMPTS,
            "generations": LOSS_GENERATIONS,
            "epsilon": LOSS_EPSILON,
            "epsilon_high": LOSS_EPSILON_HIGH,
            "old_logp_noise": OLD_LOGP_NOISE,
            "seeds": [e["seed"] for e in one[0]["seeds"]],
        },
        "one_process": {k: one[0][k] for k in keys},
        "processes": {k: many[0][k] for k in keys},
        "rtol": RTOL,
        "rows": rows,
    }


def build_record(label: str, config, launch: list[str], training: dict, loss_types: dict, seconds: float) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_label": check_run_label(label),
        "created_utc": utc_now(),
        "launch": launch,
        "config": config.to_dict(),
        "num_processes": training["distributed"]["num_processes"],
        "training": training,
        "loss_types": loss_types,
        "wall_seconds": round(seconds, 3),
        "framework": dict(framework_versions(), accelerate=_version("accelerate")),
        "hardware": hardware_snapshot(),
    }


def _version(name):
    from tools.notebook_runtime import package_version

    return package_version(name)


# --------------------------------------------------------------------------------------- checks, read, write
def validate_multiprocess_record(record) -> None:
    """Raise ``jsonschema.ValidationError`` when ``record`` breaks the schema."""
    import jsonschema

    from tools.notebook_runtime import schema_validator

    validator = schema_validator(SCHEMA_FILE)
    if not validator.is_valid(record):
        raise jsonschema.exceptions.best_match(validator.iter_errors(record))


def multiprocess_problems(record) -> list[str]:
    """Every way ``record`` fails to show what the lesson says, as a sentence (empty: it shows all of it)."""
    problems = []
    training = record["training"]
    dist, ranks = training["distributed"], training["ranks"]
    n = dist["num_processes"]
    if n < 2 or record["num_processes"] != n or len(ranks) != n or dist["world_size"] != n:
        problems.append(
            f"not a multi-process run: num_processes {n}, world_size {dist['world_size']}, {len(ranks)} ranks"
        )
    if dist["distributed_type"] not in ("MULTI_CPU", "MULTI_GPU") or not dist["backend"]:
        problems.append(f"distributed type {dist['distributed_type']} / backend {dist['backend']}: no data parallelism")
    if any(r["distributed"] != dist for r in ranks) or [r["process_index"] for r in ranks] != list(range(len(ranks))):
        problems.append("the ranks report different set-ups or are not ranks 0..N-1")
    config = record["config"]
    global_batch = config["prompts_per_step"] * config["num_generations"]
    if training["per_process_batch"] * n != training["global_batch"] or training["global_batch"] != global_batch:
        problems.append(
            f"batch: {training['per_process_batch']} per process x {n} != global {training['global_batch']} "
            f"(the one-process batch is {global_batch})"
        )
    after = {r["weights_after"] for r in ranks}
    if len(after) != 1:
        problems.append(f"the ranks' weights differ after training ({len(after)} different hashes): not in sync")
    if any(r["weights_after"] == r["weights_before"] for r in ranks):
        problems.append("the weights did not change: nothing was trained")
    if len({r["weights_before"] for r in ranks}) != 1:
        problems.append("the ranks started from different weights")
    if training["weights_in_sync"] != (len(after) == 1):
        problems.append("weights_in_sync does not match the ranks' hashes")
    for r in ranks:
        if len(r["batches"]) != training["steps"] or any(
            b["rows"] != training["per_process_batch"] for b in r["batches"]
        ):
            problems.append(
                f"rank {r['process_index']}: {len(r['batches'])} batches, not {training['steps']} of the per-process size"
            )
    for step in range(min(len(r["batches"]) for r in ranks)):
        if len({r["batches"][step]["sha256"] for r in ranks}) != len(ranks):
            problems.append(f"step {step}: two ranks trained on the same rows (the batch was not split)")
            break
    problems += _loss_type_problems(record["loss_types"])
    return problems


def _loss_type_problems(part) -> list[str]:
    problems = []
    if part["one_process"]["num_processes"] != 1 or part["processes"]["num_processes"] < 2:
        problems.append("the loss measurement does not compare 1 process with several")
    seen = {(row["seed"], row["loss_type"]) for row in part["rows"]}
    wanted = {(seed, lt) for seed in part["batch"]["seeds"] for lt in CLIPPED_LOSS_TYPES}
    if seen != wanted or len(part["batch"]["seeds"]) < 3:
        problems.append(f"the loss measurement covers {sorted(seen)}, not every loss type over >= 3 seeds")
    rtol = part["rtol"]
    for row in part["rows"]:
        where = f"seed {row['seed']} {row['loss_type']}"
        if len(set(row["rank_tokens"])) < 2:
            problems.append(f"{where}: every process has {row['rank_tokens'][0]} tokens (bnpo cannot differ)")
        changes = max(row["loss_rel"], row["grad_rel"]) > rtol
        if row["changes"] != changes:
            problems.append(f"{where}: 'changes' says {row['changes']}, the differences say {changes}")
        if changes != (row["loss_type"] in DEPENDS_ON_PROCESSES):
            problems.append(
                f"{where}: loss rel. diff. {row['loss_rel']:.1e}, gradient {row['grad_rel']:.1e} between 1 and "
                f"{len(row['rank_tokens'])} processes ({'changes' if changes else 'unchanged'}; the lesson says "
                f"{'it changes' if row['loss_type'] in DEPENDS_ON_PROCESSES else 'it does not'})"
            )
        if max(row["predicted_loss_rel"], row["predicted_grad_rel"]) > rtol:
            problems.append(
                f"{where}: the slices computed alone predict {row['predicted_loss']:.6g}, the processes gave "
                f"{row['loss_processes']:.6g} (gradient rel. diff. {row['predicted_grad_rel']:.1e})"
            )
    return problems


def write_multiprocess_record(root, record) -> Path:
    """Validate, then write atomically (``tools.notebook_runtime.save_json``) to ``record_path``."""
    from tools.notebook_runtime import save_json

    validate_multiprocess_record(record)
    return save_json(Path(root) / record_path(record["run_label"]), record)


def load_multiprocess_record(root, label: str = MULTIPROCESS_LABEL):
    """The validated record of ``label``, or None when there is none."""
    import json

    path = Path(root) / record_path(label)
    if not path.exists():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    validate_multiprocess_record(record)
    return record


# --------------------------------------------------------------------------------------- the lesson's tables
def sync_table(record) -> str:
    training = record["training"]
    dist = training["distributed"]
    lines = [
        f"`{' '.join(record['launch'])}`：accelerate 的 `{dist['distributed_type']}`，后端 `{dist['backend']}`，"
        f"world size {dist['world_size']}；每个进程 {training['per_process_batch']} 个回答，全局批次 "
        f"{training['global_batch']}，训练 {training['steps']} 步。",
        "",
        "| 进程 | 训练前权重 sha256 | 训练后权重 sha256 | 各步训练行的指纹各不相同 | 训练用时 (s) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in training["ranks"]:
        others = [o for o in training["ranks"] if o is not r]
        distinct = sum(
            all(b["sha256"] != o["batches"][i]["sha256"] for o in others) for i, b in enumerate(r["batches"])
        )
        lines.append(
            f"| {r['process_index']} | `{r['weights_before'][:12]}` | `{r['weights_after'][:12]}` | "
            f"{distinct}/{len(r['batches'])} | {r['train_seconds']:.1f} |"
        )
    return "\n".join(lines)


def loss_types_table(record) -> str:
    part = record["loss_types"]
    n = part["processes"]["num_processes"]
    lines = [
        f"| loss_type | 1 进程的损失 | {n} 进程的损失（各进程的平均） | 各进程的词元数 | 损失相对差 | 梯度相对差 | "
        f"由各切片单独计算的预测（相对差） | 随进程数改变 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for loss_type in CLIPPED_LOSS_TYPES:
        rows = [r for r in part["rows"] if r["loss_type"] == loss_type]

        def joined(key, spec, rows=rows):
            return " / ".join(format(r[key], spec) for r in rows)

        lines.append(
            f"| `{loss_type}` | {joined('loss_one_process', '.5f')} | {joined('loss_processes', '.5f')} | "
            + " / ".join("+".join(str(t) for t in r["rank_tokens"]) for r in rows)
            + f" | {joined('loss_rel', '.1e')} | {joined('grad_rel', '.1e')} | "
            f"{max(max(r['predicted_loss_rel'], r['predicted_grad_rel']) for r in rows):.1e} | "
            f"{'是' if all(r['changes'] for r in rows) else ('否' if not any(r['changes'] for r in rows) else '不一致')} |"
        )
    return "\n".join(lines)


def loss_types_verdict(record) -> str:
    """One sentence computed from the record: which loss types changed with the number of processes on every seed,
    which on none, and the largest relative difference of each group."""
    part = record["loss_types"]
    rows, n = part["rows"], part["processes"]["num_processes"]
    seeds = len(part["batch"]["seeds"])
    changed = [lt for lt in CLIPPED_LOSS_TYPES if all(r["changes"] for r in rows if r["loss_type"] == lt)]
    kept = [lt for lt in CLIPPED_LOSS_TYPES if not any(r["changes"] for r in rows if r["loss_type"] == lt)]
    mixed = [lt for lt in CLIPPED_LOSS_TYPES if lt not in changed and lt not in kept]

    def largest(types):
        return max((max(r["loss_rel"], r["grad_rel"]) for r in rows if r["loss_type"] in types), default=0.0)

    def smallest(types):
        return min((max(r["loss_rel"], r["grad_rel"]) for r in rows if r["loss_type"] in types), default=0.0)

    sentence = (
        f"在 {seeds} 个种子的同一批数据上，1 个进程与 {n} 个进程相比：随进程数改变的是 "
        f"{'、'.join(f'`{lt}`' for lt in changed) or '（没有）'}（损失或梯度的相对差至少 {smallest(changed):.1e}）；"
        f"不变的是 {'、'.join(f'`{lt}`' for lt in kept) or '（没有）'}（最大相对差 {largest(kept):.1e}，"
        f"容差 {part['rtol']:.0e}）。"
    )
    if mixed:
        sentence += f"种子之间结论不一致：{'、'.join(mixed)}。"
    return sentence
