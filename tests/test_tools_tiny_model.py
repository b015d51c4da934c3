"""tools.tiny_model: a deterministic tiny Qwen2 checkpoint that loads through from_pretrained."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools import tiny_model
from tools.tiny_model import build_tiny_checkpoint, tiny_checkpoint_path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _file_hashes(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir())}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "a", seed=0)


def test_same_seed_same_bytes_in_another_process_other_seed_other_weights(built, tmp_path):
    """The command line, in another process, builds the same bytes for the same seed (the in-process build of the
    fixture is the other side); seed 1 gives other weights and the same tokenizer. Three builds, not four: the
    same-seed rebuild is the other process's."""
    hashes = _file_hashes(built)
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "course_checkpoint.json",
    } <= set(hashes)
    out = tmp_path / "cli"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "tools.tiny_model", "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert _file_hashes(out) == hashes
    other = _file_hashes(build_tiny_checkpoint(tmp_path / "c", seed=1))
    assert other["model.safetensors"] != hashes["model.safetensors"]
    assert other["tokenizer.json"] == hashes["tokenizer.json"]


def test_from_pretrained_round_trip(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

    model = AutoModelForCausalLM.from_pretrained(built, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(built, local_files_only=True)
    assert isinstance(model, Qwen2ForCausalLM)
    config = model.config
    assert (
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.intermediate_size,
    ) == (64, 2, 4, 2, 128)
    assert config.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert config.vocab_size == len(tokenizer) == 512
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token == "<|im_end|>"
    assert config.eos_token_id == tokenizer.eos_token_id and config.pad_token_id == tokenizer.pad_token_id
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") is not None
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Return only the integer result of 2 + 2."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>user\nReturn only the integer result of 2 + 2.<|im_end|>\n<|im_start|>assistant\n"
    # the tokenizer the checkpoint loads back is the one that was trained
    trained = tiny_model.build_tokenizer()
    for sample in tiny_model.training_corpus() + ["未见过的文字 123 + 456?"]:
        assert tokenizer(sample)["input_ids"] == trained(sample)["input_ids"]
    assert tokenizer.decode(tokenizer("The answer is 4.")["input_ids"]) == "The answer is 4."
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], 512) and torch.isfinite(logits).all()
    assert json.loads((built / "course_checkpoint.json").read_text())["weights"] == "random_init"
    assert json.loads((built / "course_checkpoint.json").read_text())["architecture"] == "tiny-qwen2"


def test_cached_path_builds_once_atomically(tmp_path):
    (tmp_path / "course.toml").write_text("[course]\n")
    path = tiny_checkpoint_path(seed=0, root=tmp_path)
    assert path == tmp_path / ".cache" / "tiny-qwen2-seed0"
    assert [p.name for p in (tmp_path / ".cache").iterdir()] == ["tiny-qwen2-seed0"]  # no staging left
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert tiny_checkpoint_path(seed=0, root=tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    # a checkpoint from another recipe version is replaced
    marker = json.loads((path / "course_checkpoint.json").read_text())
    marker["builder_version"] = -1
    (path / "course_checkpoint.json").write_text(json.dumps(marker))
    (path / "stale-extra-file").write_text("x")
    assert tiny_checkpoint_path(seed=0, root=tmp_path) == path
    assert not (path / "stale-extra-file").exists()
    assert json.loads((path / "course_checkpoint.json").read_text())["builder_version"] == tiny_model.BUILDER_VERSION
    assert [p.name for p in (tmp_path / ".cache").iterdir()] == ["tiny-qwen2-seed0"]


def test_qwen_shaped_architecture_matches_qwen25_05b():
    tokenizer = tiny_model.build_tokenizer()
    with torch.device("meta"):  # shapes only: no 1 GB of weights in a unit test
        model = tiny_model._build_model(dict(tiny_model.QWEN25_05B_ARCHITECTURE), tokenizer, 0, torch.bfloat16)
    unique = list(model.parameters())  # tied weights are listed once
    assert sum(p.numel() for p in unique) == 494_032_768  # Qwen2.5-0.5B: 494M parameters, tied embeddings
    assert model.config.vocab_size == 151_936 > len(tokenizer)
    assert {p.dtype for p in unique} == {torch.bfloat16}
    assert tiny_model._marker("Qwen2.5-0.5B", 0)["builder_version"] == tiny_model.QWEN_SHAPED_BUILDER_VERSION


def test_qwen25_like_tokenizer_gives_qwen25_token_counts():
    """The Qwen-shaped checkpoint's tokenizer: Qwen2.5's template (default system prompt) and, for the
    experiment's fixtures, the token counts Qwen2.5-0.5B-Instruct's tokenizer gives (system turn: from
    public token ids; the fixture text: one token per Qwen2 pre-token, an estimate)."""
    from tools import grpo_experiment as gx
    from tools.post_training_runtime import build_response_batch

    tokenizer = tiny_model.build_qwen25_like_tokenizer()
    system_turn = f"<|im_start|>system\n{tiny_model.QWEN25_DEFAULT_SYSTEM}<|im_end|>\n"
    ids = tokenizer(system_turn, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(tiny_model.QWEN25_SYSTEM_TURN_IDS) == 21
    assert tokenizer.convert_ids_to_tokens(ids)[5:7] == ["ĠQ", "wen"]  # Qwen2.5: 1207, 16948
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Return only the integer result of 2 + 2."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert rendered == (
        system_turn + "<|im_start|>user\nReturn only the integer result of 2 + 2.<|im_end|>\n<|im_start|>assistant\n"
    )
    with_system = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}], tokenize=False
    )
    assert with_system == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nu<|im_end|>\n"
    estimate = tiny_model.qwen25_token_estimate()
    assert len(estimate) == 8
    for text, count in estimate.items():
        assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == count, text
    # the experiment's batches: [B, T] as Qwen2.5 would give them (estimated)
    shapes = {}
    for name, size in (("minimal_pair", 2), ("expanded_group", 4)):
        cs = gx.build_candidate_set(name, size)
        shapes[name] = gx.batch_shape_entry(name, build_response_batch(tokenizer, cs.prompts, cs.responses, 96))
    assert shapes["minimal_pair"]["input_ids_shape"] == [4, 44]
    assert shapes["expanded_group"]["input_ids_shape"] == [8, 49]
    assert shapes["expanded_group"]["response_tokens"] == [2, 2, 7, 6, 2, 2, 7, 3]  # "10" is two digits
    assert set(shapes["minimal_pair"]["prompt_tokens"]) == {41}  # 21 system + 17 user + 3 assistant opener
