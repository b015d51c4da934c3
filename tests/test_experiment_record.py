"""The final experiment's record (tools.grpo_experiment): schema, decision rule, failure records; then the
notebook nb06_real_model_grpo executed headless: dry_run through the shared notebook_runs solution run, tiny_cpu
and real_gpu-without-CUDA through the CLI (tools.cli.experiment; slow). Evidence from the CLI runs goes to unique
RUN_LABELs that are removed afterwards; nothing is left in benchmarks/results/pt_grpo/.
"""

from __future__ import annotations

import copy
import json
import math
import uuid
from pathlib import Path

import jsonschema
import pytest
import torch
from experiment_helpers import WORKLOAD_ID, dry_record, fake_measurements  # tests/experiment_helpers.py

from tools import grpo_experiment as gx

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_record_is_schema_valid_and_claims_nothing():
    record = dry_record()
    gx.finalize_measured(record)
    gx.validate_record(record)
    assert (record["evidence_level"], record["decision"]) == ("dry_run", "not_measured")
    assert [c["nonzero_advantages"] for c in record["candidates"]] == [4, 8]
    for broken in (
        {"decision": "accept_mechanism"},
        {"evidence_level": "tiny_cpu_mechanism_check"},
        {"run_label": "bad label"},
        {"schema_version": "post-training-mechanism-gpu/v1"},  # v1 records do not carry the v2 fields
    ):
        with pytest.raises(jsonschema.ValidationError):
            gx.validate_record({**copy.deepcopy(record), **broken})
    claim = copy.deepcopy(record)
    claim["candidates"][0]["policy_separation"] = 1.0
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(claim)
    missing = copy.deepcopy(record)
    del missing["candidates"][1]["unjudgeable_count"]
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(missing)
    nan = copy.deepcopy(record)
    nan["candidates"][0]["reward_std_mean"] = float("nan")
    with pytest.raises(ValueError):
        gx.validate_record(nan)
    lie = copy.deepcopy(record)
    lie["candidates"][1]["verifier_records"][3]["total_reward"] = 0.1  # unjudgeable must earn zero
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(lie)


def test_decision_rule_and_evidence_levels():
    record = fake_measurements(dry_record("tiny_cpu", weights="random_init"))
    record["runtime"].update({"device": "cpu", "dtype": "float32"})
    gx.finalize_measured(record)
    gx.validate_record(record)
    assert (record["evidence_level"], record["decision"]) == ("tiny_cpu_mechanism_check", "accept_mechanism")
    assert record["decision_rules"]["course_rule"]["passed"] and record["decision_rules"]["reference_rule"]["passed"]
    assert record["highest_separation_candidate"] == {
        "candidate_set": "minimal_pair",
        "group_size": 2,
        "interpretation": "diagnostic_only_not_configuration_selection",
    }

    for change in (
        {"policy_separation": 0.0},
        {"zero_variance_guard_passed": False},
        {"reward_std_mean": 0.0},
        {"policy_separation": 0.005},
    ):  # 0.005: above the reference's 0, below the 0.01 noise margin
        candidates = copy.deepcopy(record["candidates"])
        candidates[1].update(change)
        assert gx.decide(candidates) == "tune"
        assert gx.decide(candidates, random_init=True) == "random_init_path_tune"
    within_noise = copy.deepcopy(record["candidates"])
    within_noise[1]["policy_separation"] = 0.005
    rules = gx.decision_rules(within_noise)
    assert (rules["course_rule"]["passed"], rules["reference_rule"]["passed"]) == (False, True)
    assert gx.decide(record["candidates"], random_init=True) == "random_init_path_ok"
    with pytest.raises(ValueError):
        gx.decide([])
    no_margin = copy.deepcopy(record["candidates"])
    no_margin[0]["noise_margin"] = None
    with pytest.raises(ValueError, match="noise_margin"):
        gx.decide(no_margin)

    gpu = fake_measurements(dry_record("real_gpu", weights="random_init"))
    gpu["hardware"] = {"cuda_available": True}
    gpu["runtime"].update({"device": "cuda", "dtype": "bfloat16", "autocast": True})
    for c in gpu["candidates"]:
        c.update(
            {
                "peak_memory_metric": "cuda_max_memory_allocated",
                "peak_allocated_bytes": 10,
                "allocated_bytes_at_start": 0,
            }
        )
    gx.finalize_measured(gpu)
    gx.validate_record(gpu)
    assert gpu["evidence_level"] == "random_init_gpu_resource_benchmark"
    assert gpu["decision"] == "random_init_path_ok"  # never accept_mechanism for random weights
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record({**gpu, "decision": "accept_mechanism"})
    gpu["model"]["weights"] = "pretrained_hub"
    gx.finalize_measured(gpu)
    gx.validate_record(gpu)
    assert gpu["evidence_level"] == "real_model_grpo_rlvr_mechanism_benchmark"
    assert gpu["decision"] == "accept_mechanism"
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record({**gpu, "decision": "random_init_path_ok"})
    gpu["model"]["weights"] = "random_init"  # a random-init model must never carry the real-model level
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(gpu)
    # a measured record must say which tokens it ran, and a scaler-free run cannot skip steps
    for broken in ({"tokenizer_hash": None}, {"batch_shapes": None}, {"token_ids_hash": None}):
        bad = copy.deepcopy(gpu)
        bad["model"]["weights"] = "pretrained_hub"
        bad["workload"].update(broken)
        with pytest.raises(jsonschema.ValidationError):
            gx.validate_record(bad)
    bad = copy.deepcopy(gpu)
    bad["model"]["weights"] = "pretrained_hub"
    bad["candidates"][0]["scaler_skipped_steps"] = 1
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record(bad)
    bad["runtime"].update({"dtype": "float16", "grad_scaler": True})
    gx.validate_record(bad)


