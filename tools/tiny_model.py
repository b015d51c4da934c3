"""A tiny, deterministic Qwen2-architecture checkpoint built locally.

Machines that run this course's tests cannot download weights from a hub, so the tests, notebook 5
and the ``tiny_cpu`` run of the final experiment use a real ``transformers`` checkpoint built here:

* a byte-level BPE tokenizer trained with ``tokenizers`` on the course's own prompts and answers
  (vocabulary ~512, special tokens ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos))
  with a ChatML chat template;
* a randomly initialised ``Qwen2ForCausalLM`` (hidden 64, 2 layers, 4 heads, 2 KV heads,
  intermediate 128, tied embeddings), seeded, saved with ``save_pretrained`` (safetensors).

It is loaded back through ``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)`` and
``AutoTokenizer.from_pretrained(path, local_files_only=True)``: the same code path a hub model takes.
The same seed gives the same bytes.

Command line::

    python -m tools.tiny_model                 # build (once) and print the cached tiny checkpoint
    python -m tools.tiny_model --qwen-shaped   # random-init checkpoint with Qwen2.5-0.5B's shape

The Qwen-shaped checkpoint has its own tokenizer (``build_qwen25_like_tokenizer``): Qwen2.5's chat template
with its default system prompt, and a vocabulary chosen so that the experiment's fixtures tokenise into
as many tokens as Qwen2.5-0.5B-Instruct's tokenizer gives them (see ``qwen25_token_estimate``): its
batches then have the real model's [B, T], so its time and memory figures cost the real token workload.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Bump when the build recipe changes: cached checkpoints with another value are rebuilt.
BUILDER_VERSION = 1
# The Qwen-shaped checkpoint's own recipe version (2: Qwen2.5's chat template and token counts).
QWEN_SHAPED_BUILDER_VERSION = 2
MARKER_FILE = "course_checkpoint.json"

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
TOKENIZER_VOCAB_SIZE = 512

# ChatML, as Qwen2.5 renders it (without the default system prompt): every turn ends with
# "<|im_end|>\n"; the generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# Qwen2.5-Instruct's chat template, the part without tools: a conversation that does not open with a
# system message gets the default system prompt. (The published template also renders tool calls and
# tool results; the experiment never uses them.)
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN25_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>system\\n" + QWEN25_DEFAULT_SYSTEM + "<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if not (message['role'] == 'system' and loop.first) -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)
# Qwen2.5's token ids for the default system turn "<|im_start|>system\n...<|im_end|>\n", as printed in
# public code and issues that tokenise it: 21 tokens; " Qwen" is two tokens (" Q", "wen").
QWEN25_SYSTEM_TURN_IDS = (
    151644,
    8948,
    198,
    2610,
    525,
    1207,
    16948,
    11,
    3465,
    553,
    54364,
    14817,
    13,
    1446,
    525,
    264,
    10950,
    17847,
    13,
    151645,
    198,
)
# Pre-tokens (Qwen2's split regex) that Qwen2.5's BPE splits further; every other pre-token of the
# experiment's texts is taken to be one token (common English words, single digits, " +", "."): an
# estimate where no public token ids were found.
QWEN25_SPLIT_PRETOKENS = {" Qwen": (" Q", "wen")}

TINY_ARCHITECTURE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}

# Qwen2.5-0.5B's published architecture (config.json of Qwen/Qwen2.5-0.5B-Instruct).
QWEN25_05B_ARCHITECTURE = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}

# The final experiment's fixtures (notebook 6): prompts and candidate responses.
EXPERIMENT_FIXTURES = [
    ("Return only the integer result of 2 + 2.", ["4", "5", "The answer is 4.", "I do not know."]),
    ("Return only the integer result of 3 * 3.", ["9", "6", "The answer is 9.", "10"]),
]

# More of the course's own text: the exercises' prompts, answers and vocabulary.
COURSE_TEXT = [
    "Return only the integer result of 1 + 1.",
    "2",
    "Return only the integer result of 5 - 3.",
    "2",
    "Return only the integer result of 6 * 7.",
    "42",
    "Return only the integer result of 12 / 4.",
    "3",
    "Return only the integer result of 10 + 15.",
    "25",
    "What is 7 + 8? Answer with one integer.",
    "15",
    "The answer is 15.",
    "The answer is 42.",
    "I am not sure.",
    "Maybe 5.",
    "-3",
    "0",
    "100",
    "Group relative policy optimization samples a group of responses for each prompt.",
    "The advantage of a response is its reward minus the group mean, divided by the group standard deviation.",
    "When every reward in a group is equal, the standard deviation is zero and every advantage is zero.",
    "The ratio between the new policy and the old policy is clipped to the range one minus epsilon, one plus epsilon.",
    "The loss averages over completion tokens with the completion mask; padding after the end of sequence is masked.",
    "A verifier parses the last integer of the response and compares it with the expected answer.",
    "The reward has a correctness part and a format part; an unjudgeable response receives zero.",
    "The reference model keeps the policy close through a KL penalty with coefficient beta.",
    "CISPO detaches the clamped importance weight and multiplies it by the log probability.",
    "DAPO uses epsilon_high for an asymmetric clip; Dr. GRPO removes the length normalisation.",
    "GSPO computes a sequence-level ratio from the mean token log-ratio.",
    "num_generations, loss_type, epsilon, epsilon_high, beta, completion_mask, advantages, rewards, logps.",
    "input_ids attention_mask response_mask token_logps sequence_logps logits tokenizer model batch",
    "system user assistant prompt response completion reward verifier integer answer format",
    "组相对策略优化：对同一个提示采样一组回答，用组内均值和标准差计算优势。",
    "可验证奖励：解析回答中的最后一个整数，与标准答案比较。",
    "裁剪比例、参考模型、KL 惩罚、完成掩码、词元对数概率。",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 30 40 42 50 64 100 128",
    "+ - * / = ( ) [ ] { } , . : ; ? ! ' \" # _",
]


def training_corpus() -> list[str]:
    """The texts the tiny tokenizer is trained on (fixtures rendered as ChatML turns, plus course text)."""
    texts: list[str] = []
    for prompt, responses in EXPERIMENT_FIXTURES:
        texts.append(prompt)
        for response in responses:
            texts.append(response)
            texts.append(f"{IM_START}user\n{prompt}{IM_END}\n{IM_START}assistant\n{response}{IM_END}\n")
    texts.extend(COURSE_TEXT)
    return texts


def _qwen2_bpe_backend():
    """An untrained byte-level BPE ``tokenizers.Tokenizer`` with Qwen2's normaliser (NFC), pre-tokeniser (its
    split regex, then byte-level) and decoder: both of the course's tokenizers start from it."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    backend = Tokenizer(
        models.BPE(continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False)
    )
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    return backend


