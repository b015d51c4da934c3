"""Device placement without a GPU: real_gpu's tensor paths run with the policy's tensors on torch's ``meta`` device.

A meta tensor has a shape, a dtype and a device but no values. An op that mixes it with a CPU tensor (other than a
0-dim CPU scalar, which CUDA accepts too) raises ``Tensor on device cpu is not on the expected device meta!``: the
mixes that stop a CUDA card with "Expected all tensors to be on the same device". What a card can do and meta
cannot, and how ``OnMeta`` (a ``TorchFunctionMode``) stands in for it:

* **data reads** (``bool``, ``float``, ``int``, ``.item()``, ``.tolist()``, ``torch.equal``) of a meta tensor: a device -> host sync
  on a card, impossible without values. ``OnMeta`` answers each from ``READS``, keyed by the reading function;
  a read from a function not listed there raises ``UnlistedRead`` naming it. ``READS`` is the inventory of the
  data-dependent reads on these paths, with the answer a valid batch gives (what the meta run then assumes);
  the control flow they decide is exercised on the CPU by the other tests.
* **host copies** (``.cpu()``, ``.to("cpu")``) of a meta tensor: a device -> host copy on a card. ``OnMeta`` returns
  the CPU tensor the meta one was moved from (``.to(meta)`` of a CPU tensor remembers its source), else zeros of
  its shape and dtype; every host copy is recorded in ``host_copies``.
* **autocast**: torch refuses ``torch.autocast("meta")``; paths run without it (their dtypes are checked on the
  CPU in tests/test_device_numerics.py).
* **sampling** (``model.generate``) reads values at every step (stopping criteria, the sampled ids): it does not
  run on meta. ``rollout_on`` builds what ``sample_group`` returns without sampling (see there).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

META = torch.device("meta")
_READS = {"__bool__", "__float__", "__int__", "__index__", "item", "tolist", "equal"}
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_HERE = str(Path(__file__).resolve())

# (where, function, read) -> the answer a valid batch gives. ``where`` is the module's file name without ``.py``, or
# ``<assignment>:<grade_id>`` for a notebook cell run by ``real_gpu_cells.run_cell``. Every data-dependent read on the paths the
# meta tests run is listed here, and nothing else: a new read fails the tests until it is listed (with its answer).
READS = {
    # tools/post_training_runtime.py: "no row without a scored response token" (a valid batch has none)
    ("post_training_runtime", "response_sequence_logps", "__bool__"): False,
    # transformers' SDPA mask: "is the padding mask all ones?" - the candidate batches are right-padded, the
    # rollouts' completions end at different lengths: no, an explicit mask is built (the path a padded batch takes)
    ("masking_utils", "_ignore_causal_mask_sdpa", "__bool__"): False,
    # tools/experiment/update.py: the loss is finite (else FloatingPointError), its value and the clip fraction
    ("update", "grpo_update_step", "__bool__"): True,
    ("update", "grpo_update_step", "__float__"): 0.5,
    # tools/training_mechanism_runtime.py: each parameter's gradient norm
    ("training_mechanism_runtime", "gradient_l2_norm", "__float__"): 0.5,
    # lesson 3A/3B's input checks (a 0/1 float mask: every value is 0 or 1) and the dapo count
    ("nb03a_cispo_trace_lab", "completion_bool_mask", "__bool__"): True,
    ("nb03b_loss_family_trl", "reduce_per_token_loss", "__float__"): 12.0,
    # lesson 7's grpo_step: the 0/1 mask check, "advantages are finite", the metrics it returns
    ("nb07_online_grpo", "_as_bool_mask", "__bool__"): True,
    ("nb07_online_grpo", "grpo_step", "__bool__"): True,
    ("nb07_online_grpo", "masked_mean", "__float__"): 0.0,
    ("nb07_online_grpo", "grpo_step", "__float__"): 0.5,
    # lesson 7's runtime: the gap between a forward with grad and one without (tools/online/logprobs.py)
    ("logprobs", "grad_forward_gap", "__float__"): 0.0,
    # lesson 7's log_step_metrics on the rollout's mask: the mean completion length
    ("nb07_online_grpo", "log_step_metrics", "__float__"): 3.0,
    # lesson 7's visible grpo_step test: the largest |advantage| and the reference loss, "the parameters moved"
    ("nb07_online_grpo:test_grpo_step_visible", "<module>", "__float__"): 0.0,
    ("nb07_online_grpo:test_grpo_step_visible", "<genexpr>", "equal"): False,
}


class UnlistedRead(AssertionError):
    """A data-dependent read of a meta tensor from a function ``READS`` does not list."""


def _caller() -> tuple[str, str]:
    """(where, function) of the frame that asked for the read: the first one outside torch and this module."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_TORCH_DIR) and filename != _HERE:
            break
        frame = frame.f_back
    if frame is None:
        return "?", "?"
    filename = frame.f_code.co_filename
    where = Path(filename).stem if filename.endswith(".py") else filename
    return where, frame.f_code.co_name


