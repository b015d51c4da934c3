"""The learner-side harness of lesson 7's oracle (``HARNESS`` of ``nb07_online_grpo.py``).

A model cannot travel as plain data, so lesson 7's cases call these functions instead of the learner's: each builds
``tools.online_grpo.grading_policy()`` (an in-memory tiny Qwen2, seeded; built once per process, or inherited from
the kernel zygote that built it) and calls the learner's ``sample_group`` / ``grpo_step`` on it with the inputs the
grader sent. This file is not imported: the case runner (``case_runner.make_runner``, in the kernel and in
``oracles.run_in_kernel``) executes its source at the lesson's first test cell in a namespace of its own, whose
``_NOTEBOOK`` is the notebook's namespace, where the learner's functions are found when a case calls them. Only the
standard library, torch and ``tools`` (the kernel's course copy) are used: it runs inside the sandbox.
"""

import copy

import torch

_ORACLE_STATE = {}
_NOTEBOOK: dict = {}  # the notebook's namespace: the case runner sets it after this text has run


def _learner(name):
    """The learner's function ``name``, as the notebook's namespace holds it when the case runs."""
    return _NOTEBOOK[name]


def _oracle_policy():
    if "policy" not in _ORACLE_STATE:
        from tools import online_grpo as _og

        torch.set_num_threads(1)
        _ORACLE_STATE["policy"], _ORACLE_STATE["tokenizer"] = _og.grading_policy()
    return _ORACLE_STATE["policy"], _ORACLE_STATE["tokenizer"]


def _oracle_sample(prompts, num_generations, temperature, top_p, max_new_tokens, seed, with_ref):
    model, tok = _oracle_policy()
    ref = None
    if with_ref:
        ref = copy.deepcopy(model)
        with torch.no_grad():
            for p in ref.parameters():
                p.mul_(0.9)
    return _learner("sample_group")(
        model,
        tok,
        prompts,
        num_generations,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        ref_model=ref,
    )


def _oracle_sample_seeds(prompts, num_generations, temperature, max_new_tokens, seeds):
    model, tok = _oracle_policy()
    sample_group = _learner("sample_group")
    return [
        sample_group(
            model, tok, prompts, num_generations, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed
        )["completion_ids"]
        for seed in seeds
    ]


def _oracle_step(rollout, advantages, settings, lr, optimizer="adamw"):
    from tools.online.grading_policy import grading_optimizer as _grading_optimizer

    model, _ = _oracle_policy()
    model = copy.deepcopy(model).double()
    metrics = _learner("grpo_step")(
        model, _grading_optimizer(optimizer, model.parameters(), lr), rollout, advantages, **settings
    )
    return {"metrics": metrics, "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()])}
