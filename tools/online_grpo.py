"""The online GRPO lesson's runtime (notebook nb07_online_grpo, ``make online``).

What lives here (reusable, not graded):

* the task: the sum of four digits ``"6+7+9+4="`` in the course's ChatML format, answered by one integer and
  scored by ``integer-answer-v1`` (nb04's ``verify_integer_response``, passed in by the caller as ``verify``:
  this runtime never imports the generated ``tools.lessons``, the lessons import it);
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

import copy
import functools
import itertools
import json
import math
import os
import platform
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.loss_types import CLIPPED_LOSS_TYPES as LOSS_TYPES  # the --loss-type values (lesson 7's grpo_step)
from tools.project_runtime import check_run_label  # the run-label rule of every record

TASK_ID = "four-digit-sum-scratchpad-v1"
SCHEMA_VERSION = "online-grpo/v1"
WORKLOAD_ID = "online-grpo"
SEEDS_SCHEMA_VERSION = "online-grpo-seeds/v1"
SEEDS_WORKLOAD_ID = "online-grpo-seeds"
RESULTS_KIND = "online"  # benchmarks/results/online/ (reference labels) or benchmarks/results/local/online/ (others)
RESULTS_DIR = Path("benchmarks") / "results" / RESULTS_KIND
SFT_BUILDER_VERSION = 3
SFT_MARKER = "online_sft.json"
REWARDS = ("integer-answer-v1", "contains-answer-loophole")
OUTCOMES = ("right", "wrong", "unparseable")  # what a held-out sample is (evaluate()'s "outcomes")

# The task: the sum of ADDENDS single digits, "6+7+9+4=". The tiny model does not add four digits reliably in one
# step, but it can add two numbers at a time: the scratchpad (scratchpad()) writes the running sum,
# "6+7=13, 13+9=22, 22+4=26".
# SFT warm start: every order of the SFT pool's problems, a fraction SFT_SCRATCH_FRACTION of them answered with the
# scratchpad and the rest with the bare answer (plus SFT_FACT_COPIES of every two-operand step); so the warm start
# sometimes shows its work and sometimes answers at once (which it does more often wrongly on new problems: the
# lesson measures both). SFT_STEPS optimizer steps of SFT_BATCH examples.
ADDENDS = 4
RL_MULTISETS = 160
# SFT_SCRATCH_FRACTION was chosen by measurement (seed 0, held-out pass@1 of the warm start, 16 samples per prompt):
# 0.5 -> 0.588 (above START_RANGE), 0.25 -> 0.522, 0.15 -> 0.467. Fewer scratchpads in the SFT data also make the
# scratchpads less accurate (right 0.72 / 0.29 / 0.21 of the time) while the bare answers get better (0.43 / 0.59 /
# 0.50), so at 0.15 RL sharpens the bare answers rather than moving to scratchpads: the lesson reports which from the
# records (og.seeds_table), it does not assume it.
SFT_SCRATCH_FRACTION = 0.15
SFT_FACT_COPIES = 0  # two-operand steps as problems of their own: 4 copies made the bare answers as accurate as
# the scratchpads (measured on seed 0 while designing the task), so the steps are learnt inside the scratchpads only
# Warm starts: "sft" (the lesson's) and "sft-list", the same data where a fraction SFT_LIST_FRACTION of the bare
# answers list three numbers, the answer first or second ("7 12 3"): a completion that contains the answer but that
# integer-answer-v1 (which parses the last integer) judges wrong. The reward-hacking ablation starts there, so that
# the loophole verifier's blind spot is within sampling reach.
WARM_STARTS = ("sft", "sft-list")
SFT_LIST_FRACTION = 0.3
SFT_STEPS = 1600
SFT_BATCH = 32
SFT_LEARNING_RATE = 3e-3
# The SFT runs on one torch thread whatever the caller set: float sums in another order give other weights, and the
# records' warm-start hash must be the one a fresh build on the same float platform gives (``float_platform``;
# tested). (Not in the marker: the hash covers the marker file, and the committed records were built on one thread.)
SFT_THREADS = 1
# Where the warm start of the records that carry no ``warm_start.built_on`` (every record written before
# 2026-12-03) was built: the course's Intel Xeon machine ("cpu" in benchmarks/results/latest.json). Its torch vector
# width was not recorded, so it is left out: only the keys given here are compared (``same_float_platform``).
UNRECORDED_WARM_START_PLATFORM = {"machine": "x86_64", "cpu_vendor": "GenuineIntel"}
HELDOUT_SIZE = 40
SPLIT_SEED = 0


# ----------------------------------------------------------------------------------------------- task
def addends_of(prompt: str) -> tuple[int, ...]:
    """``"3+5+9+1="`` -> ``(3, 5, 9, 1)``."""
    return tuple(int(x) for x in prompt.rstrip("=").split("+"))


def equivalent_key(prompt: str) -> tuple[int, ...]:
    """What makes two prompts the same problem: their addends as a multiset (sorted). ``"9+3+5+1="`` and ``"1+3+5+9="``
    are the same problem written in another order (commuted); the held-out rule is stated on this key."""
    return tuple(sorted(addends_of(prompt)))


def problem(addends) -> dict:
    return {"prompt": "+".join(str(int(a)) for a in addends) + "=", "answer": int(sum(addends))}


def scratchpad(addends) -> str:
    """The worked answer: a running sum, one addition per step, ``"6+7=13, 13+9=22"``; its last integer is the
    answer, so integer-answer-v1 parses it (and gives it no format bonus: it is not one integer alone)."""
    total, steps = int(addends[0]), []
    for a in addends[1:]:
        steps.append(f"{total}+{int(a)}={total + int(a)}")
        total += int(a)
    return ", ".join(steps)


def task_pools(seed: int = SPLIT_SEED) -> dict:
    """The three disjoint pools of problems (multisets of ADDENDS digits, a fixed shuffle):

    * ``heldout``: HELDOUT_SIZE multisets, each asked in one fixed order - evaluation only;
    * ``rl``: RL_MULTISETS multisets, every order of each - the RL training prompts;
    * ``sft``: the remaining multisets, every order - the SFT warm start's data.

    No held-out problem, nor any reordering of it, is in the SFT or RL data (``check_heldout_rule``)."""
    multisets = sorted({tuple(sorted(t)) for t in itertools.product(range(10), repeat=ADDENDS)})
    rng = random.Random(seed)
    rng.shuffle(multisets)
    held, rl, sft = (
        multisets[:HELDOUT_SIZE],
        multisets[HELDOUT_SIZE : HELDOUT_SIZE + RL_MULTISETS],
        multisets[HELDOUT_SIZE + RL_MULTISETS :],
    )

    def orders(m):
        return sorted(set(itertools.permutations(m)))

    return {
        "heldout": [problem(rng.choice(orders(m))) for m in held],
        "rl": [problem(t) for m in rl for t in orders(m)],
        "sft": [problem(t) for m in sft for t in orders(m)],
    }


def two_operand_facts() -> list[dict]:
    """Every single step a scratchpad takes, as a problem of its own: ``x+y=`` for a running total x
    (0..9*(ADDENDS-1)) and a digit y. SFT_FACT_COPIES copies of each go into the SFT data; none has ADDENDS addends,
    so none is a held-out problem."""
    return [problem((x, y)) for x in range(9 * (ADDENDS - 1) + 1) for y in range(10)]


def check_heldout_rule(heldout, *training_sets) -> None:
    """Raise ValueError when a held-out problem, or any reordering of it, is in one of the training sets."""
    held = {equivalent_key(p["prompt"]) for p in heldout}
    for data in training_sets:
        leaked = held & {equivalent_key(p["prompt"]) for p in data}
        if leaked:
            raise ValueError(f"留出题（或它的交换形式）出现在训练数据里：{sorted(leaked)[:5]}")


def heldout_subsets(train, heldout) -> dict:
    """The held-out prompts split by whether a reordering of them is in ``train``: ``equivalent_in_training``
    (should be empty: ``check_heldout_rule``) and ``new``."""
    seen = {equivalent_key(p["prompt"]) for p in train}
    return {
        "equivalent_in_training": [p["prompt"] for p in heldout if equivalent_key(p["prompt"]) in seen],
        "new": [p["prompt"] for p in heldout if equivalent_key(p["prompt"]) not in seen],
    }


def split_problems(seed: int = SPLIT_SEED) -> tuple[list[dict], list[dict]]:
    """(train, heldout): the RL training problems and the held-out ones (``task_pools``)."""
    pools = task_pools(seed)
    check_heldout_rule(pools["heldout"], pools["rl"], pools["sft"])
    return pools["rl"], pools["heldout"]


def chat_prompt(tokenizer, prompt: str) -> str:
    """The prompt rendered as one ChatML user turn plus the generation prompt (assistant turn opened)."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def encode_prompts(tokenizer, prompts) -> dict:
    """Left-padded ``input_ids`` / ``attention_mask`` ``[B, P]`` of the chat-rendered prompts."""
    import torch

    rows = [tokenizer(chat_prompt(tokenizer, p), add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)  # [B, P]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, P]
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return {"input_ids": ids, "attention_mask": mask}


# ----------------------------------------------------------------------------------------------- rewards
def strict_rewards(
    completions, answers, verify, correctness_weight: float = 1.0, format_weight: float = 0.1
) -> list[float]:
    """integer-answer-v1 total reward of each completion. ``verify`` is nb04's ``verify_integer_response``
    (``tools.lessons.nb04_verifiable_rewards``), passed in by the lesson or the command line."""
    return [
        verify(text, int(answer), correctness_weight, format_weight)["total_reward"]
        for text, answer in zip(completions, answers)
    ]


def strict_correct(completions, answers, verify) -> list[float]:
    """1.0 when integer-answer-v1 (``verify``, nb04's verifier) judges the completion correct, else 0.0 (held-out
    accuracy uses this)."""
    return [verify(text, int(answer))["correctness"] for text, answer in zip(completions, answers)]


def loophole_rewards(completions, answers) -> list[float]:
    """The gameable verifier of nb04 Step 3b: full reward whenever the answer's digits appear anywhere."""
    return [1.0 if str(int(answer)) in text else 0.0 for text, answer in zip(completions, answers)]


def reward_function(name: str, verify, format_weight: float):
    """The reward ``name`` (REWARDS) as ``fn(completions, answers) -> list[float]``; ``verify`` is nb04's verifier,
    ``format_weight`` its format bonus (integer-answer-v1 only: OnlineConfig.format_weight)."""
    if name == "integer-answer-v1":
        return functools.partial(strict_rewards, verify=verify, format_weight=format_weight)
    if name == "contains-answer-loophole":
        return loophole_rewards
    raise ValueError(f"reward 必须是 {REWARDS} 之一，收到 {name!r}")


# ----------------------------------------------------------------------------------------------- log-probs
def completion_logps(
    model,
    prompt_ids,
    prompt_mask,
    completion_ids,
    completion_mask,
    temperature: float = 1.0,
    with_entropy: bool = False,
):
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
    logits = logits[:, -width - 1 : -1, :] / temperature  # [N, C, V] the distributions that produced each token
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

    marker = {
        "builder_version": SFT_BUILDER_VERSION,
        "task": TASK_ID,
        "seed": seed,
        "steps": SFT_STEPS,
        "addends": ADDENDS,
        "rl_multisets": RL_MULTISETS,
        "scratch_fraction": SFT_SCRATCH_FRACTION,
        "fact_copies": SFT_FACT_COPIES,
        "batch": SFT_BATCH,
        "learning_rate": SFT_LEARNING_RATE,
        "heldout_size": HELDOUT_SIZE,
        "split_seed": SPLIT_SEED,
        "tiny_builder_version": tiny_model.BUILDER_VERSION,
        "torch": package_version("torch"),
        "transformers": package_version("transformers"),
    }
    if check_warm_start(variant) != "sft":  # (the lesson's own warm start keeps its marker: its cache stays valid)
        marker.update(variant=variant, list_fraction=SFT_LIST_FRACTION)
    return marker


def sft_examples(seed: int = 0, variant: str = "sft") -> list[dict]:
    """The SFT data set: every problem of the SFT pool (``task_pools``), answered with the scratchpad with
    probability SFT_SCRATCH_FRACTION and with the bare answer otherwise, then SFT_FACT_COPIES copies of every
    two-operand step (``two_operand_facts``) with its bare answer (0 copies at present: the steps appear only inside
    the scratchpads). Never a held-out problem nor a reordering of one.

    ``variant="sft-list"``: the same draws, and then SFT_LIST_FRACTION of the bare answers of the SFT pool become a
    list of three different numbers with the answer first or second, never last (extra draws from a second
    generator, so "sft" is unchanged)."""
    listing = check_warm_start(variant) == "sft-list"
    rng = random.Random(seed)
    extra = random.Random(seed + 7919)
    examples = []
    for item in task_pools()["sft"]:
        addends = addends_of(item["prompt"])
        shown = rng.random() < SFT_SCRATCH_FRACTION
        completion = scratchpad(addends) if shown else str(item["answer"])
        if listing and not shown and extra.random() < SFT_LIST_FRACTION:
            others = extra.sample([n for n in range(9 * ADDENDS + 1) if n != item["answer"]], 2)
            first = extra.random() < 0.5
            numbers = [item["answer"], *others] if first else [others[0], item["answer"], others[1]]
            completion = " ".join(map(str, numbers))
        examples.append({"prompt": item["prompt"], "completion": completion})
    examples += [
        {"prompt": f["prompt"], "completion": str(f["answer"])}
        for f in two_operand_facts()
        for _ in range(SFT_FACT_COPIES)
    ]
    return examples


def build_sft_checkpoint(path, seed: int = 0, variant: str = "sft") -> Path:
    """Supervised warm start on ``sft_examples`` (never a held-out problem nor a reordering of one, nor an RL
    prompt); deterministic for ``seed``."""
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
    threads = torch.get_num_threads()
    torch.set_num_threads(SFT_THREADS)
    try:
        _sft_steps(model, optimizer, rows, order, pad)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    (path / SFT_MARKER).write_text(
        json.dumps(_sft_marker(seed, variant), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return path


def _sft_steps(model, optimizer, rows, order, pad) -> None:
    import torch

    for _ in range(SFT_STEPS):
        batch = [rows[order.randrange(len(rows))] for _ in range(SFT_BATCH)]
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)  # [B, T]
        labels = torch.full((len(batch), width), -100, dtype=torch.long)  # [B, T] loss on the answer only
        mask = torch.zeros((len(batch), width), dtype=torch.long)  # [B, T]
        for i, (p, a) in enumerate(batch):
            ids[i, : len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p) : len(p) + len(a)] = torch.tensor(a)
            mask[i, : len(p) + len(a)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def float_platform() -> dict:
    """What, besides the code and the library versions, decides the bits of a float32 computation on this CPU: the
    architecture, the CPU's vendor (MKL takes other code paths on other vendors) and the vector width torch's
    kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``, e.g. "AVX2", "AVX512": wider vectors sum in
    another order). The SFT warm start is bit-for-bit reproducible on one such platform, not across them: 1,600
    AdamW steps carry the last-bit differences of a matmul into other weights."""
    import torch

    from tools.training_mechanism_runtime import cpuinfo_value

    return {
        "machine": platform.machine(),
        "cpu_vendor": cpuinfo_value("vendor_id") or platform.processor() or "unknown",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def same_float_platform(recorded: dict, here: dict) -> bool:
    """True when every key ``recorded`` gives (``float_platform``'s, or fewer where a record did not say) has the same
    value ``here``: then a fresh warm-start build must give the recorded hash."""
    return bool(recorded) and all(here.get(key) == value for key, value in recorded.items())


def warm_start_built_on(record: dict) -> dict:
    """The float platform that built a record's warm start: ``warm_start.built_on``, or
    UNRECORDED_WARM_START_PLATFORM for the records written before it was recorded."""
    return record["warm_start"].get("built_on") or dict(UNRECORDED_WARM_START_PLATFORM)


def _built_on_path(final: Path) -> Path:  # beside the checkpoint folder: a file inside it would change its hash
    return final.with_name(final.name + ".built-on.json")


def warm_start_platform_of(path) -> dict | None:
    """The ``float_platform`` that built the warm-start cache ``path`` (None when the cache predates the record)."""
    try:
        built_on = json.loads(_built_on_path(Path(path)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return built_on if isinstance(built_on, dict) else None


def _sft_matches(path: Path, seed: int, variant: str = "sft") -> bool:
    try:
        return json.loads((path / SFT_MARKER).read_text(encoding="utf-8")) == _sft_marker(seed, variant)
    except (OSError, ValueError):
        return False


def sft_checkpoint_path(seed: int = 0, root=None, variant: str = "sft") -> tuple[Path, bool, float | None]:
    """``(path, was_cached, build_seconds)`` of ``<course root>/.cache/online-sft-seed<seed>/`` (``variant``
    "sft-list": ``online-sft-list-seed<seed>/``), built when missing.

    Built atomically (temporary folder + rename) like ``tools.tiny_model``'s checkpoint; a marker file holds the
    recipe and library versions, and a cache with another marker is rebuilt. A build writes ``float_platform()``
    beside the folder (``<folder>.built-on.json``): records name it as ``warm_start.built_on``.
    """
    from tools.notebook_runtime import save_json
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
            save_json(_built_on_path(final), float_platform())
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final, False, round(time.perf_counter() - started, 3)


def build_warm_starts(seed: int = 0, say=print) -> None:
    """Build every warm start of ``WARM_STARTS`` that is missing or stale (``make setup`` / ``make warm-starts``): the
    lesson's runs start from "sft", the committed reward-hacking pair from "sft-list"; the records' warm-start
    hashes are checked against these caches (tests/test_nb07_online.py)."""
    for variant in WARM_STARTS:
        path, cached, seconds = sft_checkpoint_path(seed=seed, variant=variant)
        say(f"[warm-starts] {variant}: {path.name} " + ("up to date" if cached else f"built in {seconds:.1f} s"))


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


MAJ_RULE = (
    "n // k disjoint blocks of k samples each vote, votes averaged; an unparseable sample votes for "
    "'no answer' (never right); a tie counts 1/m when the right answer is one of m leaders"
)
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
    blocks = [parsed_answers[i : i + k] for i in range(0, n - n % k, k)]
    return sum(majority_vote(block, answer) for block in blocks) / len(blocks)


COMPLETION_KINDS = ("scratchpad", "direct")


def completion_kind(text: str) -> str:
    """ "scratchpad" when the completion shows a step of work (it writes a "+"), else "direct"."""
    return "scratchpad" if "+" in text else "direct"


def evaluate(
    model,
    tokenizer,
    problems,
    verify,
    samples_per_prompt: int = 16,
    temperature: float = 1.0,
    max_new_tokens: int = 25,
    seed: int = 1234,
    ks=(1, 2, 4, 8, 16),
) -> dict:
    """Held-out accuracy: sampled pass@1, pass@k and maj@k for ``ks``, and the greedy accuracy.

    Sampling is seeded (``torch.manual_seed(seed)`` right before ``generate``), so the same weights give the
    same numbers. Correctness is integer-answer-v1's ``correctness`` (``verify``: nb04's verifier, the strict one,
    whatever reward a run trained on).
    """
    import torch

    device = next(model.parameters()).device
    enc = {k: v.to(device) for k, v in encode_prompts(tokenizer, [p["prompt"] for p in problems]).items()}
    width = enc["input_ids"].shape[1]
    common = dict(
        max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    with torch.no_grad():
        torch.manual_seed(seed)
        sampled = model.generate(
            **enc,
            do_sample=True,
            temperature=temperature,
            top_p=1.0,
            top_k=0,
            num_return_sequences=samples_per_prompt,
            **common,
        )  # [B*n, P+C]
        greedy = model.generate(**enc, do_sample=False, **common)  # [B, P+C]
    texts = tokenizer.batch_decode(sampled[:, width:], skip_special_tokens=True)
    greedy_texts = tokenizer.batch_decode(greedy[:, width:], skip_special_tokens=True)
    n = samples_per_prompt
    ks = [k for k in ks if k <= n]
    pass_sums = {k: 0.0 for k in ks}
    maj_sums = {k: 0.0 for k in ks}
    correct_total = contains_total = unparseable_total = 0.0
    per_prompt = {}
    kinds = {kind: [0, 0.0] for kind in COMPLETION_KINDS}  # kind -> [samples, right]
    for i, problem in enumerate(problems):
        group = texts[i * n : (i + 1) * n]  # the n samples of this prompt
        records = [verify(t, problem["answer"]) for t in group]
        contains_total += sum(loophole_rewards(group, [problem["answer"]] * n)) / n
        c = int(sum(r["correctness"] for r in records))
        correct_total += c / n
        for text, r in zip(group, records):
            kinds[completion_kind(text)][0] += 1
            kinds[completion_kind(text)][1] += r["correctness"]
        per_prompt[problem["prompt"]] = round(c / n, 6)
        parsed = [r["parsed_answer"] for r in records]
        unparseable_total += sum(a is None for a in parsed) / n
        for k in ks:
            pass_sums[k] += pass_at_k(n, c, k)
            maj_sums[k] += majority_correct(parsed, problem["answer"], k)
    greedy_acc = sum(verify(t, p["answer"])["correctness"] for t, p in zip(greedy_texts, problems))
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
        "outcomes": {
            "right": round(correct_total / count, 6),
            "unparseable": round(unparseable_total / count, 6),
            "wrong": round(max(0.0, 1.0 - (correct_total + unparseable_total) / count), 6),
        },
        "kinds": {
            kind: {
                "share": round(count / (n * count_total), 6),
                "accuracy": None if count == 0 else round(right / count, 6),
            }
            for kind, (count, right) in kinds.items()
            for count_total in (len(problems),)
        },
        "mean_completion_chars": round(sum(len(t) for t in texts) / len(texts), 3),
        "examples": texts[:n],
        "per_prompt_pass_at_1": per_prompt,
    }


def entropy_by_kind(model, tokenizer, problems, temperature: float = 1.0) -> dict:
    """Mean per-token entropy of two teacher-forced completions of each problem: the right bare answer <answer><EOS>
    and the right scratchpad <scratchpad><EOS>; also the entropy at the first completion token (where the model
    chooses which of the two to write).

    The step log's ``entropy`` is a mean over all completion tokens, so it depends on which completions were sampled
    as well as on how certain each position is; these numbers separate the two (used to read the entropy curve).
    """
    import torch

    def per_token(completions):
        enc = encode_prompts(tokenizer, [p["prompt"] for p in problems])
        rows = [tokenizer(c + tokenizer.eos_token, add_special_tokens=False)["input_ids"] for c in completions]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)  # [B, C]
        mask = torch.zeros((len(rows), width), dtype=torch.bool)  # [B, C]
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = True
        device = next(model.parameters()).device
        with torch.no_grad():
            _, entropy = completion_logps(
                model,
                enc["input_ids"].to(device),
                enc["attention_mask"].to(device),
                ids.to(device),
                mask.to(device),
                temperature=temperature,
                with_entropy=True,
            )  # [B, C]
        entropy, mask = entropy.cpu().double(), mask.double()
        return {
            "mean": float((entropy * mask).sum() / mask.sum()),
            "first_token": float(entropy[:, 0].mean()),
            "tokens": float(mask.sum(1).mean()),
        }

    return {
        "direct": per_token([str(p["answer"]) for p in problems]),
        "scratchpad": per_token([scratchpad(addends_of(p["prompt"])) for p in problems]),
    }


# ----------------------------------------------------------------------------------------------- configuration
def _setting(default, help: str):
    """A field of :class:`OnlineConfig`: its default and its help text, the one place both are written
    (``python -m tools.cli.online`` builds its flags from them)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class OnlineConfig:
    """Settings of one online GRPO run (TRL's names). ``make online`` and the notebook use the same defaults; the
    command line's flags are these fields (``--num-steps`` ...), with the help texts below. Checked once, when built
    (``check_config``); frozen, so a built config stays valid (``dataclasses.replace`` makes a changed copy)."""

    num_steps: int = _setting(100, "rollout -> update rounds")
    prompts_per_step: int = _setting(16, "training prompts per rollout batch")
    num_generations: int = _setting(8, "G completions per prompt (TRL num_generations)")
    num_iterations: int = _setting(1, "mu: optimisation epochs per rollout batch (TRL num_iterations)")
    loss_type: str = _setting("grpo", f"TRL loss_type: {' | '.join(LOSS_TYPES)}")
    epsilon: float = _setting(0.2, "lower clip range (TRL epsilon)")
    epsilon_high: float = _setting(0.2, "upper clip range (TRL epsilon_high; 0.28 = DAPO clip-higher)")
    beta: float = _setting(0.0, "KL coefficient to the frozen reference (TRL beta)")
    temperature: float = _setting(1.0, "sampling temperature (TRL temperature)")
    top_p: float = _setting(1.0, "nucleus sampling (TRL top_p)")
    max_new_tokens: int = _setting(
        25, "completion length limit (TRL max_completion_length; the longest scratchpad and its EOS take 25)"
    )
    learning_rate: float = _setting(6e-4, "AdamW learning rate")
    max_grad_norm: float = _setting(1.0, "gradient clipping (TRL max_grad_norm)")
    seed: int = _setting(0, "sampling and batch-order seed (overridden by --seeds)")
    reward: str = _setting(
        "integer-answer-v1",
        f"the training reward: {' | '.join(REWARDS)} (the loophole verifier is the reward-hacking ablation's)",
    )
    format_weight: float = _setting(
        0.0,
        "integer-answer-v1's format bonus for a completion that is one integer alone (lesson 4's default is 0.1; "
        "it taxes a scratchpad, so the lesson trains on correctness only)",
    )
    eval_k: int = _setting(16, "samples per held-out prompt for pass@k / maj@k")
    eval_every: int = _setting(
        10,
        "held-out curve: evaluate held-out pass@1 (same evaluation as before/after) every N training steps; "
        "0 = only before and after. Sampling is seeded, so the training steps are the same with any N",
    )
    use_bias_correction_kl: bool = _setting(
        True,
        "TRL's option and default: the KL term times the ratio (matters "
        "when beta > 0); --no-use-bias-correction-kl gives the plain k3 KL",
    )

    def __post_init__(self):
        check_config(self)

    def to_dict(self) -> dict:
        return asdict(self)


def check_config(config: OnlineConfig) -> None:
    """Raise ValueError (Chinese) for a setting no run can use."""
    ints = {
        "num_steps": 0,
        "prompts_per_step": 1,
        "num_generations": 2,
        "num_iterations": 1,
        "max_new_tokens": 1,
        "eval_k": 1,
        "eval_every": 0,
    }
    for name, low in ints.items():
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} 必须是 >= {low} 的整数，收到 {value!r}")
    for name in ("epsilon", "epsilon_high", "temperature", "learning_rate", "max_grad_norm"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} 必须是正的有限数，收到 {value!r}")
    for name in ("beta", "format_weight"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} 必须是非负的有限数，收到 {value!r}")
    if not isinstance(config.use_bias_correction_kl, bool):
        raise ValueError(f"use_bias_correction_kl 必须是 True 或 False，收到 {config.use_bias_correction_kl!r}")
    if not 0 < config.top_p <= 1:
        raise ValueError(f"top_p 必须在 (0, 1] 内，收到 {config.top_p!r}")
    if config.loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type 必须是 {LOSS_TYPES} 之一，收到 {config.loss_type!r}")
    if config.reward not in REWARDS:
        raise ValueError(f"reward 必须是 {REWARDS} 之一，收到 {config.reward!r}")


# ----------------------------------------------------------------------------------------------- RUN_MODE presets
# One preset per RUN_MODE (the notebook and the tests read them here). real_gpu: Qwen2.5-0.5B-Instruct without a
# warm start, LoRA on the attention projections only (the base weights stay frozen, AdamW keeps state for the adapter
# only), a learning rate within TRL's range (GRPOConfig's default 1e-6 is for full fine-tuning; LoRA adapters are
# usually trained about ten times faster), bf16 where the card supports it natively, else float32.
REAL_GPU_MODEL_ID = "Qwen/Qwen2.5-0.5B-Instruct"
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
RUN_PRESETS = {
    "tiny_cpu": {"config": {}, "heldout": None, "lora": None},
    "smoke": {"config": {"num_steps": 3, "prompts_per_step": 4, "eval_k": 4}, "heldout": 8, "lora": None},
    "real_gpu": {
        "config": {
            "learning_rate": 1e-5,
            "max_new_tokens": 48,
            "prompts_per_step": 8,
            "num_generations": 8,
            "eval_k": 8,
        },
        "heldout": None,
        "lora": {"rank": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": LORA_TARGET_MODULES},
    },
}


def check_run_mode(mode: str) -> str:
    if mode not in RUN_PRESETS:
        raise ValueError(f"RUN_MODE 必须是 {' / '.join(RUN_PRESETS)} 之一，收到 {mode!r}")
    return mode


def preset_config(mode: str, **overrides) -> OnlineConfig:
    """The OnlineConfig of RUN_MODE ``mode`` (its preset over the defaults, then ``overrides``)."""
    return OnlineConfig(**{**RUN_PRESETS[check_run_mode(mode)]["config"], **overrides})


def preset_lora_config(mode: str):
    """RUN_MODE ``mode``'s LoRA adapter as a peft ``LoraConfig`` (what TRL's ``peft_config`` takes), or None."""
    lora = RUN_PRESETS[check_run_mode(mode)]["lora"]
    if lora is None:
        return None
    from peft import LoraConfig, TaskType

    return LoraConfig(
        r=lora["rank"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=list(lora["target_modules"]),
        bias="none",
        task_type=TaskType.CAUSAL_LM,
    )


def preset_dtype(mode: str):
    """bf16 for real_gpu on a card with native bf16, else float32 (the CPU modes always float32)."""
    import torch

    if (
        check_run_mode(mode) == "real_gpu"
        and torch.cuda.is_available()
        and torch.cuda.is_bf16_supported(including_emulation=False)
    ):
        return torch.bfloat16
    return torch.float32


def load_preset_policy(mode: str, path, device="cpu", seed: int = 0):
    """(model, tokenizer) for RUN_MODE ``mode`` from the local checkpoint folder or model id ``path``: its dtype and,
    for real_gpu, a LoRA adapter on LORA_TARGET_MODULES (tools.grpo_experiment.attach_lora; only the adapter
    trains). Eval mode (no dropout)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lora = RUN_PRESETS[check_run_mode(mode)]["lora"]
    local = Path(str(path)).is_dir()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=local, dtype=preset_dtype(mode)).to(device)
    if lora is not None:
        from tools.grpo_experiment import attach_lora

        torch.manual_seed(seed)
        model, _ = attach_lora(model, lora["rank"], lora["alpha"], lora["dropout"], lora["target_modules"])
    model.eval()
    return model, tokenizer


def make_optimizer(model, learning_rate: float):
    """AdamW over the parameters that require grad (with LoRA: the adapter only; no state for frozen weights)."""
    import torch

    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)


def output_relative_path(label: str, workload: str = WORKLOAD_ID, seed: int | None = None) -> Path:
    """Where the record of ``label`` lives: the committed reference labels (REFERENCE_LABELS) under RESULTS_DIR,
    every other label (a learner's run, a test's scratch run) under the git-ignored LOCAL_RESULTS_DIR. ``seed``:
    one seed's record of a multi-seed run (``<workload>_<label>_seed<k>.json``)."""
    from tools.project_runtime import record_relative_path

    name = check_run_label(label) if seed is None else f"{label}_seed{int(seed)}"
    return record_relative_path(RESULTS_KIND, workload, name, (name,) if label in REFERENCE_LABELS else ())


def seeds_summary_path(label: str) -> Path:
    return output_relative_path(label, SEEDS_WORKLOAD_ID)


# ----------------------------------------------------------------------------------------------- record
def load_average() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return [0.0, 0.0, 0.0]


def hardware_snapshot() -> dict:
    import torch

    return {
        "cpu_count": os.cpu_count() or 1,
        "torch_threads": torch.get_num_threads(),
        "load_average_before": load_average(),
        "load_average_after": load_average(),
        "cuda_available": bool(torch.cuda.is_available()),
        "platform": platform.platform(),
    }


def framework_versions() -> dict:
    import torch

    from tools.notebook_runtime import package_version

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": package_version("transformers"),
        "trl": package_version("trl"),
    }


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


_SCHEMAS = {"record": "online-grpo-v1.json", "seeds": "online-grpo-seeds-v1.json"}  # under tools/schemas/


def _validate(instance, schema_name: str) -> None:
    """Raise ``jsonschema.ValidationError`` (the most relevant error, as ``jsonschema.validate`` picks it) when
    ``instance`` breaks the schema ``schema_name``."""
    import jsonschema

    from tools.notebook_runtime import schema_validator

    validator = schema_validator(Path(__file__).resolve().parent / "schemas" / _SCHEMAS[schema_name])
    if not validator.is_valid(instance):
        raise jsonschema.exceptions.best_match(validator.iter_errors(instance))


def validate_record(record) -> None:
    _validate(record, "record")


_VALID_TEXTS: set[tuple[str, str]] = set()  # (schema name, sha256 of a file's text) that validated in this process


def read_validated(path, schema_name: str = "record") -> dict:
    """The JSON file ``path``, parsed, after it validates against ``schema_name`` ("record" or "seeds"). Its text's
    sha256 is remembered: the same bytes read again are parsed but not validated again (the lesson reads each
    committed record a few times)."""
    import hashlib

    text = Path(path).read_text(encoding="utf-8")
    value = json.loads(text)
    key = (schema_name, hashlib.sha256(text.encode("utf-8")).hexdigest())
    if key not in _VALID_TEXTS:
        _validate(value, schema_name)
        _VALID_TEXTS.add(key)
    return value


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
    ("β = 0.04（到热启动的 KL，use_bias_correction_kl=True）", "beta", "--beta 0.04"),
    ("μ = 4, ε_high = 0.28（clip-higher；对照 μ = 4）", "mu4_clip_higher", "--num-iterations 4 --epsilon-high 0.28"),
    ("奖励投机：起点有时列出三个数，包含即得分", "loophole", "--warm-start sft-list --reward contains-answer-loophole"),
    ("同一起点，严格验证器（修复后的奖励）", "loophole_fixed", "--warm-start sft-list"),
]