def _is_meta(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "meta"


class OnMeta(TorchFunctionMode):
    """Answer the data reads and host copies of meta tensors (see the module docstring); record both."""

    def __init__(self, reads: dict | None = None):
        super().__init__()
        self.table = dict(READS if reads is None else reads)
        self.reads: Counter = Counter()  # (where, function, read) -> how often
        self.host_copies: Counter = Counter()  # (where, function) -> how often
        self._sources: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(meta tensor) -> (it, CPU source)

    def _host_copy(self, tensor: torch.Tensor, dtype=None) -> torch.Tensor:
        self.host_copies[_caller()] += 1
        kept = self._sources.get(id(tensor))
        if kept is not None and kept[0] is tensor and kept[1].shape == tensor.shape:
            copy = kept[1].clone()
        else:
            copy = torch.zeros(tensor.shape, dtype=tensor.dtype)
        return copy if dtype is None else copy.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _READS and args and _is_meta(args[0]):
            if name == "equal" and args[1].device != args[0].device:  # torch.equal across devices: refused too
                raise RuntimeError(f"Tensor on device {args[1].device.type} is not on the expected device meta!")
            key = (*_caller(), name)
            self.reads[key] += 1
            if key not in self.table:
                raise UnlistedRead(f"data-dependent read of a meta tensor not listed in READS: {key}")
            return self.table[key]
        if name == "cpu" and args and _is_meta(args[0]):
            return self._host_copy(args[0])
        if name == "to" and args and isinstance(args[0], torch.Tensor):
            device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
            if args[0].device.type == "meta" and device is not None and device.type == "cpu":
                return self._host_copy(args[0], dtype)
            out = func(*args, **kwargs)
            if args[0].device.type == "cpu" and _is_meta(out):
                self._sources[id(out)] = (out, args[0])
            return out
        return func(*args, **kwargs)


def on_meta(value):
    """``value`` with every tensor (in dicts, lists and tuples too) moved to meta as a caller's ``.to(device)``
    would, remembering the CPU sources for later host copies (call inside ``OnMeta``)."""
    if isinstance(value, torch.Tensor):
        return value.to(META)
    if isinstance(value, dict):
        return {key: on_meta(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_meta(item) for item in value)
    return value


def device_error(error: BaseException) -> bool:
    """True when ``error`` is a device-mix error between meta and the CPU (what a CUDA card reports as "Expected all
    tensors to be on the same device")."""
    message = str(error)
    return bool(
        re.search(r"Tensor on device (cpu|meta) is not on the expected device (meta|cpu)!", message)
        or ("Expected all tensors to be on the same device" in message and "meta" in message)
    )


# ----------------------------------------------------------------------------------------------- models on meta
def qwen_shaped_on_meta(dtype=torch.bfloat16):
    """(model, tokenizer): Qwen2.5-0.5B's architecture (``tools.tiny_model``) built on meta - no weights, no files -
    with the Qwen-shaped checkpoint's tokenizer (built in memory)."""
    from tools import tiny_model

    tokenizer = tiny_model.build_qwen25_like_tokenizer()
    with torch.device("meta"):
        model = tiny_model._build_model(dict(tiny_model.QWEN25_05B_ARCHITECTURE), tokenizer, 0, dtype)
    model.config.use_cache = False
    return model, tokenizer


# ----------------------------------------------------------------------------------------------- rollouts
# Completions for rollout_on: right, wrong, a scratchpad, text without an integer (rewards differ within a group).
COMPLETIONS = ("26", "25", "6+7=13, 13+9=22, 22+4=26", "I am not sure.")


def rollout_on(model, tokenizer, prompts, num_generations, temperature=1.0, ref_model=None, completions=COMPLETIONS):
    """What lesson 7's ``sample_group`` returns, on the model's device, without sampling (meta cannot sample).

    Every piece is built as ``sample_group`` builds it except the completion ids, which are fixed texts (cycled
    over ``completions``) tokenised with an EOS instead of ``generate``'s samples: ``og.encode_prompts`` then
    ``.to(device)``, ``group_ids`` on the device, ``completion_mask`` by lesson 5's rule on the device, the old
    (and reference) log-probs by ``og.completion_logps`` without grad, masked; ``completions`` the texts.
    """
    from tools import online_grpo as og
    from tools.lessons.nb05_logprobs_masks import completion_mask_from_eos

    device = next(model.parameters()).device
    n = len(prompts) * num_generations
    texts = [completions[i % len(completions)] for i in range(n)]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(len(r) for r in rows)
    ids = torch.full((n, width), tokenizer.pad_token_id, dtype=torch.long)  # [N, C]
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    encoded = og.encode_prompts(tokenizer, list(prompts))
    prompt_ids = encoded["input_ids"].repeat_interleave(num_generations, dim=0).to(device)  # [N, P]
    prompt_mask = encoded["attention_mask"].repeat_interleave(num_generations, dim=0).to(device)  # [N, P]
    completion_ids = ids.to(device)  # [N, C]
    group_ids = torch.arange(len(prompts), device=device).repeat_interleave(num_generations)  # [N]
    with torch.no_grad():
        mask = completion_mask_from_eos(completion_ids, int(tokenizer.eos_token_id))  # [N, C]
        old = og.completion_logps(model, prompt_ids, prompt_mask, completion_ids, mask, temperature=temperature)
        ref = None
        if ref_model is not None:
            ref = og.completion_logps(ref_model, prompt_ids, prompt_mask, completion_ids, mask, temperature=temperature)
            ref = ref.masked_fill(~mask, 0.0)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": mask,
        "old_per_token_logps": old.masked_fill(~mask, 0.0),
        "ref_per_token_logps": ref,
        "completions": texts,
        "group_ids": group_ids,
    }
