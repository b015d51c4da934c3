"""Deliberately broken copies of lesson 7's update: the one list (``MUTATIONS``) the TRL comparison and the grading
oracle must each catch, and ``mutate``, which builds such a copy.

A mutation is one source edit (``old`` -> ``new``, ``old`` found exactly once) of one function on the path from
``grpo_step`` through the names it calls: ``"grpo_step"`` itself, ``"grpo_step>extended_loss"`` (lesson 3B's loss,
which grpo_step calls), ``"grpo_step>extended_loss>reduce_per_token_loss"``. ``mutate`` recompiles the edited
function in a copy of its module's namespace and rebinds the copies up the path, so nothing the course imports is
changed: the broken ``grpo_step`` is a new function object, the course's stays as it was. The edits are written
against the course's reference (``tools/lessons/``); a learner's own ``grpo_step`` has other text and is not a target.

Where each list is read: ``tests/test_trl_mutations.py`` (the TRL comparison of ``tools.online.trl_agreement`` /
``trl_scenarios`` catches each one, the unmutated code passes), ``tests/test_nb07_oracle_mutations.py`` (the nb07
grading oracle catches each one at every grading seed), and lesson 7's step 9 prints them (``mutation_table``).
Not here: a mutation no comparison of values can see (advantages left attached to a graph: TRL's advantages never
require a gradient, so the update is the same).
"""

from __future__ import annotations

import inspect
import textwrap
import types
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """One broken copy: ``name`` (an identifier), ``what`` (Chinese, for the lesson's list), ``origin`` ("audit": found
    by the independent audit of the comparison; "added": the course's own), the edit (``path``, ``old``, ``new``)."""

    name: str
    what: str
    origin: str
    path: str
    old: str
    new: str


_STEP, _LOSS, _REDUCE = "grpo_step", "grpo_step>extended_loss", "grpo_step>extended_loss>reduce_per_token_loss"
_GRPO_MEAN = "return (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()"
_BNPO_MEAN = '    if loss_type == "bnpo":\n        return masked.sum() / mask.sum().clamp(min=1.0)'
_CLAMP = "torch.clamp(coef_1, 1.0 - epsilon_low, 1.0 + epsilon_high)"
_CLIP = "norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)"

MUTATIONS = (
    Mutation("kl_sign", "KL 项的符号反了（减去 β·KL）", "audit", _LOSS,
             "per_token_loss + beta * kl", "per_token_loss - beta * kl"),
    Mutation("bias_correction_dropped", "use_bias_correction_kl=True 时 KL 项没有乘概率比", "audit", _LOSS,
             "kl = kl * coef_1  #", "kl = kl  #"),
    Mutation("bias_correction_detached", "KL 项乘的概率比被 detach（值对，梯度少一项）", "audit", _LOSS,
             "kl = kl * coef_1  #", "kl = kl * coef_1.detach()  #"),
    Mutation("beta_halved", "β 只用了一半", "audit", _STEP,
             "beta=float(beta), ref_logps=ref", "beta=float(beta) / 2, ref_logps=ref"),
    Mutation("grpo_reduced_as_bnpo", "grpo 按整批词元平均（应先对每条回答平均）", "audit", _REDUCE,
             _GRPO_MEAN, "return masked.sum() / mask.sum().clamp(min=1.0)"),
    Mutation("bnpo_reduced_as_grpo", "bnpo 先对每条回答平均（应按整批词元平均）", "audit", _REDUCE,
             _BNPO_MEAN, '    if loss_type == "bnpo":\n        ' + _GRPO_MEAN),
    Mutation("clip_range_swapped", "裁剪区间的上下界对调：[1−ε_high, 1+ε]", "audit", _LOSS,
             _CLAMP, "torch.clamp(coef_1, 1.0 - epsilon_high, 1.0 + epsilon_low)"),
    Mutation("lower_clip_removed", "去掉了下界裁剪", "audit", _LOSS, _CLAMP, "torch.clamp(coef_1, max=1.0 + epsilon_high)"),
    Mutation("dr_grpo_normaliser", "dr_grpo 除以 N × 回答宽度 C（应为 N × max_completion_length）", "audit", _REDUCE,
             "(per_token_loss.shape[0] * int(max_completion_length))",
             "(per_token_loss.shape[0] * per_token_loss.shape[1])"),
    Mutation("temperature_ignored", "更新时重算对数概率没有除以温度", "audit", _STEP,
             "temperature=float(temperature), with_entropy=True", "temperature=1.0, with_entropy=True"),
    Mutation("old_refreshed_each_epoch", "μ > 1 时每个轮次后用当前策略刷新旧对数概率", "audit", _STEP,
             "            norms.append(float(norm))\n", "            norms.append(float(norm))\n        old = logps.detach()\n"),
    Mutation("grad_clip_wrong_norm", "梯度裁剪用了 2 × max_grad_norm", "audit", _STEP,
             _CLIP, "norm = torch.nn.utils.clip_grad_norm_(params, 2 * max_grad_norm)"),
    Mutation("clip_ratio_low_sign", "clip_ratio_low 统计的是 A > 0 的词元（符号反了）", "audit", _STEP,
             "((ratio < 1 - epsilon) & (adv < 0))", "((ratio < 1 - epsilon) & (adv > 0))"),
    Mutation("epsilon_high_ignored", "上界用了 ε（忽略 epsilon_high）", "added", _STEP,
             "epsilon_high=epsilon_high, beta=", "epsilon_high=epsilon, beta="),
    Mutation("old_logps_ignored", "损失里的概率比对当前策略自己求（忽略旧对数概率）", "added", _STEP,
             "loss = extended_loss(logps, old,", "loss = extended_loss(logps, logps.detach(),"),
    Mutation("mask_ignored_in_mean", "grpo 每条回答的平均除以宽度 C（掩码没进分母）", "added", _REDUCE,
             _GRPO_MEAN, "return (masked.sum(dim=1) / per_token_loss.shape[1]).mean()"),
    Mutation("dapo_normaliser", "dapo 除以回答条数（应除以整批有效词元数）", "added", _STEP,
             "num_items_in_batch=tokens)", "num_items_in_batch=n)"),
    Mutation("no_zero_grad", "轮次之间没有清零梯度（梯度累加）", "added", _STEP,
             "        optimizer.zero_grad(set_to_none=True)\n", ""),
    Mutation("clip_after_step", "梯度裁剪放在 optimizer.step() 之后（不起作用）", "added", _STEP,
             _CLIP + "\n        optimizer.step()", "optimizer.step()\n        " + _CLIP),
    Mutation("grad_norm_after_clipping", "grad_norm 记的是裁剪后的范数", "added", _STEP,
             "norms.append(float(norm))", "norms.append(min(float(norm), max_grad_norm))"),
    Mutation("entropy_over_padding", "熵在所有位置（含填充）上平均", "added", _STEP,
             "entropy = masked_mean(entropies.to(old.dtype))", "entropy = float(entropies.mean())"),
    Mutation("kl_metric_over_padding", "kl_ref 在所有位置（含填充）上平均", "added", _STEP,
             "ref_kls.append(masked_mean(per_token_kl))", "ref_kls.append(float(per_token_kl.mean()))"),
)  # fmt: skip
MUTATION_NAMES = tuple(m.name for m in MUTATIONS)
if len(set(MUTATION_NAMES)) != len(MUTATIONS):
    raise ValueError("mutation names must be unique")


