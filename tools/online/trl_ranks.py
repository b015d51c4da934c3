"""Lesson 7's ``GRPOTrainer`` in several processes: what one rank does under ``torchrun`` (launched by
``python -m tools.cli.multiprocess``; on the CPU accelerate gives ``MULTI_CPU`` with the gloo backend).

``train_rank``: ``GRPOTrainer.train()`` on the lesson's task from the SFT warm start, the global batch split over the
processes; the rank's result says which distributed set-up it ran under (``distributed_snapshot``), which rows it
trained on (a fingerprint per step) and the hash of its weights before and after (``weights_hash``): equal hashes on
every rank after training mean the gradient all-reduce kept the copies in sync.

``loss_types_rank``: one training step's loss and gradient, per ``loss_type``, on a fixed global batch
(``loss_batch``: deterministic, the same on every rank; each rank takes its contiguous slice, as TRL's sampler hands
out rows), computed by ``GRPOTrainer.training_step`` on the model as accelerate wraps it (DDP when there are several
processes, so the gradient is the all-reduced one). With one process it also computes each half of the batch alone
(``HALVES``): the prediction for two processes' ``bnpo`` loss.

Each rank writes its result as ``rank<k>.json`` (and gradients as ``.pt``) into a folder the launcher reads
(``tools.online.trl_multiprocess`` turns them into the record).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path

from tools.loss_types import CLIPPED_LOSS_TYPES
from tools.online.config import OnlineConfig
from tools.online.task import chat_prompt, scratchpad, split_problems
from tools.online.trl_runs import course_reward
from tools.online.trl_trainer import grpo_config, make_trainer, quiet
from tools.online.warm_start import load_policy, sft_checkpoint_path

# The fixed batch of the loss measurement: LOSS_PROMPTS prompts x LOSS_GENERATIONS completions; rows are split over
# the processes in contiguous slices. Its seeds (LOSS_SEEDS) pick the prompts, the completions, the advantages and the
# noise on the old log-probs.
LOSS_PROMPTS, LOSS_GENERATIONS = 4, 4
LOSS_SEEDS = (0, 1, 2)
LOSS_EPSILON, LOSS_EPSILON_HIGH = 0.2, 0.28
OLD_LOGP_NOISE = 0.3  # N(0, 1) times this on the old log-probs: ratios differ from 1, clipping fires at both ends
HALVES = 2  # the one-process run also computes each of this many slices alone (the prediction for as many processes)


def distributed_snapshot(accelerator) -> dict:
    """The distributed set-up a rank runs under, as accelerate and torch.distributed report it."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    return {
        "distributed_type": str(accelerator.distributed_type).split(".")[-1],
        "backend": dist.get_backend() if initialised else None,
        "world_size": dist.get_world_size() if initialised else 1,
        "num_processes": accelerator.num_processes,
        "mixed_precision": str(accelerator.mixed_precision),
        "process_index": accelerator.process_index,
        "device": str(accelerator.device),
    }


