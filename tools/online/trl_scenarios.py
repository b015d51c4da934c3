"""The lesson's ``grpo_step`` against ``GRPOTrainer.train()`` itself on one fixed rollout batch: every epoch of an
update, the parameters after it, and TRL's own logged metrics.

``trl_agreement`` compares one call of ``_compute_loss`` (epoch 0, temperature 1, clipping of the gradient off).
Here each of ``SCENARIOS`` is a whole update as TRL's trainer runs it: ``num_iterations`` = mu optimizer steps on
one generation batch whose old log-probs stay fixed across the steps (TRL's buffered inputs), logits divided by a
temperature != 1, ratios outside the clip range on both sides (old log-probs perturbed), a ``max_grad_norm`` the
gradient's norm exceeds at every step (checked from TRL's log, not assumed), and TRL's Trainer doing the gradient
clipping and the optimizer step. The optimizer is plain SGD on both sides: AdamW's first step is
``lr * g / |g|`` per coordinate, blind to the scale of the gradient, so a clipping bug would not show in the weights.

TRL's rollout is replaced by the given batch (``_generate_and_score_completions`` returns it: sampling is compared
elsewhere, lesson 7's sample_group is graded on its own); everything after it is TRL 1.16's code: buffering and
shuffling, ``training_step``, ``_compute_loss``, the Trainer's clipping, SGD step and ``log_history``.
``trl_scenario_references`` computes TRL's side once; ``scenario_rows`` compares a ``grpo_step`` with it (cheap: the
mutation test runs it for each broken copy of ``tools.online.trl_mutations``).
"""

from __future__ import annotations

import copy

from tools.online.config import OnlineConfig
from tools.online.trl_agreement import relative_difference, reward_never_called, trl_inputs
from tools.online.trl_trainer import grpo_config, make_trainer

# Each scenario: a loss type, a temperature != 1 (or 1 for one of them), mu, beta and TRL's KL option. Together they
# cover every loss type of grpo_step and both values of the option with beta > 0.
SCENARIOS = (
    {"loss_type": "grpo", "temperature": 0.7, "num_iterations": 2, "beta": 0.04, "use_bias_correction_kl": True},
    {"loss_type": "dr_grpo", "temperature": 1.3, "num_iterations": 3, "beta": 0.04, "use_bias_correction_kl": False},
    {"loss_type": "bnpo", "temperature": 1.0, "num_iterations": 2, "beta": 0.0, "use_bias_correction_kl": True},
    {"loss_type": "dapo", "temperature": 0.85, "num_iterations": 2, "beta": 0.04, "use_bias_correction_kl": True},
)
# shared by every scenario: clip range (epsilon != epsilon_high), a max_grad_norm below every step's gradient norm,
# SGD's learning rate, and a max_completion_length above the batch's width (dr_grpo's normaliser uses it)
SCENARIO_SETTINGS = {
    "epsilon": 0.2,
    "epsilon_high": 0.28,
    "max_grad_norm": 0.05,
    "learning_rate": 2.0,
    "max_completion_length": 8,
}
SCENARIO_OLD_NOISE = 0.3  # std of the perturbation of the old log-probs (ratios outside the clip range)
# what is compared, with its tolerance: (TRL's log key, the course's value, kind, tolerance); "rel" compares
# |a - b| / max(|a|, |b|), "abs" |a - b| (the clip fractions: counts of tokens over the token count)
SCENARIO_TOLERANCES = {"rel": 1e-4, "abs": 1e-6}


def scenario_name(scenario: dict) -> str:
    kl = (
        "β=0" if not scenario["beta"] else f"β={scenario['beta']}, bias_correction={scenario['use_bias_correction_kl']}"
    )
    return f"{scenario['loss_type']}, T={scenario['temperature']}, μ={scenario['num_iterations']}, {kl}"


def scenario_batch(batch, policy, ref_model, temperature, seed=3, old_noise=SCENARIO_OLD_NOISE) -> dict:
    """``batch`` (an ``agreement_batch``: its tokens, cut masks and advantages) with old and reference log-probs
    recomputed at ``temperature`` (what TRL's rollout would store), the old ones perturbed by ``old_noise`` * N(0, 1)
    on valid positions so that ratios leave the clip range on both sides."""
    import torch

    from tools.online.logprobs import completion_logps

    mask = batch["completion_mask"]
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        on_policy, ref = (
            completion_logps(
                m, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], mask, temperature=temperature
            ).masked_fill(~mask, 0.0)
            for m in (policy, ref_model)
        )
    noise = old_noise * torch.randn(on_policy.shape, generator=gen, dtype=on_policy.dtype)
    return dict(
        batch,
        old_per_token_logps=(on_policy + noise).masked_fill(~mask, 0.0),
        ref_per_token_logps=ref,
        on_policy_old=on_policy,
    )


