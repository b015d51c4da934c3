"""Lesson 2's ``compute_grpo_loss`` keeps the reference chapter's contract.

The reference chapter (``/work/shared/seeds/000_*.txt``, Step 4) ships four test functions for this function:
group advantage, constraints and gradient, candidate equal weighting, input contract. Each test below asserts
the same behaviours on the same fixture values and the same invalid calls (each distinct call once; the chapter
lists some three times), written in the course's own code, against the generated module
``tools/lessons/nb02_grpo_objective.py`` (``make release`` writes it from ``solutions/nb02_grpo_objective.py``).
A drift from the chapter fails here. The last tests show that the checks can fail: a function that accepts
0/1 masks (docs/CONVENTIONS.md C1 for the other lessons) or ignores a misshapen reference at beta == 0 is
caught.
"""

from __future__ import annotations

import pytest
import torch

from tools.lessons.nb02_grpo_objective import compute_grpo_loss


def chapter_fixture():
    """The chapter's ``_grpo_fixture``: five candidates in three groups, T = 2, two single-token answers."""
    new = torch.tensor([[-1.0, -0.5], [-0.5, -0.7], [-1.5, -0.4], [-0.2, -0.9], [-0.8, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.1, -0.4], [-0.4, -0.8], [-1.6, -0.5], [-0.3, -0.8], [-0.8, -1.1]], requires_grad=True)
    ref = torch.tensor([[-1.2, -0.7], [-0.8, -0.9], [-1.7, -0.8], [-0.6, -1.1], [-0.9, -1.2]], requires_grad=True)
    rewards = torch.tensor([1.0, 2.0, 0.5, 1.5, 3.0])
    group_ids = torch.tensor([0, 0, 1, 1, 2])
    mask = torch.tensor([[True, True], [True, False], [True, True], [True, True], [True, False]])
    return new, old, ref, rewards, group_ids, mask


def invalid_calls(fn):
    """The chapter's invalid calls of ``test_grpo_input_contract``, each distinct call once: {what: call}."""
    new, old, ref, rewards, group_ids, mask = chapter_fixture()
    nan_rewards = torch.tensor([float("nan"), 2.0, 0.5, 1.5, 3.0])
    return {
        "old log-probs of another shape": lambda: fn(new, old[:-1], rewards, group_ids, mask),
        "eps = 0": lambda: fn(new, old, rewards, group_ids, mask, eps=0.0),
        "reference of another shape (beta = 0)": lambda: fn(new, old, rewards, group_ids, mask, log_probs_ref=ref[:-1]),
        "beta < 0": lambda: fn(new, old, rewards, group_ids, mask, beta=-0.1),
        "float 0/1 mask": lambda: fn(new, old, rewards, group_ids, mask.float()),
        "NaN reward": lambda: fn(new, old, nan_rewards, group_ids, mask),
        "clip_range = inf": lambda: fn(new, old, rewards, group_ids, mask, clip_range=float("inf")),
    }


def test_group_advantage():
    """Chapter ``test_grpo_group_advantage``: advantages centred in every group, the singleton's exactly 0."""
    new, old, _, rewards, group_ids, mask = chapter_fixture()
    _, advantages = compute_grpo_loss(new, old, rewards, group_ids, mask)
    for gid in group_ids.unique(sorted=True):
        assert abs(advantages[group_ids == gid].mean().item()) <= 1e-6, f"group {gid.item()} not centred"
    assert advantages[-1].item() == 0.0


def test_constraints_and_gradient():
    """Chapter ``test_grpo_constraints_and_gradient``: a finite scalar; the KL term (beta 0.1) never lowers the
    loss; the current policy gets a finite gradient, the old and the reference policies none."""
    new, old, ref, rewards, group_ids, mask = chapter_fixture()
    loss_without_kl, _ = compute_grpo_loss(new, old, rewards, group_ids, mask)
    loss, _ = compute_grpo_loss(new, old, rewards, group_ids, mask, log_probs_ref=ref, beta=0.1)
    assert loss.ndim == 0 and torch.isfinite(loss).item()
    assert loss.item() >= loss_without_kl.item()
    assert (torch.exp(new.detach() - old.detach()) > 0).all().item()
    loss.backward()
    assert new.grad is not None and torch.isfinite(new.grad).all().item()
    assert old.grad is None and ref.grad is None


def test_candidate_equal_weighting():
    """Chapter ``test_grpo_candidate_equal_weighting``: at ratio 1 with rewards [0, 2] and lengths [2, 1], the
    per-candidate mean gives exactly 0 (a token mean would give 1/3)."""
    zeros = torch.zeros(2, 2)
    loss, _ = compute_grpo_loss(
        zeros, zeros, torch.tensor([0.0, 2.0]), torch.tensor([0, 0]), torch.tensor([[True, True], [True, False]])
    )
    assert abs(loss.item()) <= 1e-8  # the chapter's torch.allclose(loss, 0.0): atol 1e-8


@pytest.mark.parametrize("what", list(invalid_calls(compute_grpo_loss)))
def test_input_contract(what):
    """Chapter ``test_grpo_input_contract``: every invalid call raises ValueError."""
    with pytest.raises(ValueError):
        invalid_calls(compute_grpo_loss)[what]()


def test_mask_message_names_the_contract():
    """The refusal of a 0/1 float mask names the chapter's contract in Chinese."""
    new, old, _, rewards, group_ids, mask = chapter_fixture()
    with pytest.raises(ValueError, match="response_mask 必须是同形布尔张量"):
        compute_grpo_loss(new, old, rewards, group_ids, mask.float())


# ----------------------------------------------------------------------------- the checks can fail
def _accepts_zero_one_masks(log_probs_new, log_probs_old, rewards, group_ids, response_mask=None, **kwargs):
    """The course function made C1-lenient: a 0/1 mask is turned into a bool mask first."""
    if response_mask is not None and response_mask.dtype != torch.bool:
        response_mask = response_mask != 0
    return compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids, response_mask, **kwargs)


def _ignores_reference_at_beta_zero(*args, log_probs_ref=None, beta=0.0, **kwargs):
    """The course function that drops a given reference when beta == 0 (no shape check)."""
    return compute_grpo_loss(*args, log_probs_ref=log_probs_ref if beta > 0 else None, beta=beta, **kwargs)


@pytest.mark.parametrize(
    ("lenient", "caught"),
    [
        (_accepts_zero_one_masks, "float 0/1 mask"),
        (_ignores_reference_at_beta_zero, "reference of another shape (beta = 0)"),
    ],
)
def test_contract_check_catches_a_lenient_function(lenient, caught):
    calls = invalid_calls(lenient)
    returned = []
    for what, call in calls.items():
        try:
            call()
        except ValueError:
            continue
        returned.append(what)
    assert returned == [caught]
