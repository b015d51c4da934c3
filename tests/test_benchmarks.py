"""The benchmarks run (at tiny sizes, so they cannot rot) and the loader finds the course's own code.

Nothing here asserts a timing or a memory figure: speed claims live in benchmarks/results/, measured
against baselines in the same run. These tests check structure, finiteness and that the benchmarked code
computes the same numbers as its baseline, and that benchmarks/README.md's table of figures is the one its
committed result files give.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tools.chain.notebooks as chain
from benchmarks import report
from benchmarks.course_code import CourseCodeUnavailable, load_answers

ROOT = Path(__file__).resolve().parents[1]

# metric -> files whose absence alone may excuse `value: null` ("not available: ...")
METRICS = {
    "group_advantages_speedup_vs_loop_65536": ["tools/lessons/nb01_group_advantages.py"],
    "group_advantages_time_vs_reshape_65536": ["tools/lessons/nb01_group_advantages.py"],
    "logprobs_peak_memory_vs_logits": ["tools/post_training_runtime.py"],
    "logprobs_peak_memory_vs_logits_bf16": ["tools/post_training_runtime.py"],
    "grpo_loss_fwd_bwd_ms": ["solutions/nb02_grpo_objective.py"],
    "autograde_parallel_speedup": ["autograde/pipeline.py", "tools/chain/notebooks.py"],
    "autograde_seconds_per_notebook_vs_floor": ["autograde/pipeline.py", "tools/chain/notebooks.py"],
    "autograde_class_seconds": ["autograde/pipeline.py", "tools/chain/notebooks.py"],
    "series_execution_s": ["tools/chain/notebooks.py"],
}

SOURCE = """# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: BASE-CPU}
# ---

# %%
# %matplotlib inline
import math
x_not_an_import = 1

# %% nbgrader={"locked": true, "grade_id": "helper"}
def helper(v):
    return math.sqrt(v)

print("demo line", helper(4.0))

