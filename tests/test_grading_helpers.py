"""tools.grading: comparisons that a learner's monkeypatches cannot fool, tampering report and restore."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tools.grading import assert_close, expect_value_error, max_abs_diff

ROOT = Path(__file__).resolve().parents[1]


def test_assert_close_values_shapes_and_nan():
    assert_close(torch.tensor([1.0, float("nan")]), [1.0, float("nan")])
    assert_close(torch.tensor([[1.0, 2.0]], dtype=torch.float64), torch.tensor([[1.0, 2.0 + 1e-9]]))
    with pytest.raises(AssertionError, match="第 1 个元素期望 3"):
        assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]))
    with pytest.raises(AssertionError, match="形状不一致"):
        assert_close(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([float("nan")]), torch.tensor([0.0]))
    assert max_abs_diff(torch.ones(3), torch.zeros(3)) == 1.0


def test_expect_value_error_contract():
    def bad():
        raise ValueError("rewards 必须是一维张量")

    assert "一维" in expect_value_error(bad, "rewards 维度")
    with pytest.raises(AssertionError, match="正常返回"):
        expect_value_error(lambda: None, "x")
    with pytest.raises(AssertionError, match="TypeError"):
        expect_value_error(lambda: (_ for _ in ()).throw(TypeError("t")), "x")
    with pytest.raises(NotImplementedError):
        expect_value_error(lambda: (_ for _ in ()).throw(NotImplementedError()), "x")


def test_patched_helpers_do_not_fool_the_comparison_and_are_restored():
    """In a fresh interpreter (the patches are global): import first, as the bootstrap cell does, then patch."""
    script = textwrap.dedent("""
        import builtins, torch, torch.testing
        import tools.grading as g
        torch.allclose = lambda *a, **k: True
        torch.testing.assert_close = lambda *a, **k: None
        builtins.abs = lambda x: 0
        torch.Tensor.any = lambda self, *a, **k: torch.tensor(False)
        torch.Tensor.tolist = lambda self: [0.0]
        try:
            g.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]))
        except AssertionError:
            pass
        else:
            raise SystemExit("a wrong value passed")
        names = sorted(g.tampered())
        assert names == sorted(["abs", "torch.allclose", "torch.testing.assert_close",
                                "torch.Tensor.any", "torch.Tensor.tolist"]), names
        assert sorted(g.restore()) == names and g.tampered() == []
        assert torch.allclose(torch.ones(1), torch.ones(1)) and not torch.allclose(torch.ones(1), torch.zeros(1))
        assert abs(-2) == 2 and torch.tensor([1.0]).tolist() == [1.0]
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