def _flat_delta(model, start):
    import torch

    return torch.cat([(p.detach() - q.detach()).reshape(-1).double() for p, q in zip(model.parameters(), start)])


def _update_settings(scenario, settings) -> dict:
    """grpo_step's keyword arguments for ``scenario`` with the shared ``settings`` (TRL's names, as OnlineConfig's
    but ``max_completion_length``)."""
    keys = ("loss_type", "temperature", "num_iterations", "beta", "use_bias_correction_kl")
    shared = ("epsilon", "epsilon_high", "max_grad_norm", "max_completion_length")
    return {**{k: scenario[k] for k in keys}, **{k: settings[k] for k in shared}}


def trl_scenario(policy, tokenizer, problems, batch, scenario, settings=None) -> dict:
    """``GRPOTrainer.train()`` for mu = ``num_iterations`` steps on ``batch`` (a ``scenario_batch``) from a copy of
    ``policy``, SGD. Returns TRL's per-step log (``steps``) and the change of the weights (``delta``). Raises
    ValueError where the scenario does not exercise what it is for: clipping on both sides at the first step, and a
    gradient norm above ``max_grad_norm`` at every step."""
    import torch

    s = dict(SCENARIO_SETTINGS, **(settings or {}))
    update = _update_settings(scenario, s)
    mu = update["num_iterations"]
    config = OnlineConfig(
        num_generations=4,
        prompts_per_step=batch["completion_ids"].shape[0] // 4,
        max_new_tokens=update.pop("max_completion_length"),
        learning_rate=s["learning_rate"],
        **update,
    )
    model = copy.deepcopy(policy)
    start = [p.detach().clone() for p in model.parameters()]
    args = grpo_config(config, max_steps=mu, optim="sgd", weight_decay=0.0)
    trainer = make_trainer(model, tokenizer, problems[: config.prompts_per_step], args, reward_never_called)
    rollout = trl_inputs(batch)
    # TRL's sampling and scoring is the one part left out: its rollout is this batch (copied: TRL shuffles it)
    trainer._generate_and_score_completions = lambda generation_batch: {k: v.clone() for k, v in rollout.items()}
    torch.manual_seed(0)  # TRL's shuffle of the rows (the losses do not depend on the order)
    trainer.train()
    steps = [e for e in trainer.state.log_history if "loss" in e and "grad_norm" in e]
    if len(steps) != mu:
        raise RuntimeError(f"GRPOTrainer logged {len(steps)} steps, expected {mu}")
    if not (steps[0]["clip_ratio/low_mean"] > 0 and steps[0]["clip_ratio/high_mean"] > 0):
        raise ValueError(f"{scenario_name(scenario)}: 第一步没有在两侧都裁剪（clipping must fire on both sides）")
    if not all(e["grad_norm"] > s["max_grad_norm"] for e in steps):
        raise ValueError(f"{scenario_name(scenario)}: 梯度范数没有超过 max_grad_norm（gradient clipping must bind）")
    return {"steps": steps, "delta": _flat_delta(trainer.model, start)}


def course_scenario(grpo_step, policy, batch, scenario, settings=None) -> dict:
    """The lesson's ``grpo_step`` with the scenario's settings on a copy of ``policy``, SGD at the same rate:
    (its metrics, the change of the weights)."""
    import torch

    s = dict(SCENARIO_SETTINGS, **(settings or {}))
    model = copy.deepcopy(policy)
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=s["learning_rate"])
    out = grpo_step(model, optimizer, batch, batch["advantages"], **_update_settings(scenario, s))
    return {"metrics": out, "delta": _flat_delta(model, start)}