def build_tokenizer():
    """Train the byte-level BPE tokenizer; return it as ``transformers``' ``Qwen2Tokenizer``.

    The normaliser (NFC) and pre-tokeniser (Qwen2's split regex, then byte-level) are Qwen2's own, so
    ``AutoTokenizer`` - which picks ``Qwen2Tokenizer`` for a ``qwen2`` checkpoint and rebuilds the
    pipeline from the saved vocabulary and merges - loads back exactly the tokenizer trained here.
    """
    return _trained_qwen2_tokenizer(
        training_corpus(), TOKENIZER_VOCAB_SIZE, TINY_ARCHITECTURE["max_position_embeddings"], CHAT_TEMPLATE
    )


def _trained_qwen2_tokenizer(corpus, vocab_size: int, max_length: int, chat_template: str):
    """A byte-level BPE of ``vocab_size`` trained on ``corpus`` with Qwen2's pipeline (``_qwen2_bpe_backend``), as a
    ``Qwen2Tokenizer`` with the course's special tokens, ``max_length`` and ``chat_template``."""
    from tokenizers import pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    backend = _qwen2_bpe_backend()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=1,
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    trained = json.loads(backend.to_str())["model"]
    merges = [tuple(pair) if isinstance(pair, list) else tuple(pair.split(" ")) for pair in trained["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=trained["vocab"],
        merges=merges,
        unk_token=None,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def _pretokens(text: str) -> list[str]:
    """Qwen2's pre-tokens of ``text`` (its split regex; special tokens kept whole)."""
    import re as _re

    from tokenizers import Regex, pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    split = pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False)
    pieces: list[str] = []
    for part in _re.split("(" + "|".join(_re.escape(t) for t in SPECIAL_TOKENS) + ")", text):
        if part in SPECIAL_TOKENS:
            pieces.append(part)
        elif part:
            pieces.extend(piece for piece, _ in split.pre_tokenize_str(part))
    return pieces


def qwen25_pieces(text: str) -> list[str]:
    """The tokens Qwen2.5's tokenizer is taken to give ``text``: Qwen2's pre-tokens, each one token,
    except :data:`QWEN25_SPLIT_PRETOKENS`. Exact for the default system turn (it matches
    :data:`QWEN25_SYSTEM_TURN_IDS`' length); an estimate for the fixtures."""
    pieces: list[str] = []
    for piece in _pretokens(text):
        pieces.extend(QWEN25_SPLIT_PRETOKENS.get(piece, (piece,)))
    return pieces


def qwen25_rendered_fixtures() -> list[str]:
    """Every (prompt, response) of the experiment rendered with Qwen2.5's template (default system prompt)."""
    from jinja2 import Template

    template = Template(QWEN25_CHAT_TEMPLATE)
    texts = []
    for prompt, responses in EXPERIMENT_FIXTURES:
        for response in responses:
            texts.append(
                template.render(
                    messages=[{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
                )
            )
    return texts


def qwen25_token_estimate() -> dict[str, int]:
    """``{rendered conversation: token count}`` that Qwen2.5-0.5B-Instruct's tokenizer is estimated to give."""
    return {text: len(qwen25_pieces(text)) for text in qwen25_rendered_fixtures()}


def build_qwen25_like_tokenizer():
    """The Qwen-shaped checkpoint's tokenizer: byte-level BPE with Qwen2's pre-tokeniser, trained on the
    pieces of :func:`qwen25_pieces` (fixtures rendered with Qwen2.5's template) plus the course text, so
    each piece becomes one token - the token counts Qwen2.5's tokenizer gives (estimated) - and with
    Qwen2.5's chat template (default system prompt). Special tokens, pad and eos as the tiny tokenizer.
    """
    pieces = sorted(
        {piece for text in qwen25_rendered_fixtures() for piece in qwen25_pieces(text) if piece not in SPECIAL_TOKENS}
    )
    # Each piece is its own training text (so " Q" and "wen" never merge); repeated so that its merges
    # outrank the course text's.
    corpus = [piece for piece in pieces for _ in range(64)] + training_corpus()
    return _trained_qwen2_tokenizer(
        corpus, 2048, QWEN25_05B_ARCHITECTURE["max_position_embeddings"], QWEN25_CHAT_TEMPLATE
    )


def _marker(architecture: str, seed: int) -> dict:
    """What a checkpoint folder's marker file says (also what a cached checkpoint must match).

    Versions are read from the installed distributions: checking a cache must not import transformers (2-3 s).
    """
    from tools.notebook_runtime import package_version

    return {
        "weights": "random_init",
        "architecture": architecture,
        "seed": seed,
        "builder_version": QWEN_SHAPED_BUILDER_VERSION if architecture == "Qwen2.5-0.5B" else BUILDER_VERSION,
        "torch": package_version("torch"),
        "transformers": package_version("transformers"),
        "tokenizers": package_version("tokenizers"),
    }


def _write_marker(path: Path, architecture: str, seed: int) -> None:
    marker = _marker(architecture, seed)
    (path / MARKER_FILE).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _build_model(config_kwargs: dict, tokenizer, seed: int, dtype):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        **config_kwargs,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        use_cache=True,
    )
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # initialise directly in the target dtype (no fp32 copy of 0.5B params)
    try:
        model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.config.dtype = dtype
    model.eval()
    return model


def _save(path: Path, model, tokenizer) -> None:
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def build_tiny_checkpoint(path, seed: int = 0) -> Path:
    """Build the tiny Qwen2-architecture checkpoint into ``path`` (created) and return it.

    Deterministic: the same ``seed`` (and library versions) gives byte-identical files.
    """
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    model = _build_model(dict(TINY_ARCHITECTURE, vocab_size=len(tokenizer)), tokenizer, seed, torch.float32)
    _save(path, model, tokenizer)
    _write_marker(path, "tiny-qwen2", seed)
    return path


def build_qwen_shaped_checkpoint(path, seed: int = 0) -> Path:
    """Random-init checkpoint with Qwen2.5-0.5B's architecture (bf16, ~1 GB) and the Qwen2.5-like tokenizer.

    For offline GPU timing only: the weights are random (see ``course_checkpoint.json``). The model's
    vocabulary (151,936 rows, so the logits are as large as the real model's) is larger than the
    tokenizer's (~700); the extra rows are never indexed.
    """
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_qwen25_like_tokenizer()
    model = _build_model(dict(QWEN25_05B_ARCHITECTURE), tokenizer, seed, torch.bfloat16)
    _save(path, model, tokenizer)
    _write_marker(path, "Qwen2.5-0.5B", seed)
    return path


def _course_root() -> Path:
    from tools.project_runtime import resolve_project_root

    return resolve_project_root(Path(__file__).resolve().parent)


def _marker_matches(path: Path, architecture: str, seed: int) -> bool:
    try:
        marker = json.loads((path / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker == _marker(architecture, seed)


def _cached_build(final: Path, architecture: str, seed: int, builder) -> Path:
    """Return ``final`` if it holds a matching checkpoint, else build it atomically (temp folder + rename)."""
    if _marker_matches(final, architecture, seed):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.building-", dir=final.parent))
    try:
        builder(staging, seed=seed)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp made it 0700
        if _marker_matches(final, architecture, seed):  # another process finished meanwhile: keep its
            return final
        if final.exists():  # stale (other recipe or library versions): move it aside, then drop it
            trash = Path(tempfile.mkdtemp(prefix=f".{final.name}.stale-", dir=final.parent))
            try:
                os.rename(final, trash / "old")
            except OSError:
                pass  # another process replaced it meanwhile; checked below
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(staging, final)
        except OSError:
            # Another process finished first: keep its checkpoint if it is a valid one.
            if not _marker_matches(final, architecture, seed):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


def tiny_checkpoint_path(seed: int = 0, root=None) -> Path:
    """The cached tiny checkpoint ``<course root>/.cache/tiny-qwen2-seed<seed>/``, built when missing or stale."""
    root = Path(root) if root is not None else _course_root()
    return _cached_build(root / ".cache" / f"tiny-qwen2-seed{seed}", "tiny-qwen2", seed, build_tiny_checkpoint)


def qwen_shaped_checkpoint_path(seed: int = 0, root=None) -> Path:
    """The cached Qwen-shaped checkpoint ``<course root>/.cache/qwen2.5-0.5b-shaped/`` (``make
    qwen-shaped-checkpoint``), built when missing or stale (about 1 GB)."""
    root = Path(root) if root is not None else _course_root()
    return _cached_build(root / ".cache" / "qwen2.5-0.5b-shaped", "Qwen2.5-0.5B", seed, build_qwen_shaped_checkpoint)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.tiny_model", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--qwen-shaped",
        action="store_true",
        help="build a random-init checkpoint with Qwen2.5-0.5B's architecture (bf16, ~1 GB)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: <course root>/.cache/tiny-qwen2-seed<seed>/ or "
        "<course root>/.cache/qwen2.5-0.5b-shaped/)",
    )
    args = parser.parse_args(argv)
    if args.qwen_shaped:
        if args.out is None:
            path = qwen_shaped_checkpoint_path(args.seed)
        else:
            path = _cached_build(Path(args.out), "Qwen2.5-0.5B", args.seed, build_qwen_shaped_checkpoint)
    elif args.out is not None:
        path = _cached_build(Path(args.out), "tiny-qwen2", args.seed, build_tiny_checkpoint)
    else:
        path = tiny_checkpoint_path(args.seed)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