def mutation(name: str) -> Mutation:
    """The registered mutation ``name`` (KeyError naming the known ones otherwise)."""
    for m in MUTATIONS:
        if m.name == name:
            return m
    raise KeyError(f"no mutation {name!r}; known: {', '.join(MUTATION_NAMES)}")


def _copy_function(function, namespace: dict):
    copied = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    copied.__kwdefaults__ = function.__kwdefaults__
    copied.__doc__, copied.__qualname__ = function.__doc__, function.__qualname__
    return copied


def _edited(function, old: str, new: str):
    """``function`` recompiled from its (dedented) source with ``old`` replaced by ``new``, in a copy of its module's
    namespace. ``old`` must occur exactly once, indentation included."""
    source = textwrap.dedent(inspect.getsource(function))
    if source.count(old) != 1:
        raise ValueError(
            f"mutation anchor found {source.count(old)} times (expected once) in {function.__name__}: {old!r}"
        )
    namespace = dict(function.__globals__)
    exec(compile(source.replace(old, new), f"<mutated {function.__name__}>", "exec"), namespace)  # noqa: S102
    return namespace[function.__name__]


def mutate(grpo_step, which):
    """A broken copy of ``grpo_step`` (``which``: a ``Mutation`` or its name). The function the mutation edits is
    found along its path through each function's module namespace (``__globals__``); the copies above it see the
    edited one, nothing else is touched. Raises ValueError where the anchor is not found exactly once (the source
    changed: the registry must follow it)."""
    m = mutation(which) if isinstance(which, str) else which
    names = m.path.split(">")
    if names[0] != grpo_step.__name__:
        raise ValueError(f"mutation {m.name} edits {m.path}, not {grpo_step.__name__}")
    chain = [grpo_step]
    for name in names[1:]:
        found = chain[-1].__globals__.get(name)
        if not isinstance(found, types.FunctionType):
            raise ValueError(f"mutation {m.name}: {chain[-1].__name__} does not call a function {name!r}")
        chain.append(found)
    replacement = _edited(chain[-1], m.old, m.new)
    for parent, name in zip(reversed(chain[:-1]), reversed(names[1:])):
        namespace = dict(parent.__globals__)
        namespace[name] = replacement
        replacement = _copy_function(parent, namespace)
    return replacement


def mutation_table(results: dict | None = None) -> str:
    """The mutations as the lesson's Markdown table; ``results`` (``trl_comparison.catch_mutations``) adds what each
    part of the comparison found: the epoch-0 matrix and the whole-update scenarios ("—": that part missed it)."""
    head = "| 改坏的地方 | 来源 | 改的函数 |" + (" 第 0 轮的矩阵 | 整次更新的场景 |" if results is not None else "")
    rule = "| --- | --- | --- |" + (" --- | --- |" if results is not None else "")
    rows = []
    for m in MUTATIONS:
        row = f"| {m.what} | {'独立审计' if m.origin == 'audit' else '课程补充'} | `{m.path.split('>')[-1]}` |"
        if results is not None:
            for part in ("matrix", "scenarios"):
                found = results[m.name][part]
                row += f" {found['by'] if found else '—'} |"
        rows.append(row)
    return "\n".join([head, rule, *rows])