def compared_quantities(course: dict, trl: dict, scenario: dict) -> dict:
    """{quantity: (course value, TRL value, kind)} for one scenario. TRL logs no old -> current KL (the course's
    ``approx_kl``), and its ``kl`` is k3 times the ratio when ``use_bias_correction_kl`` (the course's ``kl_ref`` is
    k3 alone): those two are compared only where TRL has the same quantity."""
    m, steps = course["metrics"], trl["steps"]

    def mean(key):
        return sum(e[key] for e in steps) / len(steps)

    out = {
        f"loss[{k}]": (m["losses"][k] if k < len(m["losses"]) else None, e["loss"], "rel") for k, e in enumerate(steps)
    }
    out.update(
        {
            "grad_norm": (m["grad_norm"], mean("grad_norm"), "rel"),
            "weights after μ steps": (course["delta"], trl["delta"], "rel"),
            "clip_ratio/low_mean": (m["clip_ratio_low"], mean("clip_ratio/low_mean"), "abs"),
            "clip_ratio/high_mean": (m["clip_ratio_high"], mean("clip_ratio/high_mean"), "abs"),
            "clip_ratio/region_mean": (
                m["clip_ratio_low"] + m["clip_ratio_high"],  # disjoint: low needs A < 0, high needs A > 0
                mean("clip_ratio/region_mean"),
                "abs",
            ),
            "entropy": (m["entropy"], steps[0]["entropy"], "rel"),  # the course logs the first epoch's
        }
    )
    if scenario["beta"] > 0 and not scenario["use_bias_correction_kl"]:
        out["kl"] = (m["kl_ref"], mean("kl"), "rel")
    return out


def _difference(course_value, trl_value, kind) -> float:
    if course_value is None:
        return float("inf")
    if kind == "abs":
        return abs(float(course_value) - float(trl_value))
    return relative_difference(course_value, trl_value)


def trl_scenario_references(policy, ref_model, tokenizer, problems, batch, scenarios=SCENARIOS, seed=3) -> list[dict]:
    """TRL's side of every scenario, computed once: [{"scenario", "batch", "trl"}] (``batch``: an
    ``agreement_batch``; each scenario gets its ``scenario_batch`` at its temperature)."""
    refs = []
    for scenario in scenarios:
        sbatch = scenario_batch(batch, policy, ref_model, scenario["temperature"], seed=seed)
        refs.append(
            {"scenario": scenario, "batch": sbatch, "trl": trl_scenario(policy, tokenizer, problems, sbatch, scenario)}
        )
    return refs


def scenario_rows(grpo_step, policy, references, stop_at_first=False) -> list[dict]:
    """``grpo_step`` against each reference of ``trl_scenario_references``: one row per scenario with every compared
    quantity (``quantities``: name -> {course, trl, difference, tolerance, agree}) and ``agree`` (all within
    tolerance). ``stop_at_first``: stop after the first row that disagrees (the mutation test)."""
    rows = []
    for ref in references:
        scenario = ref["scenario"]
        try:
            course = course_scenario(grpo_step, policy, ref["batch"], scenario)
        except Exception as error:  # noqa: BLE001 (a broken copy may raise: that is a disagreement)
            rows.append(
                {"scenario": scenario_name(scenario), "agree": False, "error": repr(error)[:200], "quantities": {}}
            )
            if stop_at_first:
                break
            continue
        quantities = {}
        for name, (mine, theirs, kind) in compared_quantities(course, ref["trl"], scenario).items():
            diff = _difference(mine, theirs, kind)
            tol = SCENARIO_TOLERANCES[kind]
            quantities[name] = {
                "course": None if name.startswith("weights") else mine,
                "trl": None if name.startswith("weights") else theirs,
                "kind": kind,
                "difference": diff,
                "tolerance": tol,
                "agree": diff <= tol,
            }
        rows.append(
            {
                "scenario": scenario_name(scenario),
                "agree": all(q["agree"] for q in quantities.values()),
                "quantities": quantities,
            }
        )
        if stop_at_first and not rows[-1]["agree"]:
            break
    return rows


def scenario_table(rows) -> str:
    """The rows as the lesson's Markdown table: per scenario, the largest difference of each kind and what
    disagrees."""
    lines = [
        "| 场景 | 比较的量 | 最大相对差（容差） | 裁剪比例最大绝对差（容差） | 不一致的量 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        q = r["quantities"]
        rel = max((v["difference"] for v in q.values() if v["kind"] == "rel"), default=float("nan"))
        ab = max((v["difference"] for v in q.values() if v["kind"] == "abs"), default=float("nan"))
        bad = ", ".join(k for k, v in q.items() if not v["agree"]) or r.get("error", "—")
        lines.append(
            f"| {r['scenario']} | {len(q)} | {rel:.1e}（{SCENARIO_TOLERANCES['rel']:.0e}） | "
            f"{ab:.1e}（{SCENARIO_TOLERANCES['abs']:.0e}） | {bad} |"
        )
    return "\n".join(lines)