# The labels of the committed records (the ablations above and the multi-seed summary): only these are written
# under RESULTS_DIR.
SEEDS_REFERENCE_LABEL = "reference"
REFERENCE_LABELS = frozenset(label for _, label, _ in ABLATIONS) | {SEEDS_REFERENCE_LABEL, "trl"}


def print_progress(row: dict) -> None:
    if row["step"] % 5 == 0:
        kl = "-" if row["kl_ref"] is None else f"{row['kl_ref']:.4f}"
        print(
            f"step {row['step']:3d}  reward {row['reward_mean']:.3f}±{row['reward_std']:.3f}  "
            f"zero_std {row['frac_reward_zero_std']:.2f}  len {row['completion_length']:.2f}  "
            f"clip {row['clip_ratio_low']:.3f}/{row['clip_ratio_high']:.3f}  approx_kl {row['approx_kl']:.5f}  "
            f"kl_ref {kl}  entropy {row['entropy']:.3f}  strict {row['strict_accuracy']:.3f}  "
            f"{row['seconds']:.2f}s",
            flush=True,
        )


def _content_hash(folder) -> str:
    from tools.notebook_runtime import resolve_model_commit

    return resolve_model_commit(str(folder))[0]


def run_online_experiment(
    train_fn,
    config: OnlineConfig,
    label: str,
    *,
    verify,
    model=None,
    tokenizer=None,
    warm_start=None,
    heldout=None,
    train=None,
    root=None,
    progress=None,
    write: bool = True,
    warm_start_variant: str = "sft",
    record_seed: int | None = None,
) -> dict:
    """Evaluate -> ``train_fn`` -> evaluate, and write the validated record; returns it.

    ``train_fn(model, tokenizer, train_problems, config, ref_model=..., progress=...)`` is the lesson's
    ``train_online_grpo`` (the notebook passes its own; ``make online`` the saved one) and ``verify`` nb04's
    ``verify_integer_response`` (held-out correctness). Without ``model``
    the cached SFT warm start ``warm_start_variant`` (WARM_STARTS) is loaded. ``wall_seconds`` covers loading,
    both evaluations and training.
    """
    import copy

    import torch

    from tools.project_runtime import resolve_project_root

    check_run_label(label)
    if not isinstance(config, OnlineConfig):  # an OnlineConfig was checked when it was built (and is frozen)
        raise ValueError(f"config 必须是 OnlineConfig，收到 {type(config).__name__}")
    root = Path(root) if root is not None else resolve_project_root(Path(__file__).resolve().parent)
    started = time.perf_counter()
    cpu_started = time.process_time()
    hardware = hardware_snapshot()
    check_warm_start(warm_start_variant)
    if model is None:
        path, cached, build_seconds = sft_checkpoint_path(seed=0, root=root, variant=warm_start_variant)
        model, tokenizer = load_policy(path)
        warm_start = {
            "path": str(path.relative_to(root)),
            "cached": cached,
            "build_seconds": build_seconds,
            "variant": warm_start_variant,
        }
        built_on = warm_start_platform_of(path)
        if built_on is not None:
            warm_start["built_on"] = built_on
    warm_start = dict(warm_start or {})
    path = Path(warm_start.get("path", ""))
    full = path if path.is_absolute() else root / path
    # (no path: a model built in memory - an empty path would name the course root and hash the whole repository)
    warm_start["content_sha256"] = _content_hash(full) if warm_start.get("path") and full.is_dir() else "0" * 64
    default_train, default_heldout = split_problems()
    train = default_train if train is None else train
    heldout = default_heldout if heldout is None else heldout
    eval_kwargs = dict(
        samples_per_prompt=config.eval_k,
        temperature=config.temperature,
        max_new_tokens=config.max_new_tokens,
        ks=tuple(k for k in (1, 2, 4, 8, 16) if k <= config.eval_k),
    )
    torch.manual_seed(config.seed)
    before = evaluate(model, tokenizer, heldout, verify, **eval_kwargs)
    ref_model = copy.deepcopy(model).eval() if config.beta > 0 else None
    if ref_model is not None:
        for parameter in ref_model.parameters():
            parameter.requires_grad_(False)
    curve, curve_seconds = [curve_point(0, before)], 0.0

    def on_step(row):  # the held-out curve: every config.eval_every steps, between the before and after evaluations
        nonlocal curve_seconds
        if progress is not None:
            progress(row)
        done = row["step"] + 1
        if config.eval_every and done % config.eval_every == 0 and done < config.num_steps:
            started_eval = time.perf_counter()
            curve.append(curve_point(done, evaluate(model, tokenizer, heldout, verify, **eval_kwargs)))
            curve_seconds += time.perf_counter() - started_eval
            if progress is not None:
                print(f"held-out pass@1 after {done} steps: {curve[-1]['pass_at_1']:.3f}", flush=True)

    train_started = time.perf_counter()
    steps = train_fn(model, tokenizer, train, config, ref_model=ref_model, progress=on_step)
    train_seconds = time.perf_counter() - train_started - curve_seconds
    after = evaluate(model, tokenizer, heldout, verify, **eval_kwargs)
    curve.append(curve_point(len(steps), after))
    hardware["load_average_after"] = load_average()
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_label": label,
        "created_utc": utc_now(),
        "config": config.to_dict(),
        "task": {
            "id": TASK_ID,
            "train_prompts": len(train),
            "heldout_prompts": len(heldout),
            "disjoint": not ({p["prompt"] for p in train} & {p["prompt"] for p in heldout}),
        },
        "warm_start": warm_start,
        "steps": steps,
        "eval": {
            "heldout_prompts": len(heldout),
            "before": before,
            "after": after,
            "subsets": subset_pass_at_1(heldout_subsets(train, heldout), before, after),
            "curve": curve,
        },
        "train_seconds": round(train_seconds, 3),
        "curve_eval_seconds": round(curve_seconds, 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(time.process_time() - cpu_started, 3),
        "framework": framework_versions(),
        "hardware": hardware,
    }
    if write:
        write_record(root / output_relative_path(label, seed=record_seed), record)
    return record