def test_failure_record_names_the_stage_and_resets_partial_numbers():
    record = fake_measurements(dry_record("tiny_cpu"))
    record["candidates"][1]["policy_separation"] = None  # half-measured
    try:
        raise RuntimeError("boom")
    except RuntimeError as error:
        gx.mark_failure(record, "candidate_set_expanded_group", error)
    gx.validate_record(record)
    assert record["failure"]["stage"] == "candidate_set_expanded_group"
    assert record["failure"]["error_type"] == "RuntimeError"
    assert (record["evidence_level"], record["decision"]) == ("failed_tiny_cpu_attempt", "reject_until_fixed")
    assert record["candidates"][0]["losses"] is not None  # the completed set keeps its numbers
    assert all(record["candidates"][1][name] is None for name in gx.MEASURED_FIELDS)
    with pytest.raises(jsonschema.ValidationError):
        gx.validate_record({**record, "decision": "tune"})


def test_write_record_validates_and_replaces_an_invalid_record(tmp_path):
    good = dry_record()
    out = tmp_path / "ok.json"
    gx.write_record(out, good)
    gx.validate_record(json.loads(out.read_text(encoding="utf-8")))
    bad = dry_record()
    bad["decision"] = "accept_mechanism"
    out_bad = tmp_path / "bad.json"
    written = gx.write_record(out_bad, bad)
    saved = json.loads(out_bad.read_text(encoding="utf-8"))
    assert saved == written
    assert saved["failure"]["stage"] == "evidence_validation"
    assert saved["decision"] == "reject_until_fixed"
    gx.validate_record(saved)


def test_schema_file_is_a_valid_draft_2020_12_schema():
    schema = gx.load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"]["const"] == gx.SCHEMA_VERSION


def test_committed_records_are_schema_valid():
    results = ROOT / "benchmarks" / "results" / "pt_grpo"
    paths = sorted(results.glob("*.json"))
    names = [path.name for path in paths]
    assert "pt-grpo-real-model-update_tiny_cpu_reference.json" in names, f"the reference record is missing: {names}"
    for path in paths:
        gx.validate_record(json.loads(path.read_text(encoding="utf-8")))


# ------------------------------------------------------------------------------------------ the notebook, headless
@pytest.fixture()
def run_label():
    """A unique label; its evidence file is removed afterwards."""
    label = f"pytest-{uuid.uuid4().hex[:10]}"
    yield label
    (ROOT / gx.output_relative_path(WORKLOAD_ID, label)).unlink(missing_ok=True)


def _run(mode, label, tmp_path):
    from tools.cli import experiment

    status, evidence, record = experiment.run(mode, label, timeout=600, executed_dir=tmp_path)
    executed = tmp_path / f"nb06_real_model_grpo_{label}.ipynb"
    return status, evidence, record, executed


def _outputs(executed_path):
    import nbformat

    return _notebook_text(nbformat.read(executed_path, as_version=4))


def _notebook_text(nb):
    """(the printed and markdown outputs of ``nb`` as one text, the number of PNG images it shows)."""
    text, images = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text.append(out["text"])
            data = out.get("data", {})
            text.append(data.get("text/markdown", ""))
            images += "image/png" in data
    return "\n".join(text), images


@pytest.mark.slow
def test_notebook_dry_run(notebook_runs):
    """The solution notebook as test_notebooks executes it (shared run): RUN_MODE dry_run, label default."""
    import tools.chain.notebooks as chain

    executed = notebook_runs.solution("nb06_real_model_grpo")
    assert not chain.cell_errors(executed)
    saved = json.loads((ROOT / gx.output_relative_path(WORKLOAD_ID, "default")).read_text(encoding="utf-8"))
    gx.validate_record(saved)
    assert saved["run_label"] == "default" and saved["run_mode"] == "dry_run"
    assert (saved["evidence_level"], saved["decision"], saved["failure"]) == ("dry_run", "not_measured", None)
    assert saved["decision_rules"] is None and saved["workload"]["batch_shapes"] is None
    assert [c["nonzero_advantages"] for c in saved["candidates"]] == [4, 8]
    assert [c["unjudgeable_count"] for c in saved["candidates"]] == [0, 1]
    assert all(c["zero_variance_guard_passed"] for c in saved["candidates"])
    assert all(c[name] is None for c in saved["candidates"] for name in gx.MEASURED_FIELDS)
    assert saved["model"]["resolved_commit"] is None
    text, images = _notebook_text(executed)
    assert "Schema 校验通过" in text and "pt-grpo-real-model-update_default.json" in text
    assert "种子参考" in text and "未测量" in text
    assert "-0.1192" in text  # the mean-then-floor counter-example on ten float32 1.1's, computed
    assert images == 0


