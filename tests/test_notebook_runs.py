"""The shared execution cache of tests/conftest.py: one execution per notebook per test run, also across
xdist workers, and a direct re-execution of an already executed notebook fails the test that does it."""

from __future__ import annotations

import nbformat
import pytest
from conftest import DuplicateExecution, ExecutionRegistry, NotebookRuns

import tools.chain.notebooks as chain


def _notebook(source: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def _fake_execute(calls):
    def execute(nb, cwd, timeout=120, env=None):
        calls.append((nb.cells[0].source, str(cwd), env))
        out = nbformat.from_dict(nb)
        out.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {len(calls)}\n")]
        return out

    return execute


def test_two_workers_share_one_execution_per_key(tmp_path):
    calls = []
    registry = ExecutionRegistry(tmp_path / "registry")
    first = NotebookRuns(cache=tmp_path / "cache", registry=registry, execute=_fake_execute(calls))
    second = NotebookRuns(cache=tmp_path / "cache", registry=registry, execute=_fake_execute(calls))  # worker 2
    nb = _notebook("x = 1")
    a = first.run(nb, cwd=tmp_path)
    b = second.run(nb, cwd=tmp_path)
    c = first.run(nb, cwd=tmp_path)
    assert len(calls) == 1
    assert a == b == c and a.cells[0].outputs[0]["text"] == "ran 1\n"
    key = first.key(nb, tmp_path, None)
    assert first.count(key) == 1 and second.count(key) == 0
    a.cells[0].source = "changed"  # a test may modify what it gets
    assert first.run(nb, cwd=tmp_path).cells[0].source == "x = 1"
    first.run(nb, cwd=tmp_path, env={"A": "1"})  # another environment is another execution
    second.run(_notebook("x = 2"), cwd=tmp_path)
    assert len(calls) == 3


def test_registry_rejects_a_second_execution_and_names_the_first(tmp_path):
    registry = ExecutionRegistry(tmp_path)
    registry.claim("k", "tests/test_a.py::test_one")
    with pytest.raises(DuplicateExecution, match="test_a.py::test_one"):
        registry.claim("k", "tests/test_b.py::test_two")


@pytest.mark.slow
def test_a_direct_second_execution_fails(tmp_path, notebook_runs):
    nb = _notebook(f"print({str(tmp_path)!r})")  # unique to this test
    first = notebook_runs.run(nb, cwd=tmp_path)
    assert chain.cell_errors(first) == []
    with pytest.raises(DuplicateExecution, match="notebook_runs"):
        chain.execute(nb, tmp_path)  # what a module that bypasses the fixture would do
    assert notebook_runs.run(nb, cwd=tmp_path) == first  # the shared result is still served


_PROBE = r"""
import json, os, random, sys
warm = "torch" in sys.modules  # imported before any cell ran: the kernel was forked from the warm server
import matplotlib
import numpy as np
print(json.dumps({"warm": warm, "cwd": os.getcwd(), "path": sys.path, "probe": os.environ.get("KERNEL_ENV_PROBE"),
                  "backend": matplotlib.get_backend(), "random": random.random(), "numpy": float(np.random.rand()),
                  "parent_poller": bool(get_ipython().kernel.parent.poller),
                  "main": type(sys.modules["__main__"]).__name__, "argv0": os.path.basename(sys.argv[0])}))
"""


@pytest.mark.slow
def test_warm_kernels_behave_like_fresh_ones(tmp_path, notebook_runs):
    """The test run's notebook executions use forked warm kernels (tests/kernel_forkserver.py): the same working
    folder, sys.path, environment, matplotlib backend and parent poller as a fresh ``ipykernel_launcher``,
    random generators seeded per kernel; and an environment that modules read at import gets a fresh kernel."""
    import json

    def probe(env, **options):
        done = chain.execute(_notebook(_PROBE), tmp_path, env=env, **options)
        assert chain.cell_errors(done) == []
        return json.loads(done.cells[0].outputs[0]["text"])

    first, second = probe({"KERNEL_ENV_PROBE": "a"}), probe({"KERNEL_ENV_PROBE": "b"})
    fresh = probe({"KERNEL_ENV_PROBE": "c"}, kernel_name="python3")
    other_import_env = probe({"KERNEL_ENV_PROBE": "d", "MPLCONFIGDIR": str(tmp_path / "mpl")})
    import peft  # noqa: F401 - its import sets TORCHINDUCTOR_CACHE_DIR here, maybe after the server started

    late = probe({"KERNEL_ENV_PROBE": "e"})  # a worker that imported peft in a test still gets warm kernels
    assert first["warm"] and second["warm"], "no warm kernel: see the server log in the grpo-kfs-* folder"
    assert late["warm"], "a default set by an import made kernels cold: see the server log in grpo-kfs-*"
    assert not fresh["warm"] and not other_import_env["warm"]
    for warm in (first, second):
        for key in ("cwd", "path", "backend", "parent_poller", "main", "argv0"):
            assert warm[key] == fresh[key], (key, warm[key], fresh[key])
    assert (first["probe"], second["probe"]) == ("a", "b")
    assert first["random"] != second["random"] and first["numpy"] != second["numpy"]
