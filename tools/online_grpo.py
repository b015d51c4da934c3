"""The online GRPO lesson's runtime (notebook nb07_online_grpo, ``make online``).

What lives here (reusable, not graded):

* the task: single-digit addition ``"a+b="`` in the course's ChatML format, answered by one integer and
  scored by ``integer-answer-v1`` (nb04's ``verify_integer_response``, imported from ``tools.lessons``);
  a fixed, disjoint split into training and held-out prompts;
* the SFT warm start: a short, deterministic supervised fine-tune of the course's tiny Qwen2 checkpoint
  (``tools.tiny_model``) on a few hundred examples, cached under ``.cache/`` like the tiny checkpoint, so
  the starting policy is right only sometimes;
* ``completion_logps``: per-token log-probs (and entropies) of completion tokens at a sampling temperature,
  as TRL's ``GRPOTrainer`` computes them (logits divided by the temperature);
* held-out evaluation: pass@1 (mean sampled accuracy), pass@k (unbiased estimator) and maj@k (disjoint blocks
  of k samples vote; an unparseable sample votes for "no answer", so maj@1 equals pass@1);
* the record: ``new_record`` / ``validate_record`` / ``write_record`` for
  ``benchmarks/results/online/online-grpo_<label>.json`` (schema ``tools/schemas/online-grpo-v1.json``).

The graded pieces (``sample_group``, ``grpo_step``, ``log_step_metrics``) and the training loop that uses
them live in the lesson and are saved (``#@save``) into ``tools/lessons/nb07_online_grpo.py``.
"""
from __future__ import annotations

import json
import math
import os
import platform
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

TASK_ID = "single-digit-addition-v1"
SCHEMA_VERSION = "online-grpo/v1"
WORKLOAD_ID = "online-grpo"
RESULTS_DIR = Path("benchmarks") / "results" / "online"
SFT_BUILDER_VERSION = 1
SFT_MARKER = "online_sft.json"
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")
REWARDS = ("integer-answer-v1", "contains-answer-loophole")

# SFT warm start: 600 generated examples (8 per training prompt); in 60 % of them the assistant hedges with
# HEDGE instead of answering, so the warm-started policy answers only sometimes (a prediction the lesson
# measures: held-out pass@1 about 0.1). SFT_STEPS optimizer steps of SFT_BATCH examples.
HEDGE = "I do not know."
SFT_COPIES = 8
SFT_HEDGE_FRACTION = 0.6
# Warm starts: "sft" (the lesson's; answers one integer or hedges) and "sft-list", the same data where a fraction
# SFT_LIST_FRACTION of the answering examples list three numbers, the answer first or second ("7 12 3"): a
# completion that contains the answer but that integer-answer-v1 (which parses the last integer) judges wrong.
# The reward-hacking ablation starts there, so that the loophole verifier's blind spot is within sampling reach.
WARM_STARTS = ("sft", "sft-list")
SFT_LIST_FRACTION = 0.3
SFT_STEPS = 800
SFT_BATCH = 32
SFT_LEARNING_RATE = 3e-3
HELDOUT_SIZE = 25
SPLIT_SEED = 0


# ----------------------------------------------------------------------------------------------- task
def arithmetic_problems() -> list[dict]:
    """All 100 problems ``a+b=`` with single digits a, b (answers 0..18), in a fixed order."""
    return [{"prompt": f"{a}+{b}=", "answer": a + b} for a in range(10) for b in range(10)]


def split_problems(heldout_size: int = HELDOUT_SIZE, seed: int = SPLIT_SEED) -> tuple[list[dict], list[dict]]:
    """(train, heldout): a fixed shuffle of the 100 problems; the first ``heldout_size`` are held out."""
    problems = arithmetic_problems()
    random.Random(seed).shuffle(problems)
    heldout, train = problems[:heldout_size], problems[heldout_size:]
    assert not {p["prompt"] for p in heldout} & {p["prompt"] for p in train}
    return train, heldout


def chat_prompt(tokenizer, prompt: str) -> str:
    """The prompt rendered as one ChatML user turn plus the generation prompt (assistant turn opened)."""
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)


