"""Response batches and response log-probs for post-training (GRPO) on a real causal LM.

* ``build_response_batch`` tokenises (prompt, response) pairs - through the tokenizer's chat template
  when it has one - into right-padded ``input_ids`` / ``attention_mask`` and a ``response_mask`` that is
  True exactly on the response's tokens (its end-of-turn token included).
* ``response_sequence_logps`` runs the model once and returns per-token log-probs of the response
  tokens and their per-sequence mean (or sum), without a second ``[B, T, V]`` tensor.
"""

from __future__ import annotations

import torch

from tools.tiny_model import IM_END

__all__ = [
    "build_response_batch",
    "move_response_batch",
    "response_sequence_logps",
    "saved_tensor_bytes",
    "selective_log_softmax",
]

# Tokens that close a turn in common chat templates (ChatML / Qwen, Llama 3, Gemma, Phi-3).
_END_OF_TURN_TOKENS = (IM_END, "<|eot_id|>", "<end_of_turn>", "<|end|>")


def _encode(tokenizer, text: str, add_special_tokens: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])


def _end_of_turn_ids(tokenizer) -> set[int]:
    ids = set()
    vocab = tokenizer.get_vocab()
    for token in _END_OF_TURN_TOKENS:
        if token in vocab:
            ids.add(vocab[token])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _chat_row(tokenizer, prompt: str, response: str, end_ids: set[int]) -> tuple[list[int], int, int]:
    """(ids of the whole rendered conversation, response start, response end) for one pair."""
    prompt_text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    full_text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False
    )
    if not full_text.startswith(prompt_text):
        raise ValueError("聊天模板渲染的完整对话不以“提示 + 生成提示”开头，无法确定回答从哪个词元开始")
    prompt_ids = _encode(tokenizer, prompt_text, add_special_tokens=False)
    full_ids = _encode(tokenizer, full_text, add_special_tokens=False)
    if full_ids[: len(prompt_ids)] != prompt_ids:
        # A BPE merge crossed the prompt/response boundary: keep the prompt tokenised as generation sees it.
        full_ids = prompt_ids + _encode(tokenizer, full_text[len(prompt_text) :], add_special_tokens=False)
    start = len(prompt_ids)
    tail = full_ids[start:]
    # The response runs up to and including the first end-of-turn token after the prompt; what the
    # template appends after it (ChatML/Qwen: a newline after <|im_end|>) is template text.
    end = next((start + i + 1 for i, token in enumerate(tail) if token in end_ids), len(full_ids))
    return full_ids, start, end