def curve_point(step: int, evaluation: dict) -> dict:
    """One point of the held-out curve: after ``step`` training steps, ``evaluate``'s pass@1, outcome shares, share of
    completions that show their work and mean length in characters."""
    return {
        "step": int(step),
        "pass_at_1": evaluation["pass_at_1"],
        "outcomes": evaluation["outcomes"],
        "scratchpad_share": evaluation["kinds"]["scratchpad"]["share"],
        "mean_completion_chars": evaluation["mean_completion_chars"],
    }


def subset_pass_at_1(subsets: dict, before: dict, after: dict) -> dict:
    """{subset: {prompts, before, after}}: held-out pass@1 over each subset's prompts (per_prompt_pass_at_1)."""
    out = {}
    for name, prompts in subsets.items():
        if prompts:
            out[name] = {
                "prompts": len(prompts),
                "before": round(sum(before["per_prompt_pass_at_1"][p] for p in prompts) / len(prompts), 6),
                "after": round(sum(after["per_prompt_pass_at_1"][p] for p in prompts) / len(prompts), 6),
            }
    return out


def resolve_root() -> Path:
    from tools.project_runtime import resolve_project_root

    return resolve_project_root(Path(__file__).resolve().parent)


def preset_check(train_fn, mode: str, model_path, steps: int = 2) -> dict:
    """``steps`` training steps of RUN_MODE ``mode``'s preset (its config, dtype and LoRA) on the checkpoint folder
    ``model_path`` with the lesson's ``train_fn``, on CUDA when available else the CPU. Checks: the trainable
    parameters are exactly the LoRA adapter's (count from the shapes: rank x (in + out) per targeted Linear), AdamW
    holds state for those parameters only, the base weights are bit-identical after training and the adapter moved,
    every logged metric is finite. Returns a JSON-ready report with ``passed``."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_preset_policy(mode, model_path, device=device)
    config = preset_config(mode, num_steps=steps, prompts_per_step=2, num_generations=4)
    lora = RUN_PRESETS[mode]["lora"]
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trainable_before = {n: p.detach().clone() for n, p in trainable.items()}
    expected = None
    if lora is not None:
        expected = sum(
            lora["rank"] * (m.in_features + m.out_features)
            for name, m in model.named_modules()
            if name.split(".")[-1] in lora["target_modules"] and hasattr(m, "base_layer")
        )
    optimizer = make_optimizer(model, config.learning_rate)
    train, _ = split_problems()
    started = time.perf_counter()
    steps_log = train_fn(model, tokenizer, train, config, optimizer=optimizer)
    seconds = time.perf_counter() - started
    state_tensors = [t for st in optimizer.state.values() for t in st.values() if torch.is_tensor(t) and t.dim() > 0]
    state_numel = sum(t.numel() for t in state_tensors)
    n_trainable = sum(p.numel() for p in trainable.values())
    n_total = sum(p.numel() for p in model.parameters())
    checks = {
        "steps_logged": len(steps_log) == steps,
        "metrics_finite": all(math.isfinite(v) for row in steps_log for v in row.values() if isinstance(v, float)),
        "optimizer_state_only_for_trainable": state_numel == 2 * n_trainable,  # exp_avg + exp_avg_sq
        "base_weights_unchanged": all(
            torch.equal(p.detach(), frozen_before[n]) for n, p in model.named_parameters() if not p.requires_grad
        ),
        "trainable_weights_moved": any(not torch.equal(p.detach(), trainable_before[n]) for n, p in trainable.items()),
    }
    if lora is not None:
        checks["trainable_count_is_lora"] = n_trainable == expected
        checks["only_lora_trainable"] = all("lora_" in n for n in trainable)
        checks["dtype_is_preset"] = all(
            p.dtype == preset_dtype(mode) for p in frozen_before.values() if p.is_floating_point()
        )
    return {
        "mode": mode,
        "model": str(model_path),
        "device": device,
        "dtype": str(preset_dtype(mode)),
        "learning_rate": config.learning_rate,
        "lora": None if lora is None else dict(lora, target_modules=list(lora["target_modules"])),
        "trainable_parameters": n_trainable,
        "expected_trainable": expected,
        "total_parameters": n_total,
        "optimizer_state_numel": state_numel,
        "seconds": round(seconds, 3),
        "completion_length": [row["completion_length"] for row in steps_log],
        "checks": checks,
        "passed": all(checks.values()),
    }


# ----------------------------------------------------------------------------------------------- several seeds
@functools.cache
def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF, the density integrated
    by Simpson's rule; no scipy): 12.706 for df 1, 4.303 for df 2, 1.96 in the limit."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"自由度必须是正整数，收到 {df!r}")
    const = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x):  # P(T <= x) for x >= 0: 1/2 + the integral of the density over [0, x]; substitution u = atan(t)
        # t = tan(u) keeps the integrand smooth even for heavy tails (df = 1)
        top = math.atan(x)
        steps = 400
        h = top / steps
        total = 0.0
        for i in range(steps + 1):
            u = i * h
            t = math.tan(u)
            f = const * (1 + t * t / df) ** (-(df + 1) / 2) / math.cos(u) ** 2
            total += f * (1 if i in (0, steps) else 4 if i % 2 else 2)
        return 0.5 + total * h / 3

    low, high = 0.0, 100.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < 0.975 else (low, mid)
    return (low + high) / 2


def mean_ci95(values) -> dict:
    """Mean and two-sided 95 % t-interval of independent per-seed values (n >= 2; n = 1 gives no interval)."""
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("至少需要一个种子")
    mean = sum(values) / n
    if n == 1:
        return {"mean": round(mean, 6), "ci95": None, "method": "single seed: no interval", "n": 1}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return {
        "mean": round(mean, 6),
        "ci95": [round(mean - half, 6), round(mean + half, 6)],
        "method": f"Student t interval over {n} seeds (t_0.975,{n - 1} = {t_quantile_975(n - 1):.3f}, sample sd)",
        "n": n,
        "sd": round(sd, 6),
    }


def validate_seeds_summary(summary) -> None:
    _validate(summary, "seeds")


def seeds_summary(label: str, records: list[dict]) -> dict:
    """The multi-seed summary of ``records`` (one per seed, same configuration up to the seed)."""
    if not records:
        raise ValueError("至少需要一个种子的记录")
    base = {k: v for k, v in records[0]["config"].items() if k != "seed"}
    for record in records[1:]:
        if {k: v for k, v in record["config"].items() if k != "seed"} != base:
            raise ValueError("各种子的配置除 seed 外必须相同")
    seeds = []
    for record in records:
        before, after = record["eval"]["before"], record["eval"]["after"]
        entry = {
            "seed": record["config"]["seed"],
            "pass_at_1_before": before["pass_at_1"],
            "pass_at_1_after": after["pass_at_1"],
            "gain": round(after["pass_at_1"] - before["pass_at_1"], 6),
            "wall_seconds": record["wall_seconds"],
            "train_seconds": record.get("train_seconds"),
            "cpu_seconds": record.get("cpu_seconds"),
            "warm_start_hash": record["warm_start"]["content_sha256"],
            "record": record["run_label"],
        }
        if "outcomes" in before and "outcomes" in after:
            entry["outcomes_before"], entry["outcomes_after"] = before["outcomes"], after["outcomes"]
        seeds.append(entry)
    summary = {
        "schema_version": SEEDS_SCHEMA_VERSION,
        "run_label": check_run_label(label),
        "created_utc": utc_now(),
        "config": base,
        "task": records[0]["task"],
        "seeds": seeds,
        "gain_pass_at_1": mean_ci95([e["gain"] for e in seeds]),
        "pass_at_1_before": mean_ci95([e["pass_at_1_before"] for e in seeds]),
        "pass_at_1_after": mean_ci95([e["pass_at_1_after"] for e in seeds]),
        "framework": records[-1]["framework"],
        "hardware": records[-1]["hardware"],
    }
    subsets = [record["eval"].get("subsets", {}) for record in records]
    if all(subsets):
        summary["gain_by_heldout_subset"] = {
            name: dict(
                mean_ci95([sub[name]["after"] - sub[name]["before"] for sub in subsets]),
                prompts=subsets[0][name]["prompts"],
            )
            for name in subsets[0]
            if all(name in sub for sub in subsets)
        }
    evals = [(record["eval"]["before"], record["eval"]["after"]) for record in records]
    if all("kinds" in b and "kinds" in a for b, a in evals):
        summary["scratchpad_share_before"] = mean_ci95([b["kinds"]["scratchpad"]["share"] for b, _ in evals])
        summary["scratchpad_share_after"] = mean_ci95([a["kinds"]["scratchpad"]["share"] for _, a in evals])
        summary["mean_completion_chars_change"] = mean_ci95(
            [a["mean_completion_chars"] - b["mean_completion_chars"] for b, a in evals]
        )
    curves = [record["eval"].get("curve") for record in records]
    if all(curves):
        common = sorted(set.intersection(*({p["step"] for p in c} for c in curves)))
        by_step = [{p["step"]: p for p in c} for c in curves]
        summary["heldout_curve"] = [
            {
                "step": step,
                "pass_at_1": mean_ci95([c[step]["pass_at_1"] for c in by_step]),
                "scratchpad_share": mean_ci95([c[step]["scratchpad_share"] for c in by_step]),
                "mean_completion_chars": mean_ci95([c[step]["mean_completion_chars"] for c in by_step]),
            }
            for step in common
        ]
    if all("outcomes_before" in e for e in seeds):
        summary["gain_by_outcome"] = {
            kind: mean_ci95([e["outcomes_after"][kind] - e["outcomes_before"][kind] for e in seeds])
            for kind in OUTCOMES
        }
    return summary


def write_seeds_summary(path, summary) -> Path:
    from tools.notebook_runtime import save_json

    validate_seeds_summary(summary)
    return save_json(path, summary)


def load_seeds_summary(root, label: str):
    """The validated multi-seed summary of ``label``, or None when there is none."""
    path = Path(root) / seeds_summary_path(label)
    if not path.exists():
        return None
    return read_validated(path, "seeds")


# The headline goal the course set itself (issue 27): mean held-out pass@1 gain over seeds 0-2 at least GOAL_MEAN_GAIN
# with the lower end of its 95 % interval at least GOAL_CI_LOW.
GOAL_MEAN_GAIN = 0.30
GOAL_CI_LOW = 0.20
START_RANGE = (0.10, 0.50)  # the warm start's held-out pass@1 the course asked for: right only sometimes


def goal_met(summary: dict) -> bool:
    gain = summary["gain_pass_at_1"]
    return gain["ci95"] is not None and gain["mean"] >= GOAL_MEAN_GAIN and gain["ci95"][0] >= GOAL_CI_LOW


def _interval(stat: dict) -> str:
    if stat["ci95"] is None:
        return f"{stat['mean']:+.3f}（只有一个种子，没有区间）"
    return f"{stat['mean']:+.3f}，95% 区间 [{stat['ci95'][0]:+.3f}, {stat['ci95'][1]:+.3f}]"


def seeds_table(summary: dict) -> str:
    """Markdown: one row per seed, then the mean gain with its interval (and by outcome kind)."""
    lines = [
        f"多种子汇总 `{summary['run_label']}`（{len(summary['seeds'])} 个种子，同一配置）：",
        "",
        "| 种子 | pass@1 前 | pass@1 后 | 提高 | 用时 (s) | 热启动哈希 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in summary["seeds"]:
        lines.append(
            f"| {e['seed']} | {e['pass_at_1_before']:.3f} | {e['pass_at_1_after']:.3f} | {e['gain']:+.3f} | "
            f"{e['wall_seconds']:.1f} | `{e['warm_start_hash'][:12]}` |"
        )
    lines += [
        "",
        f"平均提高 {_interval(summary['gain_pass_at_1'])}（{summary['gain_pass_at_1']['method']}）。"
        f"课程定的目标（平均 ≥ {GOAL_MEAN_GAIN:+.2f} 且区间下端 ≥ {GOAL_CI_LOW:+.2f}）："
        + ("**达到**。" if goal_met(summary) else "**没有达到**。"),
    ]
    start = summary["pass_at_1_before"]["mean"]
    lines.append(
        f"热启动的留出集 pass@1 为 {start:.3f}；课程要求它在 {START_RANGE[0]:.2f}–{START_RANGE[1]:.2f} 之间："
        + (
            "在范围内。"
            if START_RANGE[0] <= start <= START_RANGE[1]
            else "**不在范围内**（起点偏高，能提高的空间更小）。"
        )
    )
    for kind, name in (("right", "答对"), ("wrong", "答错的整数"), ("unparseable", "无法解析")):
        if kind in summary.get("gain_by_outcome", {}):
            lines.append(f"- {name}的比例变化：{_interval(summary['gain_by_outcome'][kind])}")
    for key, name in (
        ("scratchpad_share_before", "训练前写出算式的回答比例"),
        ("scratchpad_share_after", "训练后写出算式的回答比例"),
    ):
        if key in summary:
            lines.append(f"- {name}：{_interval(summary[key])[1:]}")
    if "mean_completion_chars_change" in summary:
        lines.append(f"- 回答平均长度（字符）的变化：{_interval(summary['mean_completion_chars_change'])}")
    if "scratchpad_share_before" in summary and "mean_completion_chars_change" in summary:
        lines.append("- " + shown_work_verdict(summary))
    for key, name in (
        ("equivalent_in_training", "换个顺序出现在训练数据里的留出题"),
        ("new", "任何顺序都没训练过的留出题"),
    ):
        if key in summary.get("gain_by_heldout_subset", {}):
            stat = summary["gain_by_heldout_subset"][key]
            lines.append(f"- {name}（{stat['prompts']} 道）的 pass@1 提高：{_interval(stat)}")
    return "\n".join(lines)


def shown_work_verdict(summary: dict) -> str:
    """The lesson's prediction (more completions show their work, completions get longer) against the seeds
    summary's intervals: what they support, in words."""
    share = interval_verdict(summary["scratchpad_share_after"], summary["scratchpad_share_before"])
    length = summary["mean_completion_chars_change"]
    grows = length["ci95"] is not None and length["ci95"][0] > 0
    shrinks = length["ci95"] is not None and length["ci95"][1] < 0
    share_words = {"a > b": "上升", "a < b": "下降", "overlap": "区间重叠，看不出变化", "missing": "缺少区间"}[share]
    length_words = "变长" if grows else "变短" if shrinks else "区间含 0，看不出变化"
    if share == "a > b" and grows:
        verdict = "**成立**"
    elif share == "a < b" or shrinks:
        verdict = "**不成立**（区间支持相反的方向）"
    else:
        verdict = "**看不出**（区间分辨不出）"
    return f"导读的预测（写算式的比例上升、回答变长）：写算式的比例{share_words}，回答{length_words}——预测{verdict}。"