def encode_prompts(tokenizer, prompts) -> dict:
    """Left-padded ``input_ids`` / ``attention_mask`` ``[B, P]`` of the chat-rendered prompts."""
    import torch

    rows = [tokenizer(chat_prompt(tokenizer, p), add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)  # [B, P]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, P]
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return {"input_ids": ids, "attention_mask": mask}


# ----------------------------------------------------------------------------------------------- rewards
def strict_rewards(completions, answers, correctness_weight: float = 1.0, format_weight: float = 0.1) -> list[float]:
    """integer-answer-v1 total reward of each completion (nb04's verifier, imported from tools.lessons)."""
    from tools.lessons.nb04_verifiable_rewards import verify_integer_response

    return [verify_integer_response(text, int(answer), correctness_weight, format_weight)["total_reward"]
            for text, answer in zip(completions, answers)]


def strict_correct(completions, answers) -> list[float]:
    """1.0 when integer-answer-v1 judges the completion correct, else 0.0 (held-out accuracy uses this)."""
    from tools.lessons.nb04_verifiable_rewards import verify_integer_response

    return [verify_integer_response(text, int(answer))["correctness"] for text, answer in zip(completions, answers)]


def loophole_rewards(completions, answers) -> list[float]:
    """The gameable verifier of nb04 Step 3b: full reward whenever the answer's digits appear anywhere."""
    return [1.0 if str(int(answer)) in text else 0.0 for text, answer in zip(completions, answers)]


def reward_function(name: str):
    if name == "integer-answer-v1":
        return strict_rewards
    if name == "contains-answer-loophole":
        return loophole_rewards
    raise ValueError(f"reward 必须是 {REWARDS} 之一，收到 {name!r}")


# ----------------------------------------------------------------------------------------------- log-probs
def completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature: float = 1.0,
                     with_entropy: bool = False):
    """Per-token log-probs ``[N, C]`` of the completion tokens (and entropies ``[N, C]`` if asked).

    One forward pass over ``prompt + completion``; logits are divided by ``temperature`` first (as TRL's
    ``GRPOTrainer`` does, so the log-probs are those of the distribution that was sampled). Positions outside
    ``completion_mask`` are still computed (the caller masks them); nothing of size ``[N, C, V]`` is kept
    besides the logits themselves.
    """
    import torch

    from tools.post_training_runtime import selective_log_softmax

    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [N, P+C]
    attention_mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)  # [N, P+C]
    width = completion_ids.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # [N, P+C, V]
    logits = logits[:, -width - 1:-1, :] / temperature  # [N, C, V] the distributions that produced each token
    logps = selective_log_softmax(logits, completion_ids)  # [N, C]
    if not with_entropy:
        return logps
    with torch.no_grad():
        probs = torch.softmax(logits.float(), dim=-1)  # [N, C, V]
        entropy = -(probs * torch.log_softmax(logits.float(), dim=-1)).sum(-1)  # [N, C]
    return logps, entropy


# ----------------------------------------------------------------------------------------------- SFT warm start
def check_warm_start(variant: str) -> str:
    if variant not in WARM_STARTS:
        raise ValueError(f"warm start 必须是 {WARM_STARTS} 之一，收到 {variant!r}")
    return variant


def _sft_marker(seed: int, variant: str = "sft") -> dict:
    from tools import tiny_model
    from tools.notebook_runtime import package_version  # (no transformers import to check a cache)

    marker = {"builder_version": SFT_BUILDER_VERSION, "task": TASK_ID, "seed": seed, "steps": SFT_STEPS,
              "copies": SFT_COPIES, "hedge": HEDGE, "hedge_fraction": SFT_HEDGE_FRACTION,
              "batch": SFT_BATCH, "learning_rate": SFT_LEARNING_RATE, "heldout_size": HELDOUT_SIZE,
              "split_seed": SPLIT_SEED, "tiny_builder_version": tiny_model.BUILDER_VERSION,
              "torch": package_version("torch"), "transformers": package_version("transformers")}
    if check_warm_start(variant) != "sft":  # (the lesson's own warm start keeps its marker: its cache stays valid)
        marker.update(variant=variant, list_fraction=SFT_LIST_FRACTION)
    return marker