def build_response_batch(tokenizer, prompts, responses, max_length) -> dict:
    """Tokenise (prompt, response) pairs into a right-padded batch with a response mask.

    Returns ``{"input_ids": [B, T] long, "attention_mask": [B, T] long, "response_mask": [B, T] bool}``,
    ``T`` = the longest row (at most ``max_length``).

    * With a chat template: the prompt is the user turn, the response the assistant turn. The response
      starts where the prompt rendered with ``add_generation_prompt=True`` ends and runs to the
      end-of-turn token (``<|im_end|>`` for ChatML), which is part of the response; text the template
      adds after it (a newline) is in ``input_ids`` but not in the mask.
    * Without a chat template (``tokenizer.chat_template is None``): plain concatenation
      ``prompt ids (with the tokenizer's own special tokens, e.g. BOS) + response ids + eos``; the
      response ids and the eos are the response.
    * Padding on the right with the pad token (the eos token when there is none); rows longer than
      ``max_length`` are cut on the right. A row whose response would be cut away entirely raises
      ``ValueError``.
    """
    prompts = list(prompts)
    responses = list(responses)
    if not prompts or len(prompts) != len(responses):
        raise ValueError(
            f"prompts 与 responses 必须是等长的非空序列，收到 {len(prompts)} 个提示和 {len(responses)} 个回答"
        )
    for index, (prompt, response) in enumerate(zip(prompts, responses)):
        if not isinstance(prompt, str) or not isinstance(response, str):
            raise ValueError(f"第 {index} 行：提示和回答都必须是字符串")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"max_length 必须是不小于 2 的整数，收到 {max_length!r}")

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        raise ValueError("分词器既没有 pad_token 也没有 eos_token，无法右侧填充")
    use_template = bool(getattr(tokenizer, "chat_template", None))
    end_ids = _end_of_turn_ids(tokenizer) if use_template else set()
    if not use_template and tokenizer.eos_token_id is None:
        raise ValueError("分词器没有聊天模板，也没有 eos_token：无法标出回答的结尾")

    rows: list[list[int]] = []
    spans: list[tuple[int, int]] = []
    for index, (prompt, response) in enumerate(zip(prompts, responses)):
        if use_template:
            full, start, end = _chat_row(tokenizer, prompt, response, end_ids)
        else:
            prompt_ids = _encode(tokenizer, prompt, add_special_tokens=True)
            response_ids = _encode(tokenizer, response, add_special_tokens=False) + [int(tokenizer.eos_token_id)]
            full = prompt_ids + response_ids
            start, end = len(prompt_ids), len(full)
        # response span: [start, end)
        if start == 0:
            raise ValueError(f"第 {index} 行：提示为空且分词器不加 BOS，回答的第一个词元没有可用的上文")
        if end == start:
            raise ValueError(f"第 {index} 行：回答没有产生任何词元")
        if start >= max_length:
            raise ValueError(
                f"第 {index} 行：截断到 max_length={max_length} 后没有留下任何回答词元"
                f"（提示占 {start} 个词元）；请增大 max_length 或缩短提示"
            )
        rows.append(full[:max_length])
        spans.append((start, min(end, max_length)))

    width = max(len(row) for row in rows)
    batch_size = len(rows)
    input_ids = torch.full((batch_size, width), int(pad_id), dtype=torch.long)  # [B, T]
    attention_mask = torch.zeros((batch_size, width), dtype=torch.long)  # [B, T]
    response_mask = torch.zeros((batch_size, width), dtype=torch.bool)  # [B, T]
    for index, (row, (start, end)) in enumerate(zip(rows, spans)):
        input_ids[index, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[index, : len(row)] = 1
        response_mask[index, start:end] = True
    return {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask}


def move_response_batch(batch: dict, device) -> dict:
    """Copy of ``batch`` with every tensor moved to ``device`` (other values kept as they are)."""
    return {key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}


def _blocks(length: int, rows: int, chunk: int):
    """(row, start, stop) of every ``chunk``-position block of a ``[rows, length, V]`` tensor."""
    for row in range(rows):
        for start in range(0, length, chunk):
            yield row, start, min(start + chunk, length)


class _SavedLogitsSelectiveLogSoftmax(torch.autograd.Function):
    """``log_softmax(logits, -1).gather(-1, index)`` whose backward keeps only the logits themselves.

    For half-precision logits (what bf16/fp16 autocast gives the LM head). Forward: block by block
    (one batch row, ``tokens_per_chunk`` positions), upcast to float32, ``logsumexp`` and the target
    logit. Saved for backward: the logits (already alive: no new memory), ``index`` and the ``[B, T]``
    float32 ``logsumexp`` - about ``(8 + 4) / (2 * V)`` of the logits, 0.004 % for V = 151,936.
    Backward: the same blocks again, ``grad = g * (onehot(index) - softmax(logits))``, written into the
    logits-sized gradient that autograd needs anyway. Every temporary is ``[tokens_per_chunk, V]``.
    Blocks are views (``logits[b, t0:t1]``), so a shifted view ``logits[:, :-1]`` is never copied.
    """

    @staticmethod
    def forward(ctx, logits, index, tokens_per_chunk):  # logits [B, T, V], index [B, T]
        compute = torch.promote_types(logits.dtype, torch.float32)
        batch, length = index.shape
        lse = torch.empty((batch, length), dtype=compute, device=logits.device)  # [B, T]
        target = torch.empty((batch, length), dtype=compute, device=logits.device)  # [B, T]
        for row, start, stop in _blocks(length, batch, tokens_per_chunk):
            block = logits[row, start:stop].to(compute)  # [chunk, V] float32 temporary
            lse[row, start:stop] = torch.logsumexp(block, dim=-1)
            target[row, start:stop] = block.gather(-1, index[row, start:stop].unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(logits, index, lse)
        ctx.tokens_per_chunk = tokens_per_chunk
        return target - lse  # [B, T]

    @staticmethod
    def backward(ctx, grad_output):  # grad_output [B, T]
        logits, index, lse = ctx.saved_tensors
        batch, length = index.shape
        grad_output = grad_output.to(lse.dtype)
        grad_logits = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)  # [B, T, V]
        for row, start, stop in _blocks(length, batch, ctx.tokens_per_chunk):
            block = logits[row, start:stop].to(lse.dtype)  # [chunk, V]
            g = grad_output[row, start:stop].unsqueeze(-1)  # [chunk, 1]
            block_grad = torch.exp(block - lse[row, start:stop].unsqueeze(-1)).mul_(g).neg_()  # [chunk, V]
            block_grad.scatter_add_(-1, index[row, start:stop].unsqueeze(-1), g)
            grad_logits[row, start:stop] = block_grad  # cast back to the logits' dtype
        return grad_logits, None, None


def selective_log_softmax(
    logits: torch.Tensor, index: torch.Tensor, rows_per_chunk: int = 1, tokens_per_chunk: int = 16
) -> torch.Tensor:
    """Log-probability of ``index`` under ``softmax(logits)``, without a second ``logits``-sized tensor.

    ``logits`` is ``[B, T, V]`` (or ``[B, V]``), ``index`` is ``[B, T]`` (or ``[B]``); the result has
    ``index``'s shape. It equals the naive::

        torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)

    which allocates a full ``[B, T, V]`` log-softmax next to the logits. Here:

    * float32 / float64: gather the target logits (``[B, T]``) and subtract ``logsumexp`` over the
      vocabulary computed ``rows_per_chunk`` batch rows and ``tokens_per_chunk`` positions at a time
      (defaults 1 and 16), so the largest temporary is ``[rows_per_chunk, tokens_per_chunk, V]`` -
      a few MiB even for Qwen2.5's 151,936-token vocabulary (TRL chunks by batch row only, whose
      ``[T, V]`` temporary is 1/B of the logits);
    * bfloat16 / float16: the custom autograd function ``_SavedLogitsSelectiveLogSoftmax``: float32
      math on ``[tokens_per_chunk, V]`` blocks, and for backward it keeps only the half-precision logits
      (plus ``[B, T]`` index and logsumexp), not a float32 ``log_softmax`` per row, which would keep
      2x the bf16 logits alive until backward. The result is float32 for half-precision inputs (a bf16
      log-prob near -6 is only good to ~0.03). ``benchmarks/run.py`` measures the kept bytes
      (``logprobs_peak_memory_vs_logits_bf16``).

    Gradients flow to ``logits`` in both paths.
    """
    if logits.shape[:-1] != index.shape:
        raise ValueError(f"logits {tuple(logits.shape)} 与 index {tuple(index.shape)} 的前几维必须一致")
    for name, value in (("rows_per_chunk", rows_per_chunk), ("tokens_per_chunk", tokens_per_chunk)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} 必须是正整数，收到 {value!r}")
    index = index.long()
    if logits.dtype in (torch.float32, torch.float64):
        target_logits = logits.gather(-1, index.unsqueeze(-1)).squeeze(-1)  # [B, T]
        pieces = []
        for part in logits.split(rows_per_chunk, dim=0):  # view [rows_per_chunk, T, V] (or [rows, V])
            if part.dim() == 3:
                pieces.append(
                    torch.cat(
                        [
                            torch.logsumexp(block, dim=-1)  # [rows, tokens_per_chunk]
                            for block in part.split(tokens_per_chunk, dim=1)
                        ],
                        dim=1,
                    )
                )
            else:
                pieces.append(torch.logsumexp(part, dim=-1))  # [rows]
        logsumexp_values = torch.cat(pieces, dim=0)  # [B, T]
        return target_logits - logsumexp_values  # [B, T]
    if logits.dim() == 2:  # [B, V] -> [B, 1, V] view
        return _SavedLogitsSelectiveLogSoftmax.apply(logits.unsqueeze(1), index.unsqueeze(1), tokens_per_chunk).squeeze(
            1
        )  # [B]
    return _SavedLogitsSelectiveLogSoftmax.apply(logits, index, tokens_per_chunk)  # [B, T] float32


def saved_tensor_bytes(fn, *args) -> dict:
    """Bytes autograd keeps for backward while ``fn(*args)`` runs, counted once per storage.

    Uses ``torch.autograd.graph.saved_tensors_hooks``: every tensor an autograd node saves passes
    through the pack hook; tensors sharing a storage (views of the logits) count once, by the storage's
    size. Returns ``{"saved_bytes": int, "storages": int, "output": fn's result}``.
    """
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = fn(*args)
    return {"saved_bytes": int(sum(storages.values())), "storages": len(storages), "output": output}


def response_sequence_logps(model, batch: dict, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of the response tokens under ``model``: ``(sequence_logps [B], token_logps [B, T-1])``.

    ``token_logps[b, t]`` is ``log p(input_ids[b, t+1] | input_ids[b, :t+1])`` where
    ``response_mask[b, t+1]`` is True, and 0 elsewhere (prompt, template text, padding).
    ``sequence_logps`` is their mean over the response tokens when ``normalize`` (the default), their
    sum otherwise. The model runs once; its ``[B, T, V]`` logits are the only tensor of that size
    (see ``selective_log_softmax``). The naive equivalent, which allocates a second ``[B, T-1, V]``::

        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits      # [B, T, V]
        token_logps = torch.log_softmax(logits[:, :-1], -1).gather(
            -1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)                            # [B, T-1]
        token_logps = token_logps * response_mask[:, 1:]                               # [B, T-1]
        sequence_logps = token_logps.sum(-1) / response_mask[:, 1:].sum(-1)            # [B] (normalize)
    """
    input_ids = batch["input_ids"]  # [B, T]
    attention_mask = batch["attention_mask"]  # [B, T]
    response_mask = batch["response_mask"].bool()  # [B, T]
    if input_ids.dim() != 2 or input_ids.shape[1] < 2:
        raise ValueError(f"input_ids 必须是 [B, T] 且 T >= 2，收到 {tuple(input_ids.shape)}")
    token_mask = response_mask[:, 1:]  # [B, T-1] the token predicted at t is input_ids[:, t+1]
    counts = token_mask.sum(dim=-1)  # [B]
    if bool((counts == 0).any()):
        empty = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"第 {empty} 行没有可计分的回答词元（response_mask[:, 1:] 全为 False）")
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # [B, T, V]
    next_logits = logits[:, :-1, :]  # [B, T-1, V] a view, no copy
    targets = input_ids[:, 1:]  # [B, T-1]
    token_logps = selective_log_softmax(next_logits, targets)  # [B, T-1]
    token_logps = token_logps.masked_fill(~token_mask, 0.0)  # [B, T-1]
    sequence_logps = token_logps.sum(dim=-1)  # [B]
    if normalize:
        sequence_logps = sequence_logps / counts.to(sequence_logps.dtype)  # [B]
    return sequence_logps, token_logps
