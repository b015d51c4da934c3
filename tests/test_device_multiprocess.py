"""The multi-process run's pieces on the device under test (``tests/device_option.py``; ``cuda`` when
``benchmarks/gpu_check.sh`` runs it): the weights' hash each rank compares (``trl_ranks.weights_hash``) does not
depend on where the weights live, and the per-token log-probs the loss measurement starts from
(``tools.online.logprobs.completion_logps`` on ``trl_ranks.loss_batch``'s batch) agree with the CPU's."""

from __future__ import annotations

import copy

import pytest
import torch
from device_option import devices_under_test

from tools.online import trl_ranks
from tools.online.logprobs import completion_logps
from tools.online.warm_start import load_policy
from tools.tiny_model import tiny_checkpoint_path

DEVICES = devices_under_test(("cpu",))
# float32 on a card sums matmuls in another order: a log-prob here is O(10) (a logit minus a logsumexp over the
# vocabulary), so the rounding differences are O(10 x 2^-24 x depth) ~ 1e-5 at most; 1e-4 leaves room for that and
# still fails when one embedding row moves by 0.05 (checked in the test).
LOGP_ATOL = 1e-4


@pytest.fixture(scope="module")
def policy():
    return load_policy(tiny_checkpoint_path(seed=0))


@pytest.mark.parametrize("device", DEVICES)
def test_weights_hash_does_not_depend_on_the_device(policy, device):
    model = policy[0]
    moved = copy.deepcopy(model).to(device)
    assert trl_ranks.weights_hash(moved) == trl_ranks.weights_hash(model)
    with torch.no_grad():
        next(moved.parameters()).view(-1)[0] += 1.0  # one weight changed on the device: another hash
    assert trl_ranks.weights_hash(moved) != trl_ranks.weights_hash(model)


@pytest.mark.parametrize("device", DEVICES)
def test_loss_batch_log_probs_agree_with_the_cpu(policy, device):
    model, tokenizer = policy
    batch = trl_ranks.loss_batch(model, tokenizer, seed=0)
    keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
    with torch.no_grad():
        cpu = completion_logps(model, *(batch[k] for k in keys))
        on_device = completion_logps(copy.deepcopy(model).to(device), *(batch[k].to(device) for k in keys))
    assert on_device.device.type == torch.device(device).type
    mask = batch["completion_mask"].bool()
    assert torch.allclose(on_device.cpu()[mask], cpu[mask], atol=LOGP_ATOL, rtol=0)
    moved = copy.deepcopy(model).to(device)  # the comparison can fail: one token's embedding row moved by 0.05
    with torch.no_grad():
        moved.get_input_embeddings().weight[batch["completion_ids"][0, 0]] += 0.05
        changed = completion_logps(moved, *(batch[k].to(device) for k in keys))
    assert not torch.allclose(changed.cpu()[mask], cpu[mask], atol=LOGP_ATOL, rtol=0)