def sft_examples(seed: int = 0, variant: str = "sft") -> list[dict]:
    """The SFT data set: SFT_COPIES examples per training prompt, a fixed SFT_HEDGE_FRACTION of them hedging.

    ``variant="sft-list"``: the same draws, and then SFT_LIST_FRACTION of the answering examples become a list of
    three different numbers with the answer first or second, never last (extra draws from a second generator,
    so "sft" is unchanged)."""
    listing = check_warm_start(variant) == "sft-list"
    train, _ = split_problems()
    rng = random.Random(seed)
    extra = random.Random(seed + 7919)
    examples = []
    for problem in train:
        for _ in range(SFT_COPIES):
            hedge = rng.random() < SFT_HEDGE_FRACTION
            completion = HEDGE if hedge else str(problem["answer"])
            if listing and not hedge and extra.random() < SFT_LIST_FRACTION:
                others = extra.sample([n for n in range(19) if n != problem["answer"]], 2)
                first = extra.random() < 0.5
                numbers = [problem["answer"], *others] if first else [others[0], problem["answer"], others[1]]
                completion = " ".join(map(str, numbers))
            examples.append({"prompt": problem["prompt"], "completion": completion})
    return examples


def build_sft_checkpoint(path, seed: int = 0, variant: str = "sft") -> Path:
    """Supervised warm start on the training prompts (never the held-out ones); deterministic for ``seed``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.tiny_model import tiny_checkpoint_path

    path = Path(path)
    base = tiny_checkpoint_path(seed=0)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True)
    rows = []
    for example in sft_examples(seed, variant):
        prompt_ids = tokenizer(chat_prompt(tokenizer, example["prompt"]), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(example["completion"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        rows.append((prompt_ids, answer_ids))
    torch.manual_seed(seed)
    order = random.Random(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=SFT_LEARNING_RATE)
    model.train()
    pad = tokenizer.pad_token_id
    for _ in range(SFT_STEPS):
        batch = [rows[order.randrange(len(rows))] for _ in range(SFT_BATCH)]
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)  # [B, T]
        labels = torch.full((len(batch), width), -100, dtype=torch.long)  # [B, T] loss on the answer only
        mask = torch.zeros((len(batch), width), dtype=torch.long)  # [B, T]
        for i, (p, a) in enumerate(batch):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p):len(p) + len(a)] = torch.tensor(a)
            mask[i, :len(p) + len(a)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    (path / SFT_MARKER).write_text(json.dumps(_sft_marker(seed, variant), indent=2, sort_keys=True) + "\n",
                                   encoding="utf-8")
    return path


def _sft_matches(path: Path, seed: int, variant: str = "sft") -> bool:
    try:
        return json.loads((path / SFT_MARKER).read_text(encoding="utf-8")) == _sft_marker(seed, variant)
    except (OSError, ValueError):
        return False


def sft_checkpoint_path(seed: int = 0, root=None, variant: str = "sft") -> tuple[Path, bool, float | None]:
    """``(path, was_cached, build_seconds)`` of ``<course root>/.cache/online-sft-seed<seed>/`` (``variant``
    "sft-list": ``online-sft-list-seed<seed>/``), built when missing.

    Built atomically (temporary folder + rename) like ``tools.tiny_model``'s checkpoint; a marker file holds the
    recipe and library versions, and a cache with another marker is rebuilt.
    """
    from tools.project_runtime import resolve_project_root

    root = Path(root) if root is not None else resolve_project_root(Path(__file__).resolve().parent)
    stem = "online-sft" if check_warm_start(variant) == "sft" else f"online-{variant}"
    final = root / ".cache" / f"{stem}-seed{seed}"
    if _sft_matches(final, seed, variant):
        return final, True, None
    started = time.perf_counter()
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.building-", dir=final.parent))
    try:
        build_sft_checkpoint(staging, seed=seed, variant=variant)
        os.chmod(staging, 0o755)
        if not _sft_matches(final, seed, variant):
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            try:
                os.rename(staging, final)
            except OSError:
                if not _sft_matches(final, seed, variant):
                    raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final, False, round(time.perf_counter() - started, 3)


def load_policy(path):
    """(model, tokenizer) from a local checkpoint folder, float32, eval mode (no dropout anywhere)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    model.eval()
    return model, tokenizer


# ----------------------------------------------------------------------------------------------- evaluation
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k 需要 1 <= k <= n 且 0 <= c <= n，收到 n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