def weights_hash(model) -> str:
    """sha256 of every parameter's name, shape, dtype and bytes, in the model's order."""
    digest = hashlib.sha256()
    for name, parameter in model.named_parameters():
        tensor = parameter.detach().cpu().contiguous()
        digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def _rows_fingerprint(inputs) -> str:
    digest = hashlib.sha256()
    for key in ("prompt_ids", "completion_ids", "completion_mask"):
        digest.update(inputs[key].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def split_batch(global_batch: int, processes: int) -> int:
    """The per-process batch of ``global_batch`` rows over ``processes`` processes (ValueError if uneven)."""
    if processes < 1 or global_batch % processes:
        raise ValueError(
            f"全局批次 {global_batch} 不能平均分给 {processes} 个进程 "
            f"(the global batch of {global_batch} rows does not split evenly over {processes} processes)"
        )
    return global_batch // processes


def _write(out_dir, rank: int, result: dict) -> None:
    from tools.notebook_runtime import save_json

    save_json(Path(out_dir) / f"rank{rank}.json", result)


def train_rank(config: OnlineConfig, verify, out_dir, processes: int) -> dict:
    """``GRPOTrainer.train()`` for ``config.num_steps`` steps in this rank; the global batch (prompts_per_step x
    num_generations, as in one process) split over ``processes``. Writes and returns the rank's result."""
    import torch

    quiet()
    torch.set_num_threads(1)
    global_batch = config.prompts_per_step * config.num_generations
    per_process = split_batch(global_batch, processes)
    path, _, _ = sft_checkpoint_path(seed=0)
    model, tokenizer = load_policy(path)
    train, _ = split_problems()
    torch.manual_seed(config.seed)
    args = grpo_config(config, max_steps=config.num_steps, per_device_train_batch_size=per_process)
    trainer = make_trainer(model, tokenizer, train, args, course_reward(verify, config.format_weight))
    snapshot = distributed_snapshot(trainer.accelerator)
    if snapshot["num_processes"] != processes:
        raise RuntimeError(f"accelerate sees {snapshot['num_processes']} processes, the launcher started {processes}")
    fingerprints = []
    compute_loss = trainer._compute_loss

    def fingerprinted(model_, inputs):  # the rows this rank trains on, one fingerprint per step
        fingerprints.append({"rows": int(inputs["completion_ids"].shape[0]), "sha256": _rows_fingerprint(inputs)})
        return compute_loss(model_, inputs)

    trainer._compute_loss = fingerprinted
    before = weights_hash(trainer.model)
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    if trainer.state.global_step != config.num_steps:
        raise RuntimeError(f"GRPOTrainer ran {trainer.state.global_step} steps, not {config.num_steps}")
    log = [
        {"step": int(e["step"]), "loss": e.get("loss"), "reward": e.get("reward"), "grad_norm": e.get("grad_norm")}
        for e in trainer.state.log_history
        if "step" in e and "reward" in e
    ]
    result = dict(
        snapshot,
        per_process_batch=per_process,
        global_batch=per_process * snapshot["num_processes"],
        steps=trainer.state.global_step,
        weights_before=before,
        weights_after=weights_hash(trainer.model),
        batches=fingerprints,
        log=log,
        train_seconds=round(seconds, 3),
        torch_threads=torch.get_num_threads(),
    )
    _write(out_dir, snapshot["process_index"], result)
    return result


# --------------------------------------------------------------------------------------- the loss measurement
def loss_batch(policy, tokenizer, seed: int) -> dict:
    """The fixed global batch of the loss measurement (the same on every rank): LOSS_PROMPTS training prompts, each
    with LOSS_GENERATIONS completions written out (the worked scratchpad, the bare right answer, a wrong answer; the
    mix drawn with ``seed``), so completion lengths differ within groups and between the processes' slices; random
    advantages (group sums not 0, so no reduction cancels to ~0); old log-probs = the policy's + OLD_LOGP_NOISE x
    N(0, 1) (ratios differ from 1, clipping fires)."""
    import torch

    from tools.online.logprobs import completion_logps

    gen = torch.Generator().manual_seed(seed)
    train, _ = split_problems()
    picks = torch.randperm(len(train), generator=gen)[:LOSS_PROMPTS].tolist()
    problems = [train[i] for i in picks]
    prompts, completions = [], []
    for p in problems:
        addends = [int(a) for a in p["prompt"].rstrip("=").split("+")]
        choices = (
            scratchpad(addends),
            str(p["answer"]),
            str(p["answer"] + 1 + int(torch.randint(9, (1,), generator=gen))),
        )
        for _ in range(LOSS_GENERATIONS):
            prompts.append(chat_prompt(tokenizer, p["prompt"]))
            completions.append(choices[int(torch.randint(len(choices), (1,), generator=gen))])
    prompt_rows = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in prompts]
    completion_rows = [
        tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for text in completions
    ]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    n, p_width, c_width = len(prompts), max(map(len, prompt_rows)), max(map(len, completion_rows))
    prompt_ids = torch.full((n, p_width), pad, dtype=torch.long)  # [N, P] left-padded, as TRL pads prompts
    prompt_mask = torch.zeros((n, p_width), dtype=torch.long)  # [N, P]
    completion_ids = torch.full((n, c_width), pad, dtype=torch.long)  # [N, C] right-padded
    completion_mask = torch.zeros((n, c_width), dtype=torch.long)  # [N, C]
    for i, (row, completion) in enumerate(zip(prompt_rows, completion_rows)):
        prompt_ids[i, p_width - len(row) :], prompt_mask[i, p_width - len(row) :] = torch.tensor(row), 1
        completion_ids[i, : len(completion)], completion_mask[i, : len(completion)] = torch.tensor(completion), 1
    with torch.no_grad():
        logps = completion_logps(policy.eval(), prompt_ids, prompt_mask, completion_ids, completion_mask)  # [N, C]
    noise = OLD_LOGP_NOISE * torch.randn((n, c_width), generator=gen)  # [N, C]
    advantages = torch.randn(n, generator=gen)  # [N]
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "old_per_token_logps": (logps + noise).masked_fill(completion_mask == 0, 0.0),
        "advantages": advantages,
        "max_completion_length": c_width,
        "problems": [p["prompt"] for p in problems],
    }


def _slice(batch: dict, start: int, stop: int) -> dict:
    keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "old_per_token_logps", "advantages")
    return {k: batch[k][start:stop] for k in keys}


