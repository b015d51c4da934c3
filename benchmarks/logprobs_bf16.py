"""Log-prob memory in bf16: the bytes autograd keeps for backward, per logits byte.

``logprobs_peak_memory_vs_logits_bf16``: ``tools.post_training_runtime.selective_log_softmax`` against the
course's previous row-wise float32 path; counted, not timed, so the figure is exact at any size.
"""

from __future__ import annotations

from benchmarks.harness import goal_met, metric, unavailable


def bench_logprobs_bf16(tiny: bool) -> list[dict]:
    """Bytes autograd keeps for backward when bf16 logits become response log-probs, per logits byte.

    Counted with ``tools.post_training_runtime.saved_tensor_bytes`` (a ``saved_tensors_hooks`` pack hook,
    once per storage): what stays alive from the forward until backward, on top of the model's own
    activations. Deterministic (no timing, no allocator), so CPU bytes are the bytes a CUDA run keeps.
    """
    import torch

    name = "logprobs_peak_memory_vs_logits_bf16"
    baseline = {
        "what": "row-wise log_softmax(row.float()).gather(...) - the course's previous bf16 path "
        "(keeps each row's float32 log-softmax for backward)",
        "unit": "x logits bytes",
    }
    try:
        from tools.post_training_runtime import saved_tensor_bytes, selective_log_softmax
    except ImportError as error:
        return [unavailable(name, "x logits bytes", baseline, f"tools.post_training_runtime: {error}", "<= 1.05")]
    batch, length, vocab = (2, 8, 4096) if tiny else (8, 28, 151936)  # full: Qwen2.5's vocabulary
    torch.manual_seed(0)
    ids = torch.randint(vocab, (batch, length))  # [B, T]
    logits_bytes = batch * length * vocab * 2  # bf16

    def previous(logits):  # the row-wise float32 log_softmax the course used before
        rows = [
            torch.log_softmax(row.float(), dim=-1).gather(-1, idx.unsqueeze(-1)).squeeze(-1)  # [T-1]
            for row, idx in zip(logits[:, :-1], ids[:, 1:])
        ]
        return torch.stack(rows)  # [B, T-1]

    variants = {
        "runtime": lambda logits: selective_log_softmax(logits[:, :-1], ids[:, 1:]),
        "previous_rowwise_fp32": previous,
        "naive_bf16": lambda logits: (
            torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        ),
    }
    kept, outputs = {}, {}
    for variant, fn in variants.items():
        logits = (
            torch.randn(batch, length, vocab, generator=torch.Generator().manual_seed(1))
            .to(torch.bfloat16)
            .requires_grad_(True)
        )  # [B, T, V]
        result = saved_tensor_bytes(fn, logits)
        kept[variant] = {
            "saved_vs_logits": result["saved_bytes"] / logits_bytes,
            "saved_mib": result["saved_bytes"] / 2**20,
            "storages": result["storages"],
        }
        outputs[variant] = result["output"].detach().float()
        result["output"].sum().backward()  # the saved tensors are really usable: backward runs
        del logits, result
    diff = float((outputs["runtime"] - outputs["previous_rowwise_fp32"]).abs().max())
    value = kept["runtime"]["saved_vs_logits"]
    return [
        metric(
            name,
            value,
            "x logits bytes",
            dict(baseline, value=kept["previous_rowwise_fp32"]["saved_vs_logits"]),
            {
                "goal": "<= 1.05",
                "goal_met": goal_met(value, "<=", 1.05),
                "shape": {"B": batch, "T": length, "V": vocab, "dtype": "bfloat16", "device": "cpu"},
                "logits_mib": logits_bytes / 2**20,
                "variants": kept,
                "max_abs_diff_runtime_vs_previous": diff,
                "method": (
                    "bf16 logits [B, T, V] with requires_grad; log-probs of input_ids[:, 1:] from logits[:, :-1]; "
                    "every tensor an autograd node saves for backward passes a saved_tensors_hooks pack hook and is "
                    "counted once per storage (views of the logits count as the logits); value = saved bytes / "
                    "logits bytes, so keeping the logits alone is 1.0. runtime = "
                    "tools.post_training_runtime.selective_log_softmax (custom autograd function: keeps the bf16 "
                    "logits, index and a [B, T] float32 logsumexp); previous_rowwise_fp32 = the row-wise float32 "
                    "log_softmax it replaced; naive_bf16 = log_softmax in bf16 (keeps its bf16 output, and is "
                    "~0.03 nats coarse). Transient forward/backward blocks are [16, V] float32 and not counted."
                ),
            },
        )
    ]