MAJ_RULE = ("n // k disjoint blocks of k samples each vote, votes averaged; an unparseable sample votes for "
            "'no answer' (never right); a tie counts 1/m when the right answer is one of m leaders")
NO_ANSWER = "no-answer"  # the vote of a sample whose answer cannot be parsed (never the right answer)


def majority_vote(parsed_answers, answer) -> float:
    """maj of one vote over the given samples: 1.0 when the right answer has strictly the most votes, 1/m when it
    ties with m - 1 other candidates (the expected value of a uniformly random tie-break), else 0.0.

    Rule for unparseable samples (``None``): each votes for NO_ANSWER, a candidate that is never right - so a
    prompt where most samples cannot be parsed is not answered, and a vote over one sample is right exactly when
    that sample is (maj@1 equals pass@1).
    """
    if not parsed_answers:
        raise ValueError("majority_vote 需要至少一个样本")
    votes = Counter(NO_ANSWER if a is None else a for a in parsed_answers)
    best = max(votes.values())
    leaders = [a for a, count in votes.items() if count == best]
    return 1.0 / len(leaders) if answer in leaders else 0.0


def majority_correct(parsed_answers, answer, k: int) -> float:
    """maj@k of one prompt from its n samples: the n // k disjoint blocks of k consecutive samples each vote
    (``majority_vote``) and the votes are averaged. Samples are independent draws, so every block is an unbiased
    draw of k samples; with k = 1 the result is the fraction of right samples, i.e. pass@1."""
    n = len(parsed_answers)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"maj@k 需要 1 <= k <= n，收到 k={k!r}, n={n}")
    blocks = [parsed_answers[i:i + k] for i in range(0, n - n % k, k)]
    return sum(majority_vote(block, answer) for block in blocks) / len(blocks)


def evaluate(model, tokenizer, problems, samples_per_prompt: int = 16, temperature: float = 1.0,
             max_new_tokens: int = 6, seed: int = 1234, ks=(1, 2, 4, 8, 16)) -> dict:
    """Held-out accuracy: sampled pass@1, pass@k and maj@k for ``ks``, and the greedy accuracy.

    Sampling is seeded (``torch.manual_seed(seed)`` right before ``generate``), so the same weights give the
    same numbers. Correctness is integer-answer-v1's ``correctness`` (the strict verifier, whatever reward a
    run trained on).
    """
    import torch

    from tools.lessons.nb04_verifiable_rewards import verify_integer_response

    device = next(model.parameters()).device
    enc = {k: v.to(device) for k, v in encode_prompts(tokenizer, [p["prompt"] for p in problems]).items()}
    width = enc["input_ids"].shape[1]
    common = dict(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                  eos_token_id=tokenizer.eos_token_id)
    with torch.no_grad():
        torch.manual_seed(seed)
        sampled = model.generate(**enc, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                                 num_return_sequences=samples_per_prompt, **common)  # [B*n, P+C]
        greedy = model.generate(**enc, do_sample=False, **common)  # [B, P+C]
    texts = tokenizer.batch_decode(sampled[:, width:], skip_special_tokens=True)
    greedy_texts = tokenizer.batch_decode(greedy[:, width:], skip_special_tokens=True)
    n = samples_per_prompt
    ks = [k for k in ks if k <= n]
    pass_sums = {k: 0.0 for k in ks}
    maj_sums = {k: 0.0 for k in ks}
    correct_total = contains_total = unparseable_total = 0.0
    for i, problem in enumerate(problems):
        group = texts[i * n:(i + 1) * n]  # the n samples of this prompt
        records = [verify_integer_response(t, problem["answer"]) for t in group]
        contains_total += sum(loophole_rewards(group, [problem["answer"]] * n)) / n
        c = int(sum(r["correctness"] for r in records))
        correct_total += c / n
        parsed = [r["parsed_answer"] for r in records]
        unparseable_total += sum(a is None for a in parsed) / n
        for k in ks:
            pass_sums[k] += pass_at_k(n, c, k)
            maj_sums[k] += majority_correct(parsed, problem["answer"], k)
    greedy_acc = sum(verify_integer_response(t, p["answer"])["correctness"] for t, p in zip(greedy_texts, problems))
    count = len(problems)
    return {
        "pass_at_1": round(correct_total / count, 6),
        "contains_answer_rate": round(contains_total / count, 6),  # what the loophole verifier would accept
        "greedy_accuracy": round(greedy_acc / count, 6),
        "pass_at_k": {str(k): round(v / count, 6) for k, v in pass_sums.items()},
        "maj_at_k": {str(k): round(v / count, 6) for k, v in maj_sums.items()},
        "temperature": float(temperature),
        "samples_per_prompt": n,
        "maj_rule": MAJ_RULE,
        "outcomes": {"right": round(correct_total / count, 6), "unparseable": round(unparseable_total / count, 6),
                     "wrong": round(max(0.0, 1.0 - (correct_total + unparseable_total) / count), 6)},
        "examples": texts[:n],
    }


