"""The task of lesson 7 and its rewards.

The sum of ADDENDS single digits, ``"6+7+9+4="``, in the course's ChatML format, answered by one integer: the three
disjoint pools of problems (held-out, RL, SFT; ``task_pools``), the held-out rule (no held-out problem, nor any
reordering of it, is trained on: ``check_heldout_rule``), what the held-out problems share with the training data
(``training_neighbours``) and the groups the lesson reads the gain over (``heldout_groups``: carries, zero-heavy
sums), the transfer sets of TRANSFER_ADDENDS addends (``transfer_problems``), the running-sum scratchpad, the
prompts' encoding, and the rewards a run trains on (``REWARDS``: integer-answer-v1, scored by nb04's
``verify_integer_response`` passed in by the caller as ``verify``, and the gameable loophole verifier).
"""

from __future__ import annotations

import functools
import itertools
import random

from tools.experiment_settings import VERIFIER_ID

TASK_ID = "four-digit-sum-scratchpad-v1"
REWARDS = (VERIFIER_ID, "contains-answer-loophole")

# The task: the sum of ADDENDS single digits, "6+7+9+4=". The tiny model does not add four digits reliably in one
# step, but it can add two numbers at a time: the scratchpad (scratchpad()) writes the running sum,
# "6+7=13, 13+9=22, 22+4=26".
ADDENDS = 4
RL_MULTISETS = 160
HELDOUT_SIZE = 40
SPLIT_SEED = 0
# The transfer sets: sums of 3 and of 5 single digits, a number of addends no training problem has (the pools hold
# ADDENDS addends, the SFT's two-operand facts 2), HELDOUT_SIZE multisets each in one fixed order.
TRANSFER_ADDENDS = (3, 5)


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


def carries(prompt: str) -> int:
    """How many steps of the running-sum scratchpad cross a multiple of ten (``"6+7+9+4="``: 6+7=13 and 13+9=22
    do, 22+4=26 does not: 2). With single-digit addends this is the answer's tens digit."""
    total, count = 0, 0
    for a in addends_of(prompt):
        count += (total + a) // 10 != total // 10
        total += a
    return count


def zero_heavy(prompt: str) -> bool:
    """At least half of the addends are 0 (``"6+0+0+0="``, ``"4+0+0+4="``)."""
    values = addends_of(prompt)
    return 2 * values.count(0) >= len(values)


HELDOUT_GROUP_RULES = {
    "new": "no reordering of it is a training prompt (the held-out rule: every held-out prompt)",
    "equivalent_in_training": "a reordering of it is a training prompt (empty under the held-out rule)",
    "carries_0": "its running sum crosses no multiple of ten (answer 0-9)",
    "carries_1": "its running sum crosses one multiple of ten (answer 10-19)",
    "carries_2": "its running sum crosses two multiples of ten (answer 20-29)",
    "carries_3": "its running sum crosses three multiples of ten (answer 30-36)",
    "zero_heavy": "at least half of its addends are 0",
}


def heldout_groups(train, heldout) -> dict:
    """{group: [prompt, ...]} for each HELDOUT_GROUP_RULES group with at least one held-out prompt: whether a
    reordering is trained on (``heldout_subsets``), the number of carries (``carries``), zero-heavy sums
    (``zero_heavy``). A run records the membership; the multi-seed summary reads the gain over each group."""
    groups = heldout_subsets(train, heldout)
    for p in heldout:
        groups.setdefault(f"carries_{carries(p['prompt'])}", []).append(p["prompt"])
    groups["zero_heavy"] = [p["prompt"] for p in heldout if zero_heavy(p["prompt"])]
    unknown = set(groups) - set(HELDOUT_GROUP_RULES)
    if unknown:
        raise ValueError(f"没有规则的留出题分组：{sorted(unknown)}")
    return {name: groups[name] for name in HELDOUT_GROUP_RULES if groups.get(name)}


def training_neighbours(heldout, *training_sets) -> dict:
    """What each held-out problem shares with the training data (every order of every training problem counts
    once, as a multiset): ``one_addend_away`` - training multisets that differ from it in exactly one addend;
    ``answer_trained`` / ``carries_trained`` - whether some training problem with as many addends has the same
    answer / the same number of carries. The held-out rule keeps the multisets apart, not their neighbours."""
    trained = {equivalent_key(p["prompt"]) for data in training_sets for p in data}
    trained = {key for key in trained if len(key) == ADDENDS}
    answers = {sum(key) for key in trained}
    carry_counts = {carries("+".join(map(str, key)) + "=") for key in trained}
    out = {}
    for p in heldout:
        key = equivalent_key(p["prompt"])
        # every multiset one addend away: drop one addend (each distinct value once), put in another digit
        near = {tuple(sorted(key[:i] + key[i + 1 :] + (d,))) for i in range(len(key)) for d in range(10) if d != key[i]}
        out[p["prompt"]] = {
            "one_addend_away": len(near & trained),
            "answer_trained": p["answer"] in answers,
            "carries_trained": carries(p["prompt"]) in carry_counts,
        }
    return out


def transfer_problems(addends: int, size: int = HELDOUT_SIZE, seed: int = SPLIT_SEED) -> list[dict]:
    """A transfer set: ``size`` multisets of ``addends`` single digits (a fixed shuffle), each in one fixed order -
    evaluation only, like the held-out set. ``addends`` is one of TRANSFER_ADDENDS: no training problem (the pools'
    ADDENDS addends, the SFT's two-operand facts) has that many addends, so none is trained on in any order
    (``check_heldout_rule`` against every pool and the facts)."""
    if addends not in TRANSFER_ADDENDS:
        raise ValueError(f"迁移集的加数个数必须是 {TRANSFER_ADDENDS} 之一，收到 {addends!r}")
    multisets = list(itertools.combinations_with_replacement(range(10), addends))  # sorted, as task_pools' are
    rng = random.Random(seed * 1000 + addends)
    rng.shuffle(multisets)
    chosen = [problem(rng.choice(sorted(set(itertools.permutations(m))))) for m in multisets[:size]]
    pools = task_pools(seed)
    check_heldout_rule(chosen, pools["rl"], pools["sft"], pools["heldout"], two_operand_facts())
    return chosen


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
    """The chat-rendered prompts (``chat_prompt``), tokenized and left-padded to the longest.

    ``prompts``: a non-empty list or tuple of strings (anything else, a bare string included, raises ValueError).
    Returns ``{"input_ids", "attention_mask"}``, two ``torch.long`` tensors of shape ``[B, P]`` on the CPU (B
    prompts, P the longest prompt's token count; move them to the model's device): each row's tokens sit at its
    right end, the pad token (``tokenizer.pad_token_id``, else the EOS token) fills its left, and the mask is 1 on
    the tokens and 0 on the padding."""
    import torch

    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"prompts 必须是非空的字符串列表或元组，收到 {type(prompts).__name__}")
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
    if name == VERIFIER_ID:
        return functools.partial(strict_rewards, verify=verify, format_weight=format_weight)
    if name == "contains-answer-loophole":
        return loophole_rewards
    raise ValueError(f"reward 必须是 {REWARDS} 之一，收到 {name!r}")