@pytest.mark.slow
def test_notebook_tiny_cpu(run_label, tmp_path):
    status, evidence, record, executed = _run("tiny_cpu", run_label, tmp_path)
    assert status == 0, record and record.get("failure")
    saved = json.loads(evidence.read_text(encoding="utf-8"))
    gx.validate_record(saved)
    assert saved["failure"] is None
    assert saved["evidence_level"] == "tiny_cpu_mechanism_check"
    assert saved["decision"] == "accept_mechanism"
    assert saved["model"]["weights"] == "random_init" and saved["model"]["resolution_source"] == "local"
    assert len(saved["model"]["resolved_commit"]) == 64
    assert saved["runtime"]["device"] == "cpu" and saved["runtime"]["dtype"] == "float32"
    assert saved["workload"]["learning_rate_source"] == "tiny_cpu_override"
    steps = saved["workload"]["update_steps"]
    minimal, expanded = saved["candidates"]
    assert (minimal["candidate_set"], expanded["candidate_set"]) == ("minimal_pair", "expanded_group")
    assert (minimal["nonzero_advantages"], expanded["nonzero_advantages"]) == (4, 8)
    assert (minimal["unjudgeable_count"], expanded["unjudgeable_count"]) == (0, 1)
    for c in saved["candidates"]:
        assert c["zero_variance_guard_passed"] is True
        assert c["policy_separation"] > 0
        assert len(c["losses"]) == len(c["gradient_norms"]) == len(c["clip_fractions"]) == steps
        assert all(math.isfinite(v) for v in c["losses"] + c["gradient_norms"])
        assert all(v > 0 for v in c["gradient_norms"])
        assert c["losses"][0] == pytest.approx(0.0, abs=1e-6)
        assert c["peak_memory_metric"] == "process_peak_rss" and c["peak_rss_bytes"] > 0
        assert c["median_update_ms"] > 0
    assert saved["highest_separation_candidate"]["interpretation"] == "diagnostic_only_not_configuration_selection"
    assert saved["decision_rules"]["course_rule"]["passed"] and saved["decision_rules"]["reference_rule"]["passed"]
    assert saved["runtime"]["dtype_choice"] == "auto"
    shapes = saved["workload"]["batch_shapes"]
    assert [s["candidate_set"] for s in shapes] == ["minimal_pair", "expanded_group"]
    assert [s["input_ids_shape"][0] for s in shapes] == [4, 8]
    assert len(saved["workload"]["tokenizer_hash"]) == len(saved["workload"]["token_ids_hash"]) == 64
    for c in saved["candidates"]:
        assert c["scaler_skipped_steps"] == 0
        assert 0 <= c["noise_margin"] < 1e-4 < c["policy_separation"]  # fp32 on CPU: no-update noise is tiny
    assert saved["timing"]["total_seconds"] > 0  # measured; how fast is for benchmarks/, not a unit test
    text, images = _outputs(executed)
    assert images == 1  # the per-step loss / clip fraction figure
    assert f"{minimal['policy_separation']:.3f} / {expanded['policy_separation']:.3f}" in text  # computed, not pasted
    assert "1.476 / 1.731" in text  # the seed's reference, labelled beside it


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA failure path")
def test_notebook_real_gpu_without_cuda_writes_a_failure_record(run_label, tmp_path):
    status, evidence, record, executed = _run("real_gpu", run_label, tmp_path)
    assert status == 2
    saved = json.loads(evidence.read_text(encoding="utf-8"))
    gx.validate_record(saved)
    assert saved["failure"]["stage"] == "environment_preflight"
    assert "CUDA" in saved["failure"]["message"]
    assert (saved["evidence_level"], saved["decision"]) == ("failed_real_gpu_attempt", "reject_until_fixed")
    assert [c["nonzero_advantages"] for c in saved["candidates"]] == [4, 8]  # the verifier half is still there


@pytest.mark.slow
def test_notebook_rejects_an_unknown_run_mode(run_label, tmp_path, notebook_runs):
    import nbformat

    import tools.chain.notebooks as chain

    nb = chain.build_notebook("nb06_real_model_grpo")
    nb = chain.parameterize(nb, {"RUN_MODE": "gpu", "RUN_LABEL": run_label})
    done = notebook_runs.run(nb, ROOT, timeout=300)
    errors = chain.cell_errors(done)
    assert errors and errors[0][2] == "ValueError" and "RUN_MODE" in errors[0][3]
    assert not (ROOT / gx.output_relative_path(WORKLOAD_ID, run_label)).exists()
    assert isinstance(done, nbformat.NotebookNode)