ABLATION_SEED_METRICS = (
    ("clip_ratio_high", "clip high"),
    ("clip_ratio_low", "clip low"),
    ("approx_kl", "approx_kl"),
    ("kl_ref", "KL 到参考"),
    ("completion_length", "长度"),
    ("entropy", "熵"),
    ("reward_mean", "训练奖励"),
    ("strict_accuracy", "strict"),
)


def load_seed_records(root, label: str) -> list[dict]:
    """The per-seed records of the multi-seed run ``label`` (those its summary lists), validated."""
    summary = load_seeds_summary(root, label)
    if summary is None:
        return []
    records = []
    for entry in summary["seeds"]:
        path = Path(root) / output_relative_path(label, seed=entry["seed"])
        records.append(read_validated(path))
    return records


def ablation_seeds_table(root, labels, tail: int = 10) -> str:
    """Markdown: for each label with a multi-seed summary, the held-out gain and the last-``tail``-step mean of each
    ABLATION_SEED_METRICS key, as mean [95 % t-interval] over its seeds; labels without one are listed as missing."""

    def cell(stat):
        if stat is None:
            return "—"
        if stat["ci95"] is None:
            return f"{stat['mean']:.3g}"
        return f"{stat['mean']:.3g} [{stat['ci95'][0]:.3g}, {stat['ci95'][1]:.3g}]"

    head = ["记录", "种子数", "pass@1 提高"] + [name for _, name in ABLATION_SEED_METRICS]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    missing = []
    for label in labels:
        records = load_seed_records(root, label)
        if not records:
            missing.append(label)
            continue
        summary = load_seeds_summary(root, label)
        row = [f"`{label}`", str(len(records)), cell(summary["gain_pass_at_1"])]
        for key, _ in ABLATION_SEED_METRICS:
            values = []
            for record in records:
                rows = [r[key] for r in record["steps"][-tail:] if r.get(key) is not None]
                if rows:
                    values.append(sum(rows) / len(rows))
            row.append(cell(mean_ci95(values)) if len(values) == len(records) else "—")
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) if len(lines) > 2 else "（还没有多种子的消融记录）"
    if missing:
        text += "\n\n没有多种子记录（只有单次运行或没有记录）：" + "、".join(f"`{m}`" for m in missing)
    return text


