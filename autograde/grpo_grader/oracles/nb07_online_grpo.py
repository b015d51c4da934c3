"""Oracle of lesson 7 (nb07_online_grpo): sample_group, grpo_step, log_step_metrics.

The two model-backed functions cannot receive a model over the wire, so the oracle's harness
(``_nb07_harness.py``) defines ``_oracle_sample``, ``_oracle_sample_seeds`` and ``_oracle_step`` in the
learner-side namespace: they build ``tools.online_grpo.grading_policy()`` (an in-memory tiny Qwen2, seeded, ~4 s to
build, once per process: the slot's kernel zygote builds it before forking, ``ZYGOTE_WARM``) and call the learner's
function on it with the inputs the grader sends. The grader builds the same policy in its own process
(``_nb07_policy.py``) and computes every expectation itself: float64 log-probs of the returned tokens at the given
temperature, the EOS mask of the returned ids, the sampled first-token frequency against the softmax, and for
grpo_step a float64 re-derivation of the whole update (losses, clip ratios, approx KL, KL to the reference,
parameters after AdamW or SGD: ``_policy_losses.reference_step``; the cases and their check: ``_nb07_update.py``).
log_step_metrics is pure data.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch

from ..vocabulary import Case, Raises, Satisfies, as_number, close_number, close_tensor
from ._common import QWEN2_MODEL, choice, randint, uniform
from ._nb07_policy import _encode_prompts, _eos_mask, _logps, _policy
from ._nb07_update import random_rollout, step_cases

TESTS = {
    "test_sample_group_visible": "sample_group",
    "test_grpo_step_visible": "grpo_step",
    "test_log_step_metrics_visible": "log_step_metrics",
}
# where each case family comes from: (regex over a case's ``what``, the line of the released notebook - TODO
# text, docstring, provided check or visible test - that states it); a case no family matches is an orphan
CASE_SOURCES = [
    (r"个提示 × G=", "sample_group 的形状与排列、EOS 掩码、旧对数概率与重算一致"),
    (r"^采样分布|下的采样分布$", "给定 `seed` 时，在调用 `generate` 之前 `torch.manual_seed(seed)`"),
    (r"^同一 seed 可复现、不同 seed 得到不同的样本$", "同一个种子得到同样的样本"),
    (
        r"^num_generations < 2$|^prompts 为空$|^temperature 为 0$|^top_p > 1$|^max_new_tokens 为 0$",
        "输入契约（`ValueError`）：`prompts` 为空或不是字符串列表",
    ),
    (r"^loss_type=\w+，μ=", "返回这次更新的指标"),
    (r"^beta > 0 而没有参考对数概率$", "β > 0 却没有 `ref_per_token_logps` → `ValueError`"),
    (r"^未知的 loss_type$|^num_iterations 为 0$|^epsilon 为负$", "其余输入契约"),
    (r"^completion_mask 含 0/1 之外的值$", "`completion_mask` 接受 bool 或任意实数 dtype 的 0/1 张量"),
    (r"的指标$", "所有值都是 Python 的 `int` / `float`（`kl_ref` 可以是 `None`），可以直接写进 JSON"),
    (r"^奖励含 NaN$|^N 不是 G 的整数倍$|^掩码含 0/1 之外的值$", "`rewards` 是一维有限浮点张量"),
]
# the learner-side harness the case runner runs at the first test cell: the calls of sample_group / grpo_step on a model
HARNESS = Path(__file__).with_name("_nb07_harness.py")
FLAGS: dict = {}
# built once in each slot's kernel zygote before it forks this lesson's kernels (each would otherwise build it: ~4 s)
ZYGOTE_WARM = ("tools.online_grpo:grading_policy",)
# the kernel loads the warm start (a Qwen2 checkpoint) and its cases build the grading policy (a Qwen2 model)
ZYGOTE_IMPORTS = QWEN2_MODEL


def _sample_check(prompts, g, temperature, with_ref, max_new_tokens):
    def check(got):
        if not isinstance(got, dict):
            return f"应返回 dict，实际 {type(got).__name__}"
        for key in (
            "prompt_ids",
            "prompt_mask",
            "completion_ids",
            "completion_mask",
            "old_per_token_logps",
            "ref_per_token_logps",
            "completions",
            "group_ids",
        ):
            if key not in got:
                return f"返回的字典缺少 {key!r}"
        n = len(prompts) * g
        ids, mask, old = got["completion_ids"], got["completion_mask"], got["old_per_token_logps"]
        if not all(torch.is_tensor(t) for t in (ids, mask, old, got["prompt_ids"], got["group_ids"])):
            return "张量字段应为 torch.Tensor"
        if ids.dim() != 2 or ids.shape[0] != n or mask.dtype != torch.bool or tuple(mask.shape) != tuple(ids.shape):
            return f"completion_ids / completion_mask 应为 [N={n}, C]，掩码为 bool"
        # the width bounds all the work below (the EOS mask, the model rerun over the returned tokens): first
        if not 1 <= ids.shape[1] <= max_new_tokens:
            return f"回答宽度应在 1 与 max_new_tokens={max_new_tokens} 之间，实际 {ids.shape[1]}"
        if tuple(old.shape) != tuple(ids.shape):
            return f"old_per_token_logps 的形状应与 completion_ids 相同 {tuple(ids.shape)}，实际 {tuple(old.shape)}"
        model, tok = _policy()
        p_ids, p_mask = _encode_prompts(tok, prompts)
        if (
            tuple(got["prompt_ids"].shape) != (n, p_ids.shape[1])
            or got["prompt_ids"].tolist() != p_ids.repeat_interleave(g, 0).tolist()
        ):
            return "prompt_ids 应为左填充的提示，每个重复 G 次（TRL 排列）"
        if got["group_ids"].tolist() != torch.arange(len(prompts)).repeat_interleave(g).tolist():
            return "group_ids 应为 [0]*G + [1]*G + …"
        if mask.tolist() != _eos_mask(ids, tok.eos_token_id).tolist():
            return "completion_mask 应保留到第一个 EOS（含）"
        unfinished = [row for row in range(n) if not bool((ids[row] == tok.eos_token_id).any())]
        if unfinished and ids.shape[1] != max_new_tokens:
            return (
                f"第 {unfinished[0]} 行没有生成 EOS，应一直生成到 max_new_tokens={max_new_tokens} 个词元，"
                f"实际只有 {ids.shape[1]} 个（采样在预算用完或 EOS 之前停止了）"
            )
        want = _logps(
            model, p_ids.repeat_interleave(g, 0), p_mask.repeat_interleave(g, 0), ids.long(), mask, temperature
        )
        if not close_tensor(old, want, 2e-5):
            return f"old_per_token_logps 与温度 {temperature} 下重算的对数概率不一致（掩码外应为 0）"
        if with_ref:
            ref_model = copy.deepcopy(model)
            with torch.no_grad():
                for p in ref_model.parameters():
                    p.mul_(0.9)
            ref_want = _logps(
                ref_model, p_ids.repeat_interleave(g, 0), p_mask.repeat_interleave(g, 0), ids.long(), mask, temperature
            )
            ref = got["ref_per_token_logps"]
            if not close_tensor(ref, ref_want, 2e-5):
                return "ref_per_token_logps 应为参考模型的对数概率"
        elif got["ref_per_token_logps"] is not None:
            return "没有 ref_model 时 ref_per_token_logps 应为 None"
        texts = [tok.decode(row[keep].tolist(), skip_special_tokens=True) for row, keep in zip(ids, mask)]
        if got["completions"] != texts:
            return "completions 应为掩码内词元的解码（skip_special_tokens=True）"
        return None

    return check


def _first_token_probs(prompt, temperature=1.0):
    model, tok = _policy()
    ids, mask = _encode_prompts(tok, [prompt])
    with torch.no_grad():
        return torch.softmax(model(input_ids=ids, attention_mask=mask).logits[0, -1].double() / temperature, -1)


def _frequency_check(prompt, temperature=1.0):
    def check(got):
        if (
            not isinstance(got, dict)
            or not torch.is_tensor(got.get("completion_ids"))
            or got["completion_ids"].dim() != 2
            or got["completion_ids"].shape[1] < 1
        ):
            return "应返回含 completion_ids [N, C] 的 dict"
        probs = _first_token_probs(prompt, temperature)
        first = got["completion_ids"][:, 0]
        top = int(probs.argmax())
        freq = float((first == top).double().mean())
        if not close_number(freq, float(probs[top]), 0.1):
            return (
                f"温度 {temperature:g} 下首词元的采样频率 {freq:.3f} 与模型概率 {float(probs[top]):.3f} 相差太大"
                f"（do_sample、top_k=0、logits 除以温度？）"
            )
        return None

    return check


def _seeds_check(got):
    """[same seed, same seed, another seed]: the first two equal, the third different."""
    if not isinstance(got, list) or len(got) != 3 or not all(torch.is_tensor(t) for t in got):
        return "sample_group 应返回含 completion_ids 张量的 dict"
    if got[0].tolist() != got[1].tolist():
        return "同一个 seed 应得到同样的样本"
    if got[0].tolist() == got[2].tolist():
        return "不同的 seed 应得到不同的样本（是否用了 do_sample=True？）"
    return None


def _metrics_reference(rewards, g, mask, update, correct, step, seconds):
    values = rewards.double().tolist()
    n = len(values)
    mean = sum(values) / n
    groups = [values[i : i + g] for i in range(0, n, g)]
    out = {
        "step": step,
        "reward_mean": mean,
        "reward_std": math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)),
        "frac_reward_zero_std": sum(1 for grp in groups if max(grp) == min(grp)) / len(groups),
        "completion_length": sum(sum(r) for r in mask.long().tolist()) / n,
        "strict_accuracy": sum(correct) / n,
        "seconds": seconds,
    }
    out.update(
        {
            k: update[k]
            for k in ("loss", "clip_ratio_low", "clip_ratio_high", "approx_kl", "entropy", "grad_norm", "kl_ref")
        }
    )
    return out


def _metrics_check(want):
    def check(got):
        if not isinstance(got, dict):
            return f"应返回 dict，实际 {type(got).__name__}"
        for key, value in want.items():
            if key not in got:
                return f"缺少 {key!r}"
            if value is None:
                if got[key] is not None:
                    return f"{key} 应为 None"
                continue
            number = as_number(got[key], tensor_ok=False)  # the lesson: Python numbers, written into JSON
            if number is None:
                return f"{key} 应是 Python 的 int / float（可以直接写进 JSON），实际 {type(got[key]).__name__}"
            if not close_number(number, value, 1e-6):
                return f"{key} 应为 {value!r}，实际 {got[key]!r}"
        return None

    return check


def cases(gen: torch.Generator, flags: dict) -> list[Case]:
    model, tok = _policy()
    out: list[Case] = []
    test = "test_sample_group_visible"
    for temperature, with_ref in ((1.0, False), (uniform(gen, 0.5, 1.8), False), (1.0, True)):
        prompts = [f"{randint(gen, 0, 9)}+{randint(gen, 0, 9)}=" for _ in range(randint(gen, 1, 4))]
        g, new_tokens = randint(gen, 2, 5), randint(gen, 2, 6)
        out.append(
            Case(
                test,
                "_oracle_sample",
                (prompts, g, temperature, 1.0, new_tokens, randint(gen, 0, 10**6), with_ref),
                {},
                Satisfies(_sample_check(prompts, g, temperature, with_ref, new_tokens)),
                what=f"{len(prompts)} 个提示 × G={g}，温度 {temperature:.2f}，参考模型 {with_ref}",
            )
        )
    prompt = f"{randint(gen, 0, 9)}+{randint(gen, 0, 9)}="
    out.append(
        Case(
            test,
            "_oracle_sample",
            ([prompt] * 50, 8, 1.0, 1.0, 1, randint(gen, 0, 10**6), False),
            {},
            Satisfies(_frequency_check(prompt)),
            what="采样分布：首词元频率接近模型概率",
        )
    )
    # temperature changes what is sampled: a temperature whose top-token probability is far (> 0.25, ten standard
    # errors of 400 samples) from temperature 1's, for the first drawn prompt that has one
    for _ in range(8):
        p_one = float(_first_token_probs(prompt).max())
        hot = max(
            (0.1, 0.2, 0.3, 0.5, 2.0, 3.0, 5.0), key=lambda t: abs(float(_first_token_probs(prompt, t).max()) - p_one)
        )
        if abs(float(_first_token_probs(prompt, hot).max()) - p_one) > 0.25:
            break
        prompt = f"{randint(gen, 0, 9)}+{randint(gen, 0, 9)}="
    else:
        raise ValueError("oracle nb07: no prompt whose sampling distribution depends on the temperature")
    out.append(
        Case(
            test,
            "_oracle_sample",
            ([prompt] * 50, 8, hot, 1.0, 1, randint(gen, 0, 10**6), False),
            {},
            Satisfies(_frequency_check(prompt, hot)),
            what=f"温度 {hot:g} 下的采样分布",
        )
    )
    prompts = [f"{randint(gen, 0, 9)}+{randint(gen, 0, 9)}=" for _ in range(2)]
    seed = randint(gen, 0, 10**6)
    out.append(
        Case(
            test,
            "_oracle_sample_seeds",
            (prompts, 4, 1.0, 4, [seed, seed, seed + 1 + randint(gen, 0, 999)]),
            {},
            Satisfies(_seeds_check),
            what="同一 seed 可复现、不同 seed 得到不同的样本",
        )
    )
    for bad, what in (
        ((["1+1="], 1, 1.0, 1.0, 3, 0, False), "num_generations < 2"),
        (([], 4, 1.0, 1.0, 3, 0, False), "prompts 为空"),
        ((["1+1="], 4, 0.0, 1.0, 3, 0, False), "temperature 为 0"),
        ((["1+1="], 4, 1.0, 1.5, 3, 0, False), "top_p > 1"),
        ((["1+1="], 4, 1.0, 1.0, 0, 0, False), "max_new_tokens 为 0"),
    ):
        out.append(Case(test, "_oracle_sample", bad, {}, Raises("ValueError"), what=what))

    test = "test_grpo_step_visible"
    out += step_cases(gen, model, tok, test)
    rollout, advantages = random_rollout(gen, model, tok, 2, 2, 1.0, 0.2, 0.2)
    base = {
        "num_iterations": 1,
        "epsilon": 0.2,
        "epsilon_high": None,
        "beta": 0.0,
        "loss_type": "grpo",
        "max_grad_norm": 1.0,
        "temperature": 1.0,
    }
    for change, what in (
        ({"beta": 0.1}, "beta > 0 而没有参考对数概率"),
        ({"loss_type": "ppo"}, "未知的 loss_type"),
        ({"num_iterations": 0}, "num_iterations 为 0"),
        ({"epsilon": -0.1}, "epsilon 为负"),
    ):
        ro = dict(rollout, ref_per_token_logps=None) if "beta" in change else rollout
        out.append(
            Case(
                test, "_oracle_step", (ro, advantages, dict(base, **change), 1e-3), {}, Raises("ValueError"), what=what
            )
        )
    out.append(
        Case(
            test,
            "_oracle_step",
            (dict(rollout, completion_mask=rollout["completion_mask"].double() * 2), advantages, base, 1e-3),
            {},
            Raises("ValueError"),
            what="completion_mask 含 0/1 之外的值",
        )
    )

    test = "test_log_step_metrics_visible"
    for _ in range(4):
        g = randint(gen, 2, 6)
        n = g * randint(gen, 2, 4)
        dtype = choice(gen, [torch.float32, torch.float64])
        rewards = torch.randint(0, 3, (n,), generator=gen).to(dtype) * choice(gen, [0.55, 1.1])
        rewards[:g] = choice(gen, [1.1, 0.1])  # an equal-reward group in float32 (C4)
        rewards[-1] = rewards[0] + choice(gen, [0.5, 1.0])  # never all equal: the sample std differs from others
        mask = torch.rand((n, randint(gen, 2, 7)), generator=gen) < 0.6
        correct = torch.randint(0, 2, (n,), generator=gen).tolist()
        update = {
            "loss": uniform(gen, -1, 1),
            "clip_ratio_low": uniform(gen, 0, 0.3),
            "clip_ratio_high": uniform(gen, 0, 0.3),
            "approx_kl": uniform(gen, 0, 0.05),
            "kl_ref": choice(gen, [None, uniform(gen, 0, 0.1)]),
            "entropy": uniform(gen, 0, 2),
            "grad_norm": uniform(gen, 0, 5),
        }
        step, seconds = randint(gen, 0, 99), uniform(gen, 0, 3)
        mask_arg = mask if choice(gen, [False, True]) else mask.to(choice(gen, [torch.float32, torch.int64]))
        want = _metrics_reference(rewards, g, mask, update, correct, step, seconds)
        out.append(
            Case(
                test,
                "log_step_metrics",
                (step, rewards, g, mask_arg, update, correct),
                {"seconds": seconds},
                Satisfies(_metrics_check(want)),
                what=f"N={n}、G={g}、{dtype} 的指标",
            )
        )
    upd = {
        "loss": 0.0,
        "clip_ratio_low": 0.0,
        "clip_ratio_high": 0.0,
        "approx_kl": 0.0,
        "kl_ref": None,
        "entropy": 0.0,
        "grad_norm": 0.0,
    }
    for args, what in (
        ((0, torch.tensor([1.0, float("nan")]), 2, torch.ones(2, 3), upd, [0, 0]), "奖励含 NaN"),
        ((0, torch.tensor([1.0, 0.0, 1.0]), 2, torch.ones(3, 3), upd, [0, 0, 0]), "N 不是 G 的整数倍"),
        ((0, torch.tensor([1.0, 0.0]), 2, torch.ones(2, 3) * 3, upd, [0, 0]), "掩码含 0/1 之外的值"),
    ):
        out.append(Case(test, "log_step_metrics", args, {}, Raises("ValueError"), what=what))
    return out