# ----------------------------------------------------------------------------------------------- configuration
@dataclass
class OnlineConfig:
    """Settings of one online GRPO run (TRL's names). ``make online`` and the notebook use the same defaults."""

    num_steps: int = 50  # rollout -> update rounds
    prompts_per_step: int = 16  # training prompts per rollout batch
    num_generations: int = 8  # G completions per prompt (TRL num_generations)
    num_iterations: int = 1  # mu: optimisation epochs per rollout batch (TRL num_iterations)
    loss_type: str = "grpo"  # grpo | dr_grpo | dapo | bnpo (TRL loss_type)
    epsilon: float = 0.2  # lower clip range (TRL epsilon)
    epsilon_high: float = 0.2  # upper clip range (TRL epsilon_high; 0.28 = DAPO clip-higher)
    beta: float = 0.0  # KL coefficient to the frozen reference (TRL beta)
    temperature: float = 1.0  # sampling temperature (TRL temperature)
    top_p: float = 1.0  # nucleus sampling (TRL top_p)
    max_new_tokens: int = 6  # TRL max_completion_length
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0  # gradient clipping (TRL max_grad_norm)
    seed: int = 0
    reward: str = "integer-answer-v1"  # or "contains-answer-loophole"
    eval_k: int = 16  # samples per held-out prompt for pass@k / maj@k
    use_bias_correction_kl: bool = True  # TRL's option and default: KL term times the ratio (matters when beta > 0)

    def __post_init__(self):
        check_config(self)

    def to_dict(self) -> dict:
        return asdict(self)


def check_config(config: OnlineConfig) -> None:
    """Raise ValueError (Chinese) for a setting no run can use."""
    ints = {"num_steps": 0, "prompts_per_step": 1, "num_generations": 2, "num_iterations": 1, "max_new_tokens": 1,
            "eval_k": 1}
    for name, low in ints.items():
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} 必须是 >= {low} 的整数，收到 {value!r}")
    for name in ("epsilon", "epsilon_high", "temperature", "learning_rate", "max_grad_norm"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} 必须是正的有限数，收到 {value!r}")
    if isinstance(config.beta, bool) or not isinstance(config.beta, (int, float)) or not config.beta >= 0:
        raise ValueError(f"beta 必须是非负数，收到 {config.beta!r}")
    if not isinstance(config.use_bias_correction_kl, bool):
        raise ValueError(f"use_bias_correction_kl 必须是 True 或 False，收到 {config.use_bias_correction_kl!r}")
    if not 0 < config.top_p <= 1:
        raise ValueError(f"top_p 必须在 (0, 1] 内，收到 {config.top_p!r}")
    if config.loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type 必须是 {LOSS_TYPES} 之一，收到 {config.loss_type!r}")
    if config.reward not in REWARDS:
        raise ValueError(f"reward 必须是 {REWARDS} 之一，收到 {config.reward!r}")


def check_run_label(label: str) -> str:
    if not isinstance(label, str) or not LABEL_PATTERN.fullmatch(label):
        raise ValueError(f"RUN_LABEL 只能含字母、数字和 . _ -（不以符号开头，最长 64 个字符），收到 {label!r}")
    return label


def output_relative_path(label: str) -> Path:
    return RESULTS_DIR / f"{WORKLOAD_ID}_{check_run_label(label)}.json"


# ----------------------------------------------------------------------------------------------- record
def load_average() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return [0.0, 0.0, 0.0]


