"""tools.training_mechanism_runtime: hardware snapshot, gradient norm, percentiles, peak RSS."""

import json
import os
import random

import numpy as np
import pytest
import torch

from tools.training_mechanism_runtime import cuda_hardware_snapshot, gradient_l2_norm, median_and_p95, peak_rss_bytes


@pytest.mark.parametrize(
    "values,expected",
    [
        ([5.0], (5.0, 5.0)),
        ([1, 2, 3, 4], (2.5, 3.85)),  # ranks 1.5 and 2.85
        ([3, 1, 2], (2.0, 2.9)),  # unsorted input; p95 at rank 1.9
        ([10, 20], (15.0, 19.5)),
        (list(range(1, 101)), (50.5, 95.05)),  # rank 94.05 between 95 and 96
        ([47.0, 48.0, 46.0, 200.0, 47.5], (47.5, 169.6)),  # rank 3.8: 48 + 0.8 * 152
    ],
)
def test_median_and_p95_hand_computed(values, expected):
    median, p95 = median_and_p95(values)
    assert median == pytest.approx(expected[0], abs=1e-12)
    assert p95 == pytest.approx(expected[1], abs=1e-12)
    assert isinstance(median, float) and isinstance(p95, float)


def test_median_and_p95_matches_numpy_linear():
    rng = random.Random(3)
    for size in (2, 7, 20, 101):
        values = [rng.uniform(-5, 50) for _ in range(size)]
        expected = np.percentile(values, [50, 95])  # numpy's default method is "linear"
        assert median_and_p95(iter(values)) == pytest.approx(tuple(expected), abs=1e-12)


def test_median_and_p95_rejects_empty_and_nan():
    with pytest.raises(ValueError):
        median_and_p95([])
    with pytest.raises(ValueError):
        median_and_p95([1.0, float("nan")])


def test_gradient_l2_norm():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    frozen = torch.nn.Parameter(torch.ones(5))  # requires grad but never used: grad stays None
    model(torch.randn(6, 4)).pow(2).sum().backward()
    params = list(model.parameters()) + [frozen]
    expected = torch.sqrt(sum(p.grad.double().pow(2).sum() for p in model.parameters())).item()
    assert gradient_l2_norm(params) == pytest.approx(expected, rel=1e-6)
    assert gradient_l2_norm(iter(params)) == pytest.approx(expected, rel=1e-6)
    assert gradient_l2_norm(p for p in params) == pytest.approx(
        float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"), norm_type=2.0)), rel=1e-6
    )
    assert gradient_l2_norm([frozen]) == 0.0
    assert gradient_l2_norm([]) == 0.0


def test_hardware_snapshot_never_raises_and_is_json():
    snapshot = cuda_hardware_snapshot()
    json.dumps(snapshot)
    assert snapshot["torch"] == torch.__version__
    if torch.cuda.is_available():
        assert snapshot["cuda_available"] is True
        assert snapshot["gpu_name"] and snapshot["total_memory_bytes"] > 0
        assert snapshot["compute_capability"].count(".") == 1
        assert snapshot["cuda_runtime"] == torch.version.cuda
    else:
        assert snapshot["cuda_available"] is False
        assert isinstance(snapshot["cpu"], str) and snapshot["cpu"]
        assert isinstance(snapshot["cpu_count"], int) and snapshot["cpu_count"] >= 1
        assert "gpu_name" not in snapshot


def _anonymous_rss_bytes():
    """This process's resident anonymous memory (its heap, not the pages of the libraries it mapped)."""
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("RssAnon:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_peak_rss_bytes_covers_a_fresh_allocation():
    # Anonymous memory, not the whole RSS: the kernel may drop clean library pages (file-backed RSS) at any time, as
    # this machine's memory reclaim once did between the two readings; without swap, the heap stays resident.
    before = _anonymous_rss_bytes()
    block = bytearray(96 * 1024 * 1024)  # zero-filled: its pages are resident
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    peak = peak_rss_bytes()
    assert isinstance(peak, int)
    assert peak >= before + len(block) * 0.9
    del block
    assert peak_rss_bytes() >= peak  # a peak never goes down