# (label a, label b, metric key, what the textbook predicts) of the comparisons the lesson reads from the intervals
ABLATION_COMPARISONS = [
    ("mu4", "reference", "clip_ratio_low", "μ = 4 裁剪（low）比 μ = 1 多"),
    ("mu4", "reference", "approx_kl", "μ = 4 的 approx_kl 比 μ = 1 大"),
    ("dr_grpo", "reference", "completion_length", "dr_grpo 与 grpo 的回答长度不同"),
    ("dapo", "reference", "completion_length", "dapo 与 grpo 的回答长度不同"),
    ("mu4_clip_higher", "mu4", "entropy", "ε_high = 0.28 时熵比 0.2 高（下降得更慢）"),
    ("mu4_clip_higher", "mu4", "clip_ratio_high", "ε_high = 0.28 时 clip high 比 0.2 少"),
    ("beta", "reference", "completion_length", "β > 0 时回答长度离热启动更近"),
    ("loophole", "loophole_fixed", "strict_accuracy", "漏洞验证器下训练中的 strict 更低"),
    ("loophole", "loophole_fixed", "completion_length", "漏洞验证器下回答更长（列出几个数）"),
]


def _tail_interval(root, label: str, key: str, tail: int = 10):
    records = load_seed_records(root, label)
    values = []
    for record in records:
        rows = [r[key] for r in record["steps"][-tail:] if r.get(key) is not None]
        if rows:
            values.append(sum(rows) / len(rows))
    return mean_ci95(values) if len(values) >= 2 and len(values) == len(records) else None