def hardware_snapshot() -> dict:
    import torch

    return {"cpu_count": os.cpu_count() or 1, "torch_threads": torch.get_num_threads(),
            "load_average_before": load_average(), "load_average_after": load_average(),
            "cuda_available": bool(torch.cuda.is_available()), "platform": platform.platform()}


def framework_versions() -> dict:
    import torch

    from tools.notebook_runtime import package_version

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": package_version("transformers"), "trl": package_version("trl")}


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def load_schema() -> dict:
    path = Path(__file__).resolve().parent / "schemas" / "online-grpo-v1.json"
    return json.loads(path.read_text(encoding="utf-8"))


def validate_record(record) -> None:
    import jsonschema

    jsonschema.validate(record, load_schema())


def write_record(path, record) -> Path:
    """Validate against the schema, then write atomically (tools.notebook_runtime.save_json)."""
    from tools.notebook_runtime import save_json

    validate_record(record)
    return save_json(path, record)


# ----------------------------------------------------------------------------------------------- one run
# (name, RUN_LABEL, extra `make online` arguments) of the ablation records the lesson reads and plots.
ABLATIONS = [
    ("主实验（μ=1, grpo, ε_high=0.2）", "reference", ""),
    ("μ = 4", "mu4", "--num-iterations 4"),
    ("loss_type = dr_grpo", "dr_grpo", "--loss-type dr_grpo"),
    ("loss_type = dapo", "dapo", "--loss-type dapo"),
    ("μ = 4, ε_high = 0.28（clip-higher；对照 μ = 4）", "mu4_clip_higher", "--num-iterations 4 --epsilon-high 0.28"),
    ("奖励投机：起点有时列出三个数，包含即得分", "loophole", "--warm-start sft-list --reward contains-answer-loophole"),
    ("同一起点，严格验证器（修复后的奖励）", "loophole_fixed", "--warm-start sft-list"),
]


def print_progress(row: dict) -> None:
    if row["step"] % 5 == 0:
        kl = "-" if row["kl_ref"] is None else f"{row['kl_ref']:.4f}"
        print(f"step {row['step']:3d}  reward {row['reward_mean']:.3f}±{row['reward_std']:.3f}  "
              f"zero_std {row['frac_reward_zero_std']:.2f}  len {row['completion_length']:.2f}  "
              f"clip {row['clip_ratio_low']:.3f}/{row['clip_ratio_high']:.3f}  approx_kl {row['approx_kl']:.5f}  "
              f"kl_ref {kl}  entropy {row['entropy']:.3f}  strict {row['strict_accuracy']:.3f}  "
              f"{row['seconds']:.2f}s", flush=True)


def _content_hash(folder) -> str:
    from tools.notebook_runtime import resolve_model_commit

    return resolve_model_commit(str(folder))[0]