def _step(trainer, model, inputs, num_items_in_batch) -> tuple[float, object]:
    """One ``GRPOTrainer.training_step`` on ``inputs`` (given, not generated: ``_prepare_inputs`` hands them on as
    they are) with a zeroed gradient; (the loss it returns, the flat gradient of the unwrapped model)."""
    import torch

    trainer.model.zero_grad(set_to_none=True)
    inputs = dict(inputs, ref_per_token_logps=None, num_items_in_batch=num_items_in_batch)
    loss = trainer.training_step(model, inputs, None)
    grad = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double()
            for p in trainer.model.parameters()
        ]
    )
    return float(loss), grad


def loss_types_rank(out_dir, processes: int, seeds=LOSS_SEEDS) -> dict:
    """Per seed and ``loss_type``: the loss ``GRPOTrainer.training_step`` returns on this rank's slice of
    ``loss_batch`` and the gradient (all-reduced over the processes by DDP), with ``num_items_in_batch`` the global
    token count as TRL computes it (``accelerator.gather`` of the local counts). One process also computes each of
    HALVES slices alone (``halves``). Writes ``rank<k>.json`` and, on rank 0, ``grad_seed<s>_<loss_type>.pt``."""
    import torch

    quiet()
    torch.set_num_threads(1)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path, _, _ = sft_checkpoint_path(seed=0)
    policy, tokenizer = load_policy(path)
    train, _ = split_problems()
    result, snapshot = {"seeds": []}, None
    for seed in seeds:
        batch = loss_batch(policy, tokenizer, seed)
        n = batch["completion_ids"].shape[0]
        per_process = split_batch(n, processes)
        entry = {"seed": seed, "problems": batch["problems"], "max_completion_length": batch["max_completion_length"]}
        for loss_type in CLIPPED_LOSS_TYPES:
            config = OnlineConfig(
                prompts_per_step=LOSS_PROMPTS,
                num_generations=LOSS_GENERATIONS,
                max_new_tokens=batch["max_completion_length"],
                loss_type=loss_type,
                epsilon=LOSS_EPSILON,
                epsilon_high=LOSS_EPSILON_HIGH,
            )
            args = grpo_config(config, max_steps=1, per_device_train_batch_size=per_process)
            trainer = make_trainer(copy.deepcopy(policy), tokenizer, train[:LOSS_PROMPTS], args, _no_reward)
            trainer._prepare_inputs = lambda inputs: inputs  # the batch is given, not generated
            trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop during train(); one step here
            accelerator = trainer.accelerator
            snapshot = distributed_snapshot(accelerator)
            if snapshot["num_processes"] != processes:
                raise RuntimeError(f"accelerate sees {snapshot['num_processes']} processes, not {processes}")
            rank = snapshot["process_index"]
            wrapped = accelerator.prepare_model(trainer.model)  # DDP with several processes: all-reduced gradients
            wrapped.train()
            local = _slice(batch, rank * per_process, (rank + 1) * per_process)
            tokens = local["completion_mask"].sum()
            global_tokens = accelerator.gather(tokens.reshape(1)).sum().float()  # as GRPOTrainer computes it
            loss, grad = _step(trainer, wrapped, local, global_tokens)
            row = {
                "loss": loss,
                "local_tokens": int(tokens),
                "local_rows": per_process,
                "grad_norm": float(grad.norm()),
            }
            if rank == 0:
                torch.save(grad, Path(out_dir) / f"grad_seed{seed}_{loss_type}.pt")
            if processes == 1:
                row["halves"] = []
                size = split_batch(n, HALVES)
                for half in range(HALVES):
                    part = _slice(batch, half * size, (half + 1) * size)
                    part_tokens = part["completion_mask"].sum()
                    part_loss, part_grad = _step(trainer, wrapped, part, global_tokens / HALVES)
                    torch.save(part_grad, Path(out_dir) / f"grad_seed{seed}_{loss_type}_half{half}.pt")
                    row["halves"].append({"loss": part_loss, "local_tokens": int(part_tokens)})
            entry[loss_type] = row
        result["seeds"].append(entry)
    result = dict(snapshot, **result)
    _write(out_dir, result["process_index"], result)
    return result


def _no_reward(completions, **kwargs):
    """The reward of a trainer that only computes a training step on a given batch: never sampled, never scored."""
    raise RuntimeError("loss_types_rank computes the loss of a given batch; no reward is scored")


def read_rank_results(out_dir, processes: int) -> list[dict]:
    """The ``rank<k>.json`` of every rank, in rank order (FileNotFoundError naming the missing rank)."""
    results = []
    for rank in range(processes):
        path = Path(out_dir) / f"rank{rank}.json"
        if not path.exists():
            raise FileNotFoundError(f"rank {rank} wrote no result ({path})")
        results.append(json.loads(path.read_text(encoding="utf-8")))
    return results