def interval_verdict(a, b) -> str:
    """ "a > b" / "a < b" when the two 95 % intervals do not overlap, "overlap" when they do, "missing" without both."""
    if a is None or b is None or a.get("ci95") is None or b.get("ci95") is None:
        return "missing"
    if a["ci95"][0] > b["ci95"][1]:
        return "a > b"
    if a["ci95"][1] < b["ci95"][0]:
        return "a < b"
    return "overlap"


VERDICT_WORDS = {
    "a > b": "前者更大（区间不重叠）",
    "a < b": "前者更小（区间不重叠）",
    "overlap": "区间重叠：这一规模上看不出差别",
    "missing": "缺少多种子记录",
}


def ablation_verdicts(root, comparisons=None, tail: int = 10) -> list[dict]:
    """For each comparison: the two last-``tail``-step intervals over seeds and what they support - "a > b" or
    "a < b" when the 95 % intervals do not overlap, "no difference resolved" when they do (or a record is missing)."""
    out = []
    for a, b, key, prediction in comparisons or ABLATION_COMPARISONS:
        ia, ib = _tail_interval(root, a, key, tail), _tail_interval(root, b, key, tail)
        verdict = interval_verdict(ia, ib)
        out.append(
            {
                "a": a,
                "b": b,
                "key": key,
                "prediction": prediction,
                "a_interval": ia,
                "b_interval": ib,
                "verdict": verdict,
            }
        )
    return out