def run_online_experiment(train_fn, config: OnlineConfig, label: str, *, model=None, tokenizer=None, warm_start=None,
                          heldout=None, train=None, root=None, progress=None, write: bool = True,
                          warm_start_variant: str = "sft") -> dict:
    """Evaluate -> ``train_fn`` -> evaluate, and write the validated record; returns it.

    ``train_fn(model, tokenizer, train_problems, config, ref_model=..., progress=...)`` is the lesson's
    ``train_online_grpo`` (the notebook passes its own; ``make online`` the saved one). Without ``model``
    the cached SFT warm start ``warm_start_variant`` (WARM_STARTS) is loaded. ``wall_seconds`` covers loading,
    both evaluations and training.
    """
    import copy

    import torch

    from tools.project_runtime import resolve_project_root

    check_run_label(label)
    check_config(config)
    root = Path(root) if root is not None else resolve_project_root(Path(__file__).resolve().parent)
    started = time.perf_counter()
    cpu_started = time.process_time()
    hardware = hardware_snapshot()
    check_warm_start(warm_start_variant)
    if model is None:
        path, cached, build_seconds = sft_checkpoint_path(seed=0, root=root, variant=warm_start_variant)
        model, tokenizer = load_policy(path)
        warm_start = {"path": str(path.relative_to(root)), "cached": cached, "build_seconds": build_seconds,
                      "variant": warm_start_variant}
    warm_start = dict(warm_start or {})
    path = Path(warm_start.get("path", ""))
    full = path if path.is_absolute() else root / path
    warm_start["content_sha256"] = _content_hash(full) if full.is_dir() else "0" * 64
    default_train, default_heldout = split_problems()
    train = default_train if train is None else train
    heldout = default_heldout if heldout is None else heldout
    eval_kwargs = dict(samples_per_prompt=config.eval_k, temperature=config.temperature,
                       max_new_tokens=config.max_new_tokens, ks=tuple(k for k in (1, 2, 4, 8, 16) if k <= config.eval_k))
    torch.manual_seed(config.seed)
    before = evaluate(model, tokenizer, heldout, **eval_kwargs)
    ref_model = copy.deepcopy(model).eval() if config.beta > 0 else None
    if ref_model is not None:
        for parameter in ref_model.parameters():
            parameter.requires_grad_(False)
    train_started = time.perf_counter()
    steps = train_fn(model, tokenizer, train, config, ref_model=ref_model, progress=progress)
    train_seconds = time.perf_counter() - train_started
    after = evaluate(model, tokenizer, heldout, **eval_kwargs)
    hardware["load_average_after"] = load_average()
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_label": label,
        "created_utc": utc_now(),
        "config": config.to_dict(),
        "task": {"id": TASK_ID, "train_prompts": len(train), "heldout_prompts": len(heldout),
                 "disjoint": not ({p["prompt"] for p in train} & {p["prompt"] for p in heldout})},
        "warm_start": warm_start,
        "steps": steps,
        "eval": {"heldout_prompts": len(heldout), "before": before, "after": after},
        "train_seconds": round(train_seconds, 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(time.process_time() - cpu_started, 3),
        "framework": framework_versions(),
        "hardware": hardware,
    }
    if write:
        write_record(root / output_relative_path(label), record)
    return record


def headline(record: dict) -> dict:
    before, after = record["eval"]["before"], record["eval"]["after"]
    return {"run_label": record["run_label"], "pass_at_1_before": before["pass_at_1"],
            "pass_at_1_after": after["pass_at_1"], "gain": round(after["pass_at_1"] - before["pass_at_1"], 6),
            "greedy_before": before["greedy_accuracy"], "greedy_after": after["greedy_accuracy"],
            "steps": len(record["steps"]), "train_seconds": record.get("train_seconds"),
            "wall_seconds": record["wall_seconds"], "load_average_before": record["hardware"]["load_average_before"],
            "load_average_after": record["hardware"]["load_average_after"], "cpu_count": record["hardware"]["cpu_count"],
            "torch_threads": record["hardware"]["torch_threads"]}


def load_records(root, labels) -> dict:
    """{label: record} for the labels whose file exists and validates."""
    out = {}
    for label in labels:
        path = Path(root) / output_relative_path(label)
        if path.exists():
            record = json.loads(path.read_text(encoding="utf-8"))
            validate_record(record)
            out[label] = record
    return out


# ----------------------------------------------------------------------------------------------- figures
def _png(fig) -> bytes:
    from tools.notebook_runtime import figure_png

    fig.tight_layout()
    return figure_png(fig, dpi=90, tight=False)


STEP_PANELS = [("reward_mean", "reward mean"), ("reward_std", "reward std"),
               ("frac_reward_zero_std", "frac_reward_zero_std"), ("completion_length", "completion length"),
               ("clip_ratio_low", "clip ratio low"), ("clip_ratio_high", "clip ratio high"),
               ("approx_kl", "approx KL old->new"), ("kl_ref", "KL to reference"), ("entropy", "token entropy"),
               ("strict_accuracy", "strict accuracy (train samples)")]