# %% nbgrader={"solution": true, "grade_id": "answer"}
def answer(v):
    ### BEGIN SOLUTION
    return helper(v) + 1
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_answer", "points": 1}
import json
assert answer(4) == 3
"""


def test_loader_executes_imports_and_requested_cells_only(tmp_path, capsys):
    (tmp_path / "demo.py").write_text(SOURCE, encoding="utf-8")
    ns = load_answers("demo", ["helper", "answer"], solutions=tmp_path)
    assert "demo line" not in capsys.readouterr().out  # what a cell prints while loading is discarded
    assert ns["answer"](9) == 4.0
    assert "x_not_an_import" not in ns  # only import statements of other cells run
    assert "json" not in ns  # test cells contribute nothing
    with pytest.raises(CourseCodeUnavailable, match="no answer cell"):
        load_answers("demo", ["missing"], solutions=tmp_path)
    with pytest.raises(CourseCodeUnavailable, match="test cell"):
        load_answers("demo", ["test_answer"], solutions=tmp_path)
    with pytest.raises(CourseCodeUnavailable, match="does not exist"):
        load_answers("absent", ["answer"], solutions=tmp_path)


def test_benchmarked_group_advantages_match_the_seed_loop_on_both_paths():
    """The graded function (tools.lessons, what the benchmark times) on ragged groups and on the contiguous
    equal-size fast path, against the loop baseline; exact zeros for equal-reward groups on both paths."""
    import torch

    from benchmarks.group_advantages import ragged_case, seed_loop_advantages
    from tools.lessons.nb01_group_advantages import compute_group_advantages as course

    rewards, group_ids, _ = ragged_case(300, seed=3)
    torch.testing.assert_close(
        course(rewards, group_ids), seed_loop_advantages(rewards, group_ids), rtol=1e-5, atol=1e-5
    )
    rewards = torch.rand(64, generator=torch.Generator().manual_seed(5))  # [N]
    rewards[8:16] = 1.1  # one equal-reward group of float32 values
    for group_ids in (
        torch.arange(8).repeat_interleave(8),
        torch.arange(8).flip(0).repeat_interleave(8),
        torch.zeros(64, dtype=torch.long),
        torch.arange(64),
    ):
        got = course(rewards, group_ids)
        torch.testing.assert_close(got, seed_loop_advantages(rewards, group_ids), rtol=1e-5, atol=1e-5)
        same = rewards[group_ids == group_ids[8]] == rewards[8]
        if bool(same.all()):
            assert bool((got[group_ids == group_ids[8]] == 0).all())
    # ids that repeat a block (0, 0, 1, 1, 0, 0) are one group of four, not two contiguous blocks
    rewards = torch.tensor([1.0, 2.0, 3.0, 5.0, 4.0, 0.0])  # [N]
    group_ids = torch.tensor([0, 0, 1, 1, 0, 0])  # [N]
    torch.testing.assert_close(course(rewards, group_ids), seed_loop_advantages(rewards, group_ids))


def test_the_readme_table_is_generated_from_the_committed_result_files():
    from benchmarks.run import main

    assert main(["--readme-table", "--check"]) == 0, "run `python benchmarks/run.py --readme-table --write`"
    latest = json.loads((report.RESULTS / "latest.json").read_text(encoding="utf-8"))
    rows = [line for line in report.readme_table().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [m["name"] for m in latest["metrics"]]


def test_the_readme_table_check_fails_on_a_stale_table(tmp_path, capsys):
    """The check above can fail: a newer committed run of one metric makes the README's table stale until it is
    rewritten, and the rewritten row names the newer file; a run at tiny size never counts."""
    results, readme = tmp_path / "results", tmp_path / "README.md"
    results.mkdir()
    for path in report.RESULTS.glob("*.json"):
        shutil.copy2(path, results)
    shutil.copy2(report.README, readme)
    assert report.readme_table_command(write=False, check=True, readme=readme, folder=results) == 0
    latest = json.loads((results / "latest.json").read_text(encoding="utf-8"))
    newer = copy.deepcopy({**latest, "metrics": latest["metrics"][:1]})
    newer["machine"].update(date_utc="2999-01-01T00:00:00+00:00", git_commit="f" * 40)
    newer["metrics"][0]["value"] = 123456.0
    (results / "group_advantages-fffffff.json").write_text(json.dumps(newer), encoding="utf-8")
    (results / "tiny.json").write_text(json.dumps({**newer, "mode": "tiny"}), encoding="utf-8")
    assert report.readme_table_command(write=False, check=True, readme=readme, folder=results) == 1
    assert "stale" in capsys.readouterr().err
    assert report.readme_table_command(write=True, check=False, readme=readme, folder=results) == 0
    block = readme.read_text(encoding="utf-8").split(report.TABLE_START)[1].split(report.TABLE_END)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert rows[0].startswith(f"| `{latest['metrics'][0]['name']}` | 123456 |")
    assert "`fffffff`" in rows[0] and "`results/group_advantages-fffffff.json`" in rows[0]
    assert all("results/latest.json" in row for row in rows[1:] if "autograde-" not in row)
    assert report.readme_table_command(write=False, check=True, readme=readme, folder=results) == 0
    readme.write_text("# Benchmarks\n\nno generated table\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bench-table"):
        report.readme_table_command(write=False, check=True, readme=readme, folder=results)


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory, released_course, notebook_runs):
    folder = tmp_path_factory.mktemp("bench")
    out = folder / "tiny.json"
    first = chain.assignments()[0]  # the tiny series times the first solution: the run's shared execution
    nb, seconds = notebook_runs.solution_timed(first)
    (folder / f"{first}.json").write_text(json.dumps({"notebook": nb, "seconds": seconds}), encoding="utf-8")
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "run.py"),
        "--tiny",
        "--out",
        str(out),
        "--released-course",
        str(released_course["course"]),  # the test run's one release
        "--series-from",
        str(folder),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text(encoding="utf-8")), done.stdout


@pytest.mark.slow
def test_tiny_run_has_every_metric_with_the_result_schema(tiny_results):
    results, stdout = tiny_results
    assert results["mode"] == "tiny"
    for key in ("platform", "python", "torch", "cpu", "logical_cpus", "torch_threads", "git_commit"):
        assert key in results["machine"]
    names = [m["name"] for m in results["metrics"]]
    assert names == list(METRICS)
    for m in results["metrics"]:
        assert set(m) == {"name", "value", "unit", "baseline", "detail"}
        assert isinstance(m["unit"], str) and isinstance(m["baseline"], dict) and isinstance(m["detail"], dict)
        assert m["name"] in stdout  # the printed table lists it


@pytest.mark.slow
def test_tiny_run_values_are_finite_unless_a_dependency_is_truly_missing(tiny_results):
    results, _ = tiny_results
    for m in results["metrics"]:
        missing = [p for p in METRICS[m["name"]] if not (ROOT / p).exists()]
        if m["value"] is None:
            assert missing, f"{m['name']} reports no value although its dependencies exist: {m['detail']}"
            assert m["detail"]["status"].startswith("not available: ")
            continue
        assert math.isfinite(m["value"]) and m["value"] >= 0, m
        base = m["baseline"].get("value")
        assert base is None or (math.isfinite(base) and base >= 0), m
        assert m["detail"].get("goal_met") is None  # tiny sizes make no claim


def _measured(by_name, name):
    """The metric, which must carry a value: every benchmarked part is in this checkout."""
    m = by_name[name]
    assert m["value"] is not None, f"{name} reports no value: {m['detail']}"
    return m


@pytest.mark.slow
def test_tiny_run_benchmarked_code_agrees_with_its_baseline(tiny_results):
    results, _ = tiny_results
    by_name = {m["name"]: m for m in results["metrics"]}
    adv = _measured(by_name, "group_advantages_speedup_vs_loop_65536")
    for size in adv["detail"]["sizes"].values():
        assert size["max_abs_diff_vs_loop"] < 1e-4 and size["max_abs_diff_reshape_vs_loop"] < 1e-4
    assert adv["detail"]["ragged_unsorted"]["max_abs_diff_vs_loop"] < 1e-4
    logp = _measured(by_name, "logprobs_peak_memory_vs_logits")
    assert logp["detail"]["max_abs_diff_runtime_vs_naive"] < 1e-4
    logp_bf16 = _measured(by_name, "logprobs_peak_memory_vs_logits_bf16")
    assert logp_bf16["detail"]["max_abs_diff_runtime_vs_previous"] < 1e-4
    assert logp_bf16["value"] <= 1.05 < logp_bf16["baseline"]["value"]  # bytes, not time: exact at any size
    loss = _measured(by_name, "grpo_loss_fwd_bwd_ms")
    assert loss["detail"]["abs_diff_loss"] < 1e-5 and loss["detail"]["max_abs_diff_grad"] < 1e-6
    series = _measured(by_name, "series_execution_s")
    assert series["detail"]["notebooks"], "the series benchmark executed no notebook"
    assert all(not nb["errors"] for nb in series["detail"]["notebooks"].values())