def verdicts_table(verdicts) -> str:
    words = VERDICT_WORDS

    def cell(stat):
        return "—" if stat is None else f"{stat['mean']:.3g} [{stat['ci95'][0]:.3g}, {stat['ci95'][1]:.3g}]"

    lines = [
        "| 对照 | 指标（末 10 步） | 前者 | 后者 | 教科书的预测 | 区间支持什么 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in verdicts:
        lines.append(
            f"| `{v['a']}` 对 `{v['b']}` | `{v['key']}` | {cell(v['a_interval'])} | {cell(v['b_interval'])} | "
            f"{v['prediction']} | {words[v['verdict']]} |"
        )
    return "\n".join(lines)


def headline(record: dict) -> dict:
    before, after = record["eval"]["before"], record["eval"]["after"]
    return {
        "run_label": record["run_label"],
        "pass_at_1_before": before["pass_at_1"],
        "pass_at_1_after": after["pass_at_1"],
        "gain": round(after["pass_at_1"] - before["pass_at_1"], 6),
        "greedy_before": before["greedy_accuracy"],
        "greedy_after": after["greedy_accuracy"],
        "steps": len(record["steps"]),
        "train_seconds": record.get("train_seconds"),
        "wall_seconds": record["wall_seconds"],
        "load_average_before": record["hardware"]["load_average_before"],
        "load_average_after": record["hardware"]["load_average_after"],
        "cpu_count": record["hardware"]["cpu_count"],
        "torch_threads": record["hardware"]["torch_threads"],
    }


def load_records(root, labels) -> dict:
    """{label: record} for the labels whose record exists and validates: the single run's, else seed 0's of the
    multi-seed run (the committed ablations keep only their seeds' records)."""
    out = {}
    for label in labels:
        path = Path(root) / output_relative_path(label)
        if not path.exists():
            path = Path(root) / output_relative_path(label, seed=0)
        if path.exists():
            out[label] = read_validated(path)
    return out


# ----------------------------------------------------------------------------------------------- figures
def _png(fig) -> bytes:
    from tools.notebook_runtime import figure_png

    fig.tight_layout()
    return figure_png(fig, dpi=90, tight=False)


STEP_PANELS = [
    ("reward_mean", "reward mean"),
    ("reward_std", "reward std"),
    ("frac_reward_zero_std", "frac_reward_zero_std"),
    ("completion_length", "completion length"),
    ("clip_ratio_low", "clip ratio low"),
    ("clip_ratio_high", "clip ratio high"),
    ("approx_kl", "approx KL old->new"),
    ("kl_ref", "KL to reference"),
    ("entropy", "token entropy"),
    ("strict_accuracy", "strict accuracy (train samples)"),
]


def plot_steps(steps, title: str = "", others: dict | None = None) -> bytes:
    """PNG: one panel per logged metric; ``others`` = {name: steps} drawn in the same panels."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

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
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
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
    return plot_steps(
        None,
        title="ablations (records under benchmarks/results/online/)",
        others={label: rec["steps"] for label, rec in records.items()},
    )


def plot_ablation_intervals(root, labels, tail: int = 10) -> bytes | None:
    """PNG: one panel per ABLATION_SEED_METRICS key (plus the held-out gain), each label's mean over seeds of its
    last-``tail``-step value with its 95 % t-interval as an error bar; None when no label has a multi-seed record."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    present = [label for label in labels if load_seeds_summary(root, label) is not None]
    if not present:
        return None
    panels = [("gain", "held-out pass@1 gain")] + list(ABLATION_SEED_METRICS)
    fig, axes = plt.subplots(1, len(panels), figsize=(2.1 * len(panels), 3.6))
    for axis, (key, name) in zip(axes, panels):
        for i, label in enumerate(present):
            stat = (
                load_seeds_summary(root, label)["gain_pass_at_1"]
                if key == "gain"
                else _tail_interval(root, label, key, tail)
            )
            if stat is None:
                continue
            low, high = stat["ci95"]
            axis.errorbar([i], [stat["mean"]], yerr=[[stat["mean"] - low], [high - stat["mean"]]], fmt="o", capsize=3)
        axis.set_xticks(range(len(present)))
        axis.set_xticklabels(present, rotation=70, fontsize=7)
        axis.set_title(name if key == "gain" else key, fontsize=8)
        axis.grid(alpha=0.3)
    fig.suptitle(f"mean and 95% t-interval over seeds (last {tail} steps)")
    return _png(fig)


def plot_heldout_curve(summaries: dict) -> bytes | None:
    """PNG: the held-out curve of each {name: seeds summary} (``heldout_curve``): pass@1, the share of completions that
    show their work and the mean completion length against the training step, mean over seeds with its 95 %
    t-interval as a band; None when no summary has a curve."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    present = {name: s["heldout_curve"] for name, s in summaries.items() if s and s.get("heldout_curve")}
    if not present:
        return None
    panels = [
        ("pass_at_1", "held-out pass@1"),
        ("scratchpad_share", "share that shows its work"),
        ("mean_completion_chars", "mean completion length (chars)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.4))
    for axis, (key, name) in zip(axes, panels):
        for j, (label, curve) in enumerate(present.items()):
            xs = [p["step"] for p in curve]
            mean = [p[key]["mean"] for p in curve]
            axis.plot(xs, mean, marker="o", color=f"C{j}", label=label)
            if all(p[key]["ci95"] is not None for p in curve):
                axis.fill_between(
                    xs, [p[key]["ci95"][0] for p in curve], [p[key]["ci95"][1] for p in curve], color=f"C{j}", alpha=0.2
                )
        axis.set(xlabel="training step", title=name)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    n = max(p["pass_at_1"]["n"] for curve in present.values() for p in curve)
    fig.suptitle(f"held-out evaluation during training: mean and 95% t-interval over {n} seeds")
    return _png(fig)


def plot_gain_intervals(summaries: dict) -> bytes:
    """PNG: held-out pass@1 gain, mean and 95 % t-interval, of each {name: seeds summary}, overall and per subset."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6.4, 3.4))
    groups = ["all", "equivalent_in_training", "new"]
    for j, (name, summary) in enumerate(summaries.items()):
        for i, group in enumerate(groups):
            stat = summary["gain_pass_at_1"] if group == "all" else summary.get("gain_by_heldout_subset", {}).get(group)
            if stat is None or stat["ci95"] is None:
                continue
            x = i + 0.15 * (j - (len(summaries) - 1) / 2)
            axis.errorbar(
                [x],
                [stat["mean"]],
                yerr=[[stat["mean"] - stat["ci95"][0]], [stat["ci95"][1] - stat["mean"]]],
                fmt="o",
                capsize=3,
                color=f"C{j}",
                label=name if i == 0 else None,
            )
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels(["all held-out", "reordering trained", "new (no order trained)"], fontsize=8)
    axis.set(ylabel="held-out pass@1 gain", title="mean and 95% t-interval over seeds")
    axis.axhline(0, color="grey", linewidth=0.8)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return _png(fig)


def ablation_table(records: dict) -> str:
    lines = [
        "| 记录 | 起点 | μ | loss_type | ε_high | reward | pass@1 前 → 后 | 留出集“包含答案” 前 → 后 | "
        "末 10 步 clip high | 末 10 步 approx_kl | 末 10 步长度 | 末 10 步熵 | 末 10 步训练奖励 | 末 10 步 strict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, rec in records.items():
        cfg, tail = rec["config"], rec["steps"][-10:] or [{}]
        mean = lambda key, tail=tail: sum(r.get(key, 0.0) for r in tail) / len(tail)  # noqa: E731
        before, after = rec["eval"]["before"], rec["eval"]["after"]
        contains = (
            f"{before['contains_answer_rate']:.3f} → {after['contains_answer_rate']:.3f}"
            if "contains_answer_rate" in before and "contains_answer_rate" in after
            else "—"
        )
        lines.append(
            f"| `{label}` | {rec['warm_start'].get('variant', 'sft')} | {cfg['num_iterations']} | "
            f"{cfg['loss_type']} | {cfg['epsilon_high']} | "
            f"{cfg['reward']} | {before['pass_at_1']:.3f} → {after['pass_at_1']:.3f} | {contains} | "
            f"{mean('clip_ratio_high'):.4f} | {mean('approx_kl'):.5f} | {mean('completion_length'):.2f} | "
            f"{mean('entropy'):.3f} | {mean('reward_mean'):.3f} | {mean('strict_accuracy'):.3f} |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- grading policy
GRADING_SFT_STEPS = 40


_GRADING_POLICIES: dict = {}  # seed -> (model, tokenizer) as built, in this process


def grading_policy(seed: int = 0):
    """(model, tokenizer): the tiny Qwen2 architecture, seeded random init, then GRADING_SFT_STEPS steps of SFT on
    ``a+b=`` -> answer<EOS> so that sampled completions end with EOS often. Built in memory (no file cache), on one
    torch thread, once per process and seed; every call returns its own deep copy (5 ms), so no caller sees what
    another did to its model.

    For the lesson's grading oracle (autograde/grpo_grader/oracles/nb07_online_grpo.py): the grader and the
    learner-side driver build the same weights, ~4 CPU-seconds; the grader's oracle zygote builds them once before it
    forks the lesson's drivers (``ZYGOTE_WARM`` of the oracle).
    """
    import torch

    if seed not in _GRADING_POLICIES:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _GRADING_POLICIES[seed] = _build_grading_policy(seed)
        finally:
            torch.set_num_threads(threads)
    model, tokenizer = _GRADING_POLICIES[seed]
    return copy.deepcopy(model), copy.deepcopy(tokenizer)


def _build_grading_policy(seed: int):
    import torch

    from tools import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    tokenizer.padding_side = "left"
    model = tiny_model._build_model(
        dict(tiny_model.TINY_ARCHITECTURE, vocab_size=len(tokenizer)), tokenizer, seed, torch.float32
    )
    rows = []
    for item in (problem((a, b)) for a in range(10) for b in range(10)):  # single-digit a+b (not the lesson's task)
        prompt_ids = tokenizer(chat_prompt(tokenizer, item["prompt"]), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(f"{item['answer']}{tokenizer.eos_token}", add_special_tokens=False)["input_ids"]
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
            ids[i, : len(row)] = torch.tensor(row)
            labels[i, len(row) - 3 : len(row)] = torch.tensor(row[-3:])
        model(
            input_ids=ids, attention_mask=(labels != -100) | (ids != tokenizer.pad_token_id), labels=labels
        ).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model, tokenizer
