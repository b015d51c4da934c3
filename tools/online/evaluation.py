"""Held-out evaluation of a policy on lesson 7's task.

Sampled pass@1, pass@k (the unbiased estimator) and maj@k (disjoint blocks of k samples vote; an unparseable sample
votes for "no answer", so maj@1 equals pass@1), the greedy accuracy, what each sample is (``OUTCOMES``) and which
kind of answer it writes (``COMPLETION_KINDS``: shows its work or answers at once), each also per prompt (what the
multi-seed summary bootstraps over); ``evaluation_seed``: the sampling seed of a run's evaluation after a given
step, derived from the run's seed; ``entropy_by_kind`` separates the entropy of the two kinds of answer.
"""

from __future__ import annotations

import math
from collections import Counter

from tools.online.logprobs import completion_logps
from tools.online.task import addends_of, encode_prompts, loophole_rewards, scratchpad

OUTCOMES = ("right", "wrong", "unparseable")  # what a held-out sample is (evaluate()'s "outcomes")


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
# evaluate()'s per-prompt columns besides pass@k / maj@k: right share, unparseable share, share that shows its work,
# mean length in characters (one value per prompt, in the order of ``per_prompt["prompts"]``)
PER_PROMPT_KEYS = ("pass_at_1", "unparseable", "scratchpad_share", "mean_chars")


def completion_kind(text: str) -> str:
    """ "scratchpad" when the completion shows a step of work (it writes a "+"), else "direct"."""
    return "scratchpad" if "+" in text else "direct"


EVALUATION_SEED_BASE = 1234


def evaluation_seed(run_seed: int, step: int) -> int:
    """The sampling seed of run ``run_seed``'s evaluation after ``step`` training steps: every run seed draws its own
    evaluation samples, before (step 0), along the curve and after training, so the spread over seeds holds the
    evaluation's sampling noise too. Apart from the training loop's sampling seeds (``seed * 1000003 + step``,
    steps below EVALUATION_SEED_BASE)."""
    if isinstance(run_seed, bool) or not isinstance(run_seed, int):
        raise ValueError(f"run_seed 必须是整数，收到 {run_seed!r}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step 必须是非负整数，收到 {step!r}")
    return EVALUATION_SEED_BASE + 1000003 * run_seed + step


def evaluate(
    model,
    tokenizer,
    problems,
    verify,
    samples_per_prompt: int = 16,
    temperature: float = 1.0,
    max_new_tokens: int = 25,
    seed: int = EVALUATION_SEED_BASE,
    ks=(1, 2, 4, 8, 16),
) -> dict:
    """Held-out accuracy: sampled pass@1, pass@k and maj@k for ``ks``, and the greedy accuracy; ``per_prompt``:
    each prompt's own figures as columns (``prompts``, then PER_PROMPT_KEYS and ``pass_at_k`` / ``maj_at_k`` {k:
    column}), one value per prompt in the order of ``problems``.

    Sampling is seeded (``torch.manual_seed(seed)`` right before ``generate``; a run passes ``evaluation_seed``),
    so the same weights give the same numbers. Correctness is integer-answer-v1's ``correctness`` (``verify``:
    nb04's verifier, the strict one, whatever reward a run trained on).
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
    per_prompt = {"prompts": [p["prompt"] for p in problems], **{key: [] for key in PER_PROMPT_KEYS}}
    per_prompt.update(pass_at_k={str(k): [] for k in ks}, maj_at_k={str(k): [] for k in ks})
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
        parsed = [r["parsed_answer"] for r in records]
        unparseable_total += sum(a is None for a in parsed) / n
        per_prompt["pass_at_1"].append(round(c / n, 6))
        per_prompt["unparseable"].append(round(sum(a is None for a in parsed) / n, 6))
        per_prompt["scratchpad_share"].append(round(sum(completion_kind(t) == "scratchpad" for t in group) / n, 6))
        per_prompt["mean_chars"].append(round(sum(len(t) for t in group) / n, 6))
        for k in ks:
            pass_k, maj_k = pass_at_k(n, c, k), majority_correct(parsed, problem["answer"], k)
            per_prompt["pass_at_k"][str(k)].append(round(pass_k, 6))
            per_prompt["maj_at_k"][str(k)].append(round(maj_k, 6))
            pass_sums[k] += pass_k
            maj_sums[k] += maj_k
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
        "max_new_tokens": int(max_new_tokens),
        "seed": int(seed),
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
        "per_prompt": per_prompt,
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