def plot_steps(steps, title: str = "", others: dict | None = None) -> bytes:
    """PNG: one panel per logged metric; ``others`` = {name: steps} drawn in the same panels."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    series = {"run": steps} if others is None else dict(others)
    fig, axes = plt.subplots(2, 5, figsize=(16, 5.4))
    for axis, (key, name) in zip(axes.flat, STEP_PANELS):
        for label, rows in series.items():
            xs = [r["step"] for r in rows if r.get(key) is not None]
            ys = [r[key] for r in rows if r.get(key) is not None]
            axis.plot(xs, ys, label=label, linewidth=1.2)
        if key == "kl_ref" and all(r.get("kl_ref") is None for rows in series.values() for r in rows):
            axis.text(0.5, 0.5, "beta = 0: no reference", ha="center", va="center", transform=axis.transAxes)
        axis.set_title(name, fontsize=9)
        axis.grid(alpha=0.3)
    if len(series) > 1:
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    return _png(fig)


def plot_pass_maj(record: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 3.6))
    for phase, style in (("before", "--"), ("after", "-")):
        ev = record["eval"][phase]
        ks = [int(k) for k in ev["pass_at_k"]]
        axis.plot(ks, [ev["pass_at_k"][str(k)] for k in ks], style, marker="o", label=f"pass@k {phase}")
        axis.plot(ks, [ev["maj_at_k"][str(k)] for k in ks], style, marker="s", label=f"maj@k {phase}")
    axis.set_xscale("log", base=2)
    axis.set(xlabel="k", ylabel="held-out accuracy", ylim=(0, 1.02), title="pass@k vs maj@k, before / after GRPO")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return _png(fig)


def plot_ablations(records: dict) -> bytes:
    return plot_steps(None, title="ablations (records under benchmarks/results/online/)",
                      others={label: rec["steps"] for label, rec in records.items()})


def ablation_table(records: dict) -> str:
    lines = ["| 记录 | 起点 | μ | loss_type | ε_high | reward | pass@1 前 → 后 | 留出集“包含答案” 前 → 后 | "
             "末 10 步 clip high | 末 10 步 approx_kl | 末 10 步长度 | 末 10 步熵 | 末 10 步训练奖励 | 末 10 步 strict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, rec in records.items():
        cfg, tail = rec["config"], rec["steps"][-10:] or [{}]
        mean = lambda key, tail=tail: sum(r.get(key, 0.0) for r in tail) / len(tail)  # noqa: E731
        before, after = rec["eval"]["before"], rec["eval"]["after"]
        contains = (f"{before['contains_answer_rate']:.3f} → {after['contains_answer_rate']:.3f}"
                    if "contains_answer_rate" in before and "contains_answer_rate" in after else "—")
        lines.append(f"| `{label}` | {rec['warm_start'].get('variant', 'sft')} | {cfg['num_iterations']} | "
                     f"{cfg['loss_type']} | {cfg['epsilon_high']} | "
                     f"{cfg['reward']} | {before['pass_at_1']:.3f} → {after['pass_at_1']:.3f} | {contains} | "
                     f"{mean('clip_ratio_high'):.4f} | {mean('approx_kl'):.5f} | {mean('completion_length'):.2f} | "
                     f"{mean('entropy'):.3f} | {mean('reward_mean'):.3f} | {mean('strict_accuracy'):.3f} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- grading policy
GRADING_SFT_STEPS = 40


def grading_policy(seed: int = 0):
    """(model, tokenizer) built in memory, without any cache: the tiny Qwen2 architecture, seeded random init, then
    GRADING_SFT_STEPS steps of SFT on ``a+b=`` -> answer<EOS> so that sampled completions end with EOS often.

    For the lesson's grading oracle (autograde/grpo_grader/oracles/nb07_online_grpo.py): the grader and the
    learner-side driver build the same weights (one torch thread), a few seconds on a CPU.
    """
    import torch

    from tools import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    tokenizer.padding_side = "left"
    model = tiny_model._build_model(dict(tiny_model.TINY_ARCHITECTURE, vocab_size=len(tokenizer)), tokenizer, seed,
                                    torch.float32)
    rows = []
    for problem in arithmetic_problems():
        prompt_ids = tokenizer(chat_prompt(tokenizer, problem["prompt"]), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(f"{problem['answer']}{tokenizer.eos_token}", add_special_tokens=False)["input_ids"]
        rows.append(prompt_ids + answer_ids)
    order = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(GRADING_SFT_STEPS):
        batch = [rows[order.randrange(len(rows))] for _ in range(16)]
        width = max(len(r) for r in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)  # [B, T]
        labels = torch.full((len(batch), width), -100, dtype=torch.long)  # [B, T]
        for i, row in enumerate(batch):
            ids[i, :len(row)] = torch.tensor(row)
            labels[i, len(row) - 3:len(row)] = torch.tensor(row[-3:])
        model(input_ids=ids, attention_mask=(labels != -100) | (ids != tokenizer.pad_token_id), labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model, tokenizer
