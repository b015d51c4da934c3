"""Lesson 7's grading oracle catches every broken ``grpo_step`` of ``tools.online.trl_mutations`` at every grading
seed, and honest answers keep their points at every one.

The cases are drawn as grading draws them (``oracle.cases(seed, flags)`` with the course's flags), the learner-side
harness is the oracle's own (``_nb07_harness.py``, run in a namespace of its own whose ``_NOTEBOOK`` holds the
answer, as the case runner runs it), and each answer is judged by the case's own check; the plain-data round trip
of the case runner is left out (it changes nothing a check
reads for these answers, and it is most of the cost). The broken copies are built from the course's reference
(``tools.lessons.nb07_online_grpo.grpo_step``); the honest ones are the sample class's: s02's independently written
grpo_step and f05's, which returns its metrics as 0-d tensors.
"""

from __future__ import annotations

import copy
import inspect

import pytest

from autograde.grpo_grader import oracle as oracle_lib
from autograde.grpo_grader.vocabulary import Mismatch, Raises

A = "nb07_online_grpo"
TEST = "test_grpo_step_visible"
SEEDS = 12


def _message(case, namespace) -> str | None:
    """None where the answer (``namespace["_NOTEBOOK"]["grpo_step"]``) passes ``case``, else why not."""
    try:
        value = namespace[case.call](*copy.deepcopy(list(case.args)), **copy.deepcopy(dict(case.kwargs)))
    except Exception as error:  # noqa: BLE001 (an answer that raises fails the case)
        return f"raised {error!r}"
    try:
        case.expect.check(value)
    except Mismatch as error:
        return str(error)
    return None


def _honest_answers(reference) -> dict:
    """{label: grpo_step} of the sample class's honest nb07 answers (s02's cell, f05's edit of the reference)."""
    import tools.lessons.nb07_online_grpo as nb07
    from autograde.sample_class.build import load_cases

    def defined(source):
        namespace = dict(vars(nb07))
        exec(source, namespace)  # noqa: S102 (the sample class's own answer text)
        return namespace["grpo_step"]

    cases = load_cases()
    f05 = inspect.getsource(reference)
    for old, new in cases["f05_nb07_tensor_metrics_greedy_sampler"][A]["edit"]["grpo_step"]:
        assert f05.count(old) == 1, old
        f05 = f05.replace(old, new)
    return {
        "reference": reference,
        "s02": defined(cases["s02_independent_answers"][A]["cells"]["grpo_step"]),
        "f05": defined(f05),
    }


@pytest.mark.slow  # the grading policy (~4 s) and 12 seeds of grpo_step cases
def test_every_mutation_fails_a_grpo_step_case_at_every_grading_seed():
    """For 12 grading seeds: the reference and s02's answer pass every value case of test_grpo_step_visible (f05's at
    the first seed);
    each mutation of tools.online.trl_mutations.MUTATIONS fails at least one. The draw puts, at every seed, each
    setting that shows a mutation on some case: a temperature far from 1, mu > 1 and mu = 1, beta > 0 with and
    without the bias correction and beta = 0, SGD with a max_grad_norm below the first epoch's gradient norm,
    epsilon_high above epsilon and epsilon_high None, dr_grpo with a max_completion_length above the width and
    with None (checked here from the drawn cases)."""
    import torch

    from autograde.grpo_grader.course import load_settings
    from autograde.grpo_grader.oracles import _nb07_update
    from tools.lessons.nb07_online_grpo import grpo_step
    from tools.online.trl_mutations import MUTATIONS, mutate

    torch.set_num_threads(1)
    oracle = oracle_lib.load_oracle(A)
    flags = load_settings().oracle_flags.get(A, {})
    namespace: dict = {}
    exec(oracle.prelude, namespace)  # noqa: S102 (the oracle's learner-side harness, as the case runner runs it)
    notebook: dict = {}
    namespace["_NOTEBOOK"] = notebook  # where the harness finds the learner's functions (case_runner.run_test)
    honest = _honest_answers(grpo_step)
    broken = {m.name: mutate(grpo_step, m) for m in MUTATIONS}
    misses: dict = {}
    for index in range(SEEDS):
        cases = [c for c in oracle.cases(f"mutation-seed-{index}", flags) if c.test == TEST]
        cases = [c for c in cases if not isinstance(c.expect, Raises)]
        settings = [c.args[2] for c in cases]
        assert len(cases) == len(_nb07_update.STEP_CASE_LOSS_TYPES)
        assert any(abs(s["temperature"] - 1.0) >= 0.2 for s in settings)
        assert {1, 2} <= {min(s["num_iterations"], 2) for s in settings}
        assert {(s["beta"] > 0, s["use_bias_correction_kl"]) for s in settings} >= {(True, True), (True, False)}
        assert any(s["beta"] == 0 for s in settings)
        assert any(s["epsilon_high"] is None for s in settings)
        assert any(s["epsilon_high"] is not None and s["epsilon_high"] > s["epsilon"] for s in settings)
        widths = {c.args[2]["max_completion_length"] for c in cases if c.args[2]["loss_type"] == "dr_grpo"}
        assert None in widths and any(w is not None for w in widths)
        sgd = [c for c in cases if c.args[4] == "sgd"]
        assert len(sgd) == 1
        for label, answer in honest.items():
            if label == "f05" and index:  # only the types of its metrics differ from the reference: one seed
                continue
            notebook["grpo_step"] = answer
            for case in cases:
                assert _message(case, namespace) is None, (label, index, case.what, _message(case, namespace))
        # the SGD case's clipping binds (its check has computed the reference: the first epoch's gradient norm)
        first_norm = _nb07_update._step_reference(*sgd[0].args)[5]["grad_norms"][0]
        assert first_norm > sgd[0].args[2]["max_grad_norm"] * 1.5
        for name, answer in broken.items():
            notebook["grpo_step"] = answer
            if not any(_message(case, namespace) for case in cases):
                misses.setdefault(name, []).append(index)
    assert not misses, f"mutations that pass every grpo_step case at some seeds: {misses}"
