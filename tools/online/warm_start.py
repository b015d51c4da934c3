"""The SFT warm start of lesson 7's runs, and where it was built.

A short, deterministic supervised fine-tune of the course's tiny Qwen2 checkpoint (``tools.tiny_model``) on the SFT
pool of the task (never a held-out problem nor a reordering of one), cached under ``.cache/`` like the tiny
checkpoint, so the starting policy is right only sometimes: ``sft_checkpoint_path`` builds or finds it, per variant
(``WARM_STARTS``). Its bits depend on the float platform that built it (``float_platform``), which is written beside
the cache and into the records. Also ``load_policy`` (a checkpoint folder as model and tokenizer) and
``content_hash`` (the hash the records name a warm start by).
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import tempfile
import time
from pathlib import Path

from tools.online.record import resolve_root
from tools.online.task import (
    ADDENDS,
    HELDOUT_SIZE,
    RL_MULTISETS,
    SPLIT_SEED,
    TASK_ID,
    addends_of,
    chat_prompt,
    scratchpad,
    task_pools,
    two_operand_facts,
)

SFT_BUILDER_VERSION = 3
SFT_MARKER = "online_sft.json"
# SFT warm start: every order of the SFT pool's problems, a fraction SFT_SCRATCH_FRACTION of them answered with the
# scratchpad and the rest with the bare answer (plus SFT_FACT_COPIES of every two-operand step); so the warm start
# sometimes shows its work and sometimes answers at once (which it does more often wrongly on new problems: the
# lesson measures both). SFT_STEPS optimizer steps of SFT_BATCH examples.
# SFT_SCRATCH_FRACTION was chosen by measurement (seed 0, held-out pass@1 of the warm start, 16 samples per prompt):
# 0.5 -> 0.588 (above START_RANGE), 0.25 -> 0.522, 0.15 -> 0.467. Fewer scratchpads in the SFT data also make the
# scratchpads less accurate (right 0.72 / 0.29 / 0.21 of the time) while the bare answers get better (0.43 / 0.59 /
# 0.50), so at 0.15 RL sharpens the bare answers rather than moving to scratchpads: the lesson reports which from the
# records (report.seeds_table), it does not assume it.
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

    root = Path(root) if root is not None else resolve_root()
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
    hashes are checked against these caches (tests/test_nb07_records.py)."""
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


def content_hash(folder) -> str:
    """The content hash of a checkpoint folder (``tools.notebook_runtime.resolve_model_commit``): the records'
    ``warm_start.content_sha256``."""
    from tools.notebook_runtime import resolve_model_commit

    return resolve_model_commit(str(folder))[0]
