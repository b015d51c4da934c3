"""tools.post_training_runtime on the tiny real Qwen2 checkpoint: response masks, log-prob parity, memory."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tools.post_training_runtime import (
    build_response_batch,
    move_response_batch,
    response_sequence_logps,
    saved_tensor_bytes,
    selective_log_softmax,
)
from tools.tiny_model import tiny_checkpoint_path

PROMPT = "Return only the integer result of 2 + 2."
# The prompt rendered as a ChatML user turn plus the generation prompt, token by token (20 tokens).
CHAT_PROMPT_TOKENS = [
    "<|im_start|>",
    "user",
    "Ċ",
    "Return",
    "Ġonly",
    "Ġthe",
    "Ġinteger",
    "Ġresult",
    "Ġof",
    "Ġ",
    "2",
    "Ġ+",
    "Ġ",
    "2",
    ".",
    "<|im_end|>",
    "Ċ",
    "<|im_start|>",
    "assistant",
    "Ċ",
]
PLAIN_PROMPT_TOKENS = CHAT_PROMPT_TOKENS[3:15]  # "Return ... 2 + 2." (12 tokens)
ANSWER_TOKENS = ["The", "Ġanswer", "Ġis", "Ġ", "4", "."]


@pytest.fixture(scope="module")
def checkpoint():
    return tiny_checkpoint_path()


@pytest.fixture()
def tokenizer(checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)


@pytest.fixture()
def model(checkpoint):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True).eval()


def _tokens(tokenizer, batch, row):
    return tokenizer.convert_ids_to_tokens(batch["input_ids"][row].tolist())


def _positions(mask_row):
    return torch.nonzero(mask_row).flatten().tolist()


def test_chat_template_mask_hand_worked(tokenizer):
    batch = build_response_batch(tokenizer, [PROMPT, PROMPT], ["4", "The answer is 4."], max_length=64)
    assert set(batch) == {"input_ids", "attention_mask", "response_mask"}
    assert batch["input_ids"].dtype == torch.long and batch["response_mask"].dtype == torch.bool
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["response_mask"].shape == (2, 28)
    # row 0: 20 prompt tokens, "4", <|im_end|>, the template's trailing newline, then 5 pads
    assert _tokens(tokenizer, batch, 0) == CHAT_PROMPT_TOKENS + ["4", "<|im_end|>", "Ċ"] + ["<|endoftext|>"] * 5
    assert _positions(batch["response_mask"][0]) == [20, 21]  # "4" and <|im_end|>; not the newline (22)
    assert batch["attention_mask"][0].tolist() == [1] * 23 + [0] * 5
    # row 1: the longest row, no padding
    assert _tokens(tokenizer, batch, 1) == CHAT_PROMPT_TOKENS + ANSWER_TOKENS + ["<|im_end|>", "Ċ"]
    assert _positions(batch["response_mask"][1]) == list(range(20, 27))
    assert batch["attention_mask"][1].tolist() == [1] * 28


def test_chat_template_without_trailing_newline(tokenizer):
    tokenizer.chat_template = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' -}}"
        "{%- if not loop.last -%}{{- '\\n' -}}{%- endif -%}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '\\n<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    batch = build_response_batch(tokenizer, [PROMPT], ["4"], max_length=64)
    assert _tokens(tokenizer, batch, 0) == CHAT_PROMPT_TOKENS + ["4", "<|im_end|>"]
    assert _positions(batch["response_mask"][0]) == [20, 21]


def test_plain_concatenation_without_chat_template(tokenizer):
    tokenizer.chat_template = None
    batch = build_response_batch(tokenizer, [PROMPT, PROMPT], ["4", "The answer is 4."], max_length=64)
    assert batch["input_ids"].shape == (2, 19)
    assert _tokens(tokenizer, batch, 0) == PLAIN_PROMPT_TOKENS + ["4", "<|im_end|>"] + ["<|endoftext|>"] * 5
    assert _positions(batch["response_mask"][0]) == [12, 13]  # response + eos
    assert _tokens(tokenizer, batch, 1) == PLAIN_PROMPT_TOKENS + ANSWER_TOKENS + ["<|im_end|>"]
    assert _positions(batch["response_mask"][1]) == list(range(12, 19))
    assert batch["attention_mask"].sum(dim=1).tolist() == [14, 19]


def test_pad_falls_back_to_eos(tokenizer):
    tokenizer.pad_token = None
    batch = build_response_batch(tokenizer, [PROMPT, PROMPT], ["4", "The answer is 4."], max_length=64)
    assert batch["input_ids"][0, 23:].tolist() == [tokenizer.eos_token_id] * 5
    assert _positions(batch["response_mask"][0]) == [20, 21]


def test_truncation(tokenizer):
    with pytest.raises(ValueError, match=r"第 1 行.*max_length=20"):
        build_response_batch(tokenizer, ["2 + 2?", PROMPT], ["4", "4"], max_length=20)
    batch = build_response_batch(tokenizer, [PROMPT], ["The answer is 4."], max_length=22)
    assert batch["input_ids"].shape == (1, 22)
    assert _positions(batch["response_mask"][0]) == [20, 21]  # cut inside the response: what is left counts


def test_input_contract(tokenizer):
    with pytest.raises(ValueError):
        build_response_batch(tokenizer, [PROMPT], ["4", "5"], max_length=64)
    with pytest.raises(ValueError):
        build_response_batch(tokenizer, [], [], max_length=64)
    with pytest.raises(ValueError):
        build_response_batch(tokenizer, [PROMPT], ["4"], max_length=1)


def test_move_response_batch(tokenizer):
    batch = build_response_batch(tokenizer, [PROMPT], ["4"], max_length=64)
    moved = move_response_batch(batch, torch.device("cpu"))
    assert moved is not batch and set(moved) == set(batch)
    assert all(torch.equal(moved[key], batch[key]) and moved[key].device.type == "cpu" for key in batch)


def _fixture_batch(tokenizer):
    prompts = [PROMPT] * 4 + ["Return only the integer result of 3 * 3."] * 4
    responses = ["4", "5", "The answer is 4.", "I do not know.", "9", "6", "The answer is 9.", "10"]
    return build_response_batch(tokenizer, prompts, responses, max_length=64)


def _naive(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # [B, T, V]
    token = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:].unsqueeze(-1)).squeeze(-1)
    mask = batch["response_mask"][:, 1:]
    token = torch.where(mask, token, torch.zeros_like(token))
    return token.sum(-1) / mask.sum(-1), token.sum(-1), token, logits


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_logps_parity_full_precision(model, tokenizer, dtype, atol):
    batch = _fixture_batch(tokenizer)
    model.to(dtype)
    with torch.no_grad():
        mean_ref, sum_ref, token_ref, _ = _naive(model, batch)
        mean, token = response_sequence_logps(model, batch, normalize=True)
        total, token_sum = response_sequence_logps(model, batch, normalize=False)
    assert token.shape == (8, batch["input_ids"].shape[1] - 1) and mean.shape == (8,)
    assert token.dtype == dtype
    torch.testing.assert_close(token, token_ref, atol=atol, rtol=0)
    torch.testing.assert_close(mean, mean_ref, atol=atol, rtol=0)
    torch.testing.assert_close(total, sum_ref, atol=atol * 10, rtol=0)
    torch.testing.assert_close(token_sum, token)
    assert bool((token[~batch["response_mask"][:, 1:]] == 0).all())
    assert bool((token[batch["response_mask"][:, 1:]] < 0).all())
    # the mean really is sum / number of response tokens, and differs from the sum
    counts = batch["response_mask"][:, 1:].sum(-1)
    torch.testing.assert_close(mean * counts.to(dtype), total, atol=atol * 10, rtol=0)
    assert not torch.allclose(mean, total)


def test_logps_parity_bfloat16(model, tokenizer):
    batch = _fixture_batch(tokenizer)
    model.to(torch.bfloat16)
    with torch.no_grad():
        mean_bf16, sum_bf16, token_bf16, logits = _naive(model, batch)
        mean, token = response_sequence_logps(model, batch, normalize=True)
        total, _ = response_sequence_logps(model, batch, normalize=False)
    assert logits.dtype == torch.bfloat16 and token.dtype == torch.float32
    mask = batch["response_mask"][:, 1:]
    # same bf16 logits, log-softmax in float32: tight
    exact = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    exact = torch.where(mask, exact, torch.zeros_like(exact))
    torch.testing.assert_close(token, exact, atol=1e-5, rtol=0)
    # the all-bf16 naive computation: equal up to bf16 rounding
    torch.testing.assert_close(token, token_bf16.float(), atol=6e-2, rtol=1e-2)
    torch.testing.assert_close(mean, mean_bf16.float(), atol=6e-2, rtol=1e-2)
    torch.testing.assert_close(total, sum_bf16.float(), atol=2e-1, rtol=1e-2)


def test_logps_gradients_match_naive(model, tokenizer):
    batch = _fixture_batch(tokenizer)
    params = [p for p in model.parameters()]
    mean, _ = response_sequence_logps(model, batch)
    grads = torch.autograd.grad(mean.sum(), params)
    mean_ref, _, _, _ = _naive(model, batch)
    grads_ref = torch.autograd.grad(mean_ref.sum(), params)
    for grad, grad_ref in zip(grads, grads_ref):
        torch.testing.assert_close(grad, grad_ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows_per_chunk", [1, 2, 3, 5, 8])
def test_selective_log_softmax_matches_naive(dtype, rows_per_chunk):
    generator = torch.Generator().manual_seed(7)
    logits = (torch.randn(5, 6, 33, generator=generator, dtype=torch.float64) * 4).to(dtype)  # [B, T, V]
    index = torch.randint(0, 33, (5, 6), generator=generator)  # [B, T]
    result = selective_log_softmax(logits, index, rows_per_chunk=rows_per_chunk)
    naive = torch.log_softmax(logits.double(), -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1e-5, torch.float16: 1e-5}[dtype]
    assert result.shape == (5, 6)
    torch.testing.assert_close(result.double(), naive, atol=tol, rtol=0)
    if dtype in (torch.bfloat16, torch.float16):
        naive_half = torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(result, naive_half.float(), atol=0.1, rtol=2e-2)


def test_selective_log_softmax_rejects_bad_chunk():
    with pytest.raises(ValueError):
        selective_log_softmax(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), rows_per_chunk=0)
    with pytest.raises(ValueError):
        selective_log_softmax(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))


class _LargeTensorRecorder(TorchDispatchMode):
    """Records every op output whose storage holds at least ``threshold`` bytes, and logsumexp inputs."""

    def __init__(self, threshold, existing=()):
        super().__init__()
        self.threshold = threshold
        self.existing = {tensor.untyped_storage().data_ptr() for tensor in existing}  # inputs, views of them
        self.large = {}  # storage data_ptr -> op that produced it
        self.logsumexp_inputs = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if "logsumexp" in str(func):
            self.logsumexp_inputs.append(tuple(args[0].shape))
        for value in tree_leaves(out):
            if (
                isinstance(value, torch.Tensor)
                and value.untyped_storage().nbytes() >= self.threshold
                and value.untyped_storage().data_ptr() not in self.existing
            ):
                self.large.setdefault(value.untyped_storage().data_ptr(), str(func))
        return out


def test_selective_log_softmax_chunks_rows():
    logits = torch.randn(5, 7, 64)  # [B, T, V]
    index = torch.randint(0, 64, (5, 7))
    with _LargeTensorRecorder(logits.numel() * 2, existing=[logits]) as recorder:  # half the logits' bytes
        selective_log_softmax(logits, index, rows_per_chunk=2)
    assert recorder.logsumexp_inputs == [(2, 7, 64), (2, 7, 64), (1, 7, 64)]
    assert recorder.large == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_no_second_vocabulary_sized_tensor(model, tokenizer, dtype):
    batch = _fixture_batch(tokenizer)
    batch_size, width = batch["input_ids"].shape
    vocab = model.config.vocab_size
    # Any tensor at least as large as [B, T-1, V] in the smaller dtype counts as vocabulary-sized.
    threshold = batch_size * (width - 1) * vocab * 2
    model.to(dtype)
    with _LargeTensorRecorder(threshold) as recorder:
        response_sequence_logps(model, batch)
    with torch.no_grad(), _LargeTensorRecorder(threshold) as naive_recorder:
        _naive(model, batch)
    # the model's logits are the only vocabulary-sized tensor ...
    assert len(recorder.large) == 1, recorder.large
    if dtype == torch.float32:  # [1 row, 16 tokens, V] blocks
        assert all(shape[0] == 1 for shape in recorder.logsumexp_inputs)
    else:  # half precision: [<= 16 tokens, V] float32 blocks of one row
        assert recorder.logsumexp_inputs and all(
            len(shape) == 2 and shape[0] <= 16 for shape in recorder.logsumexp_inputs
        )
    # ... while the naive log_softmax makes a second one (the recorder does see it)
    assert len(naive_recorder.large) == 2, naive_recorder.large


def test_rows_without_scored_response_token_are_rejected(model, tokenizer):
    batch = build_response_batch(tokenizer, [PROMPT], ["4"], max_length=64)
    batch["response_mask"][:] = False
    with pytest.raises(ValueError):
        response_sequence_logps(model, batch)


@pytest.mark.parametrize("tokens_per_chunk", [1, 7, 16, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_selective_log_softmax_token_chunks_match_naive(tokens_per_chunk, dtype):
    """Chunking along the sequence (T=40 is not a multiple of most chunk sizes) changes nothing."""
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 40, 50, generator=generator, dtype=dtype, requires_grad=True)  # [B, T, V]
    index = torch.randint(0, 50, (3, 40), generator=generator)  # [B, T]
    ours = selective_log_softmax(logits, index, rows_per_chunk=2, tokens_per_chunk=tokens_per_chunk)
    naive = torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ours, naive, atol=1e-6 if dtype == torch.float32 else 1e-12, rtol=0)
    (grad_ours,) = torch.autograd.grad(ours.sum(), logits)
    (grad_naive,) = torch.autograd.grad(naive.sum(), logits)
    torch.testing.assert_close(grad_ours, grad_naive, atol=1e-6 if dtype == torch.float32 else 1e-12, rtol=0)
    with pytest.raises(ValueError, match="tokens_per_chunk"):
        selective_log_softmax(logits, index, tokens_per_chunk=0)


# ------------------------------------------------------------------------------ half precision: what backward keeps
def _previous_rowwise(logits, index):
    """The course's earlier bf16 path: a float32 log_softmax per row (kept by autograd for backward)."""
    return torch.stack(
        [
            torch.log_softmax(row.float(), -1).gather(-1, idx.unsqueeze(-1)).squeeze(-1)
            for row, idx in zip(logits, index)
        ]
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_backward_keeps_only_the_logits(dtype):
    generator = torch.Generator().manual_seed(3)
    base = torch.randn(4, 29, 3001, generator=generator)  # [B, T+1, V]
    index = torch.randint(0, 3001, (4, 29), generator=generator)  # [B, T+1]
    logits_bytes = base.numel() * 2
    logits = base.to(dtype).requires_grad_(True)
    kept = saved_tensor_bytes(lambda x: selective_log_softmax(x[:, :-1], index[:, 1:]), logits)
    previous = saved_tensor_bytes(
        lambda x: _previous_rowwise(x[:, :-1], index[:, 1:]), base.to(dtype).requires_grad_(True)
    )
    assert kept["saved_bytes"] / logits_bytes <= 1.05  # the logits themselves (1.0) + [B, T] index and logsumexp
    assert previous["saved_bytes"] / logits_bytes >= 1.8  # what the float32 row copies cost
    assert kept["output"].dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_gradients_match_float32(dtype):
    generator = torch.Generator().manual_seed(4)
    base = (torch.randn(3, 9, 257, generator=generator) * 3).to(dtype)  # [B, T+1, V] values exact in dtype
    index = torch.randint(0, 257, (3, 9), generator=generator)  # [B, T+1]
    weights = torch.randn(3, 8, generator=generator)  # [B, T]
    half = base.clone().requires_grad_(True)
    full = base.float().requires_grad_(True)
    out = selective_log_softmax(half[:, :-1], index[:, 1:], tokens_per_chunk=3)  # blocks that do not divide T
    ref = torch.log_softmax(full[:, :-1], -1).gather(-1, index[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    assert half.grad.dtype == dtype and half.grad[:, -1].abs().max() == 0  # the unshifted last position
    tol = 8e-3 if dtype == torch.bfloat16 else 1e-3  # the float32 gradient rounded to the logits' dtype
    torch.testing.assert_close(half.grad.float(), full.grad, atol=tol, rtol=1e-2)


def test_saved_logits_function_gradcheck_float64():
    from tools.post_training_runtime import _SavedLogitsSelectiveLogSoftmax

    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 5, 7, generator=generator, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 7, (2, 5), generator=generator)
    assert torch.autograd.gradcheck(lambda x: _SavedLogitsSelectiveLogSoftmax.apply(x, index, 2), (logits,))
    two_d = torch.randn(3, 11, dtype=torch.bfloat16, requires_grad=True)  # [B, V]
    value = selective_log_softmax(two_d, torch.tensor([0, 5, 10]))
    assert value.shape == (3,)
    torch.testing.assert_close(value, torch.log_softmax(two_d.float(), -1)[torch.arange(3), [0, 5, 10]])
