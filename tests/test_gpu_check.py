"""The GPU script (benchmarks/gpu_check.sh, its steps tools/device/gpu_steps.py, notebook 6's side
tools/device/gpu_check.py, the wheelhouse tools/device/gpu_wheelhouse.py) as far as a CPU can test it: shell syntax,
the dry run (every step listed, everything a step names exists; a missing file, make target, module, pytest
selection or earlier step is reported), the runner and its record on trivial steps, the notebook cell reader, the
invariants and the record printer on records shaped like a device's, and - opt-in, with a built wheelhouse - the
wheelhouse installed into a fresh interpreter that has torch and nothing else, then the check's CPU code path run on
it."""

from __future__ import annotations

import copy
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tools import grpo_experiment as gx

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
WHEELHOUSE = ROOT / ".cache" / "gpu-wheelhouse"
REFERENCE_RECORD = ROOT / "benchmarks" / "results" / "pt_grpo" / "pt-grpo-real-model-update_tiny_cpu_reference.json"

from tools.device import gpu_check, gpu_steps  # noqa: E402


def test_shell_script_syntax():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_script_refuses_to_run_without_a_wheelhouse(tmp_path):
    env = dict(
        os.environ, GPU_PYTHON=sys.executable, GPU_WHEELHOUSE=str(tmp_path / "none"), GPU_SITE=str(tmp_path / "site")
    )
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert "make gpu-wheelhouse" in done.stdout


def test_dry_run_lists_every_step_and_finds_what_each_names():
    env = dict(os.environ, GPU_PYTHON=sys.executable)
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = [line.split()[2] for line in done.stdout.splitlines() if line.startswith("STEP ")]
    assert listed == [step.name for step in gpu_steps.STEPS]
    assert "MISSING" not in done.stdout
    kinds = {need.partition(":")[0] for step in gpu_steps.STEPS for need in step.needs}
    assert kinds == {"file", "make", "module", "pytest"}  # every kind of need is checked on the real list
    names = {step.name for step in gpu_steps.STEPS}
    assert {"device_tests", "nb06_auto", "nb06_fp16", "nb07_real_gpu"} <= names


@pytest.mark.parametrize(
    "need, expected",
    [
        ("file:tools/device/no_such_file.py", "file tools/device/no_such_file.py does not exist"),
        ("make:no-such-target", "make no-such-target does not exist"),
        ("module:tools.no_such_module", "module tools.no_such_module does not exist"),
        ("pytest:tests/test_no_such_*.py", "pytest tests/test_no_such_*.py does not exist"),
    ],
)
def test_a_step_naming_something_missing_is_reported(need, expected):
    step = gpu_steps.Step("broken", ("true",), 1, (need,))
    assert gpu_steps.unmet(step, steps=(step,)) == [f"broken: {expected}"]


def test_a_step_after_an_unknown_step_is_reported(capsys):
    step = gpu_steps.Step("late", ("true",), 1, ("file:Makefile",), after=("renamed",))
    assert gpu_steps.unmet(step, steps=(step,)) == ["late: runs after an unknown step renamed"]
    assert gpu_steps.dry_run((step,)) == 1 and "MISSING late" in capsys.readouterr().out


def test_the_device_tests_take_the_device_from_the_variable_the_script_sets(monkeypatch):
    from device_option import devices_under_test

    from tools import env_vars

    step = next(s for s in gpu_steps.STEPS if s.name == "device_tests")
    assert step.env == {env_vars.TEST_DEVICE: "cuda"} and gpu_steps.DEVICE_TESTS in step.argv
    argv = gpu_steps.command(step, {}, "python")  # no shell runs the steps: the glob is expanded to the files
    assert "tests/test_device_multiprocess.py" in argv
    assert not any("*" in part for part in argv)
    monkeypatch.setenv(env_vars.TEST_DEVICE, "cuda")
    assert devices_under_test(("cpu",)) == ["cuda"]
    monkeypatch.delenv(env_vars.TEST_DEVICE)
    assert devices_under_test(("meta",)) == ["meta"]


def test_runner_runs_in_order_skips_after_a_failure_and_writes_a_valid_record(tmp_path):
    """The runner on trivial steps: a failing step's dependants are skipped, the record validates and says
    failed; with every step passing it says passed."""
    py = sys.executable
    hardware = f"import json; json.dump(dict(bf16_supported=True), open({str(ROOT / gpu_steps.HARDWARE_JSON)!r}, 'w'))"
    steps = (
        gpu_steps.Step("hardware", ("{python}", "-c", hardware), 30, ()),
        gpu_steps.Step("fails", ("{python}", "-c", "raise SystemExit(3)"), 30, (), after=("hardware",)),
        gpu_steps.Step(
            "dtype", ("{python}", "-c", "import sys; assert sys.argv[1] == 'bfloat16'", "{auto_dtype}"), 30, ()
        ),
        gpu_steps.Step("blocked", ("{python}", "-c", "pass"), 30, (), after=("fails",)),
    )
    label = f"pytest-gpu-steps-{os.getpid()}"
    path = ROOT / gpu_steps.record_path(label)
    try:
        assert gpu_steps.run(label, py, __import__("time").time(), copy_to=tmp_path, steps=steps) == 1
        record = json.loads(path.read_text(encoding="utf-8"))
        gpu_steps.validate_record(record)
        assert [(s["name"], s["status"]) for s in record["steps"]] == [
            ("hardware", "passed"),
            ("fails", "failed"),
            ("dtype", "passed"),
            ("blocked", "skipped"),
        ]
        assert record["steps"][1]["returncode"] == 3 and record["result"] == "failed"
        assert (tmp_path / path.name).is_file()
        assert gpu_steps.run(label, py, __import__("time").time(), steps=steps[:1] + steps[2:3]) == 0
        assert json.loads(path.read_text(encoding="utf-8"))["result"] == "passed"
        spent = __import__("time").time() - gpu_steps.BUDGET_S - 1  # started long ago: nothing runs any more
        assert gpu_steps.run(label, py, spent, steps=steps[:1]) == 1
        late = json.loads(path.read_text(encoding="utf-8"))
        assert late["steps"][0]["status"] == "skipped" and "budget is spent" in late["steps"][0]["output_tail"]
    finally:
        path.unlink(missing_ok=True)
        (ROOT / gpu_steps.HARDWARE_JSON).unlink(missing_ok=True)


def test_the_record_sets_notebook_6_beside_the_chapters_figures():
    record = gpu_steps.build_record("unit", [], 10.0, {"gpu_name": "X"}, gpu_like_record(), {"passed": True})
    gpu_steps.validate_record(record)
    rows = {r["candidate_set"]: r for r in record["seed_comparison"]}
    assert rows["expanded_group"]["reference_peak_gb"] == 3.29
    assert rows["expanded_group"]["reference_median_update_ms"] == 76.88
    assert rows["expanded_group"]["peak_allocated_gb"] == 2.5 and rows["expanded_group"]["peak_ratio"] == round(
        2.5 / 3.29, 4
    )
    ms = gpu_like_record()["candidates"][1]["median_update_ms"]
    assert rows["expanded_group"]["update_time_ratio"] == round(ms / 76.88, 4)
    assert record["result"] == "failed"  # no steps ran
    missing = gpu_steps.build_record("unit", [], 10.0, {}, None, None)
    gpu_steps.validate_record(missing)
    assert all(r["peak_allocated_gb"] is None for r in missing["seed_comparison"])


def test_notebook_code_cells_are_the_notebooks():
    cells = gpu_check.code_cells()
    assert any("gx.new_record(" in c and "gx.run_update_steps(" in c for c in cells)  # the experiment cell
    assert sum("import matplotlib" in c for c in cells) == 1  # the one figure cell the runner skips
    assert not any(c.lstrip().startswith("# ---") for c in cells)  # the jupytext header is not code
    for index, source in enumerate(cells):
        compile(source, f"cell {index}", "exec")
    tagged = [source for header, source in gpu_check._code_cells(gpu_check.NOTEBOOK) if '"parameters"' in header]
    assert len(tagged) == 1 and "RUN_MODE = " in tagged[0]  # run_notebook injects real_gpu right after this cell


def gpu_like_record(dtype="bfloat16", choice="auto"):
    """The committed tiny_cpu record reshaped into what a device run writes (for the invariants)."""
    from tools import grpo_experiment as gx

    record = json.loads(REFERENCE_RECORD.read_text(encoding="utf-8"))
    record.update({"run_mode": "real_gpu", "run_label": "unit_gpu"})
    record["hardware"] = {
        "cuda_available": True,
        "gpu_name": "NVIDIA Example",
        "compute_capability": "9.0",
        "bf16_supported": True,
        "torch": "2.13.0",
        "cuda_runtime": "12.8",
        "driver_version": "570",
    }
    record["runtime"].update(
        {"device": "cuda", "dtype": dtype, "dtype_choice": choice, "autocast": True, "grad_scaler": dtype == "float16"}
    )
    record["model"].update({"id": ".cache/qwen2.5-0.5b-shaped", "weights": "random_init"})
    record["workload"]["learning_rate"], record["workload"]["learning_rate_source"] = 2e-4, "seed"
    for shape, size in zip(record["workload"]["batch_shapes"], (44, 49)):
        shape["input_ids_shape"][1] = size
    for c in record["candidates"]:
        c.update(
            {
                "trainable_parameters": gpu_check.EXPECTED_LORA_PARAMETERS,
                "peak_memory_metric": "cuda_max_memory_allocated",
                "peak_allocated_bytes": 2_500_000_000,
                "allocated_bytes_at_start": 8192,
                "scaler_skipped_steps": 1 if dtype == "float16" else 0,
            }
        )
    gx.finalize_measured(record)
    return record


def test_invariants_hold_for_a_device_shaped_record():
    record = gpu_like_record()
    assert record["decision"] in ("random_init_path_ok", "random_init_path_tune")
    assert gpu_check.check_record(record, "bfloat16", "auto") == []
    assert gpu_check.check_record(gpu_like_record("float16", "forced"), "float16", "forced") == []


@pytest.mark.parametrize(
    "breakage, expected",
    [
        (lambda r: r["candidates"][0].update(trainable_parameters=540_000), "540,672"),
        (lambda r: r["candidates"][1].update(allocated_bytes_at_start=900 * 2**20), "not freed"),
        (lambda r: r["runtime"].update(dtype="float16"), "dtype float16"),
        (lambda r: r["runtime"].update(dtype_choice="forced"), "dtype_choice"),
        (lambda r: r.update(decision="accept_mechanism"), "random-init vocabulary"),
        (lambda r: r["candidates"][0].update(losses=[0.0, 0.1]), "effective steps"),
        (lambda r: r["workload"]["batch_shapes"][0].update(input_ids_shape=[4, 23]), "token workload"),
        (lambda r: r["candidates"][0].update(scaler_skipped_steps=2), "without a scaler"),
    ],
)
def test_each_broken_invariant_is_reported(breakage, expected):
    record = gpu_like_record()
    breakage(record)
    problems = gpu_check.check_record(record, "bfloat16", "auto")
    assert any(expected in p for p in problems), problems


def test_a_failure_record_fails_the_check():
    from tools import grpo_experiment as gx

    record = gpu_like_record()
    try:
        raise RuntimeError("CUDA out of memory")
    except RuntimeError as error:
        gx.mark_failure(record, "candidate_set_expanded_group", error)
    problems = gpu_check.check_record(record, "bfloat16", "auto")
    assert problems and "candidate_set_expanded_group" in problems[0]


def test_verify_command_exit_status(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(gpu_like_record()), encoding="utf-8")
    bad = tmp_path / "bad.json"
    broken = gpu_like_record()
    broken["candidates"][0]["trainable_parameters"] = 1
    bad.write_text(json.dumps(broken), encoding="utf-8")
    assert gpu_check.main(["verify", str(good), "--expect-dtype", "bfloat16", "--expect-choice", "auto"]) == 0
    assert gpu_check.main(["verify", str(good), str(bad), "--expect-dtype", "bfloat16", "--expect-choice", "auto"]) == 1
    assert "all invariants hold" in capsys.readouterr().out


def test_record_printer_labels_random_init_figures_not_comparable(tmp_path, capsys):
    record = gpu_like_record("float16", "forced")
    lines = gpu_check.report_lines(record)
    text = "\n".join(lines)
    sep = " / ".join(f"{c['policy_separation']:.3f}" for c in record["candidates"])
    assert sep in text and "1.476 / 1.731" in text  # this run's figure beside the reference's
    assert "47.58 / 76.88" in text and "2.16 / 3.29" in text
    assert "2.50 / 2.50" in text  # peak GB computed from the record
    assert text.count("NOT COMPARABLE (random-init weights)") == 2  # separation and clip fraction
    assert "[4, 44]" in text and "float16 (forced)" in text
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    assert gpu_check.main(["report", str(path)]) == 0
    assert "NOT COMPARABLE" in capsys.readouterr().out
    pretrained = copy.deepcopy(record)
    pretrained["model"]["weights"] = "pretrained_hub"
    assert "NOT COMPARABLE" not in "\n".join(gpu_check.report_lines(pretrained))


def test_wheelhouse_closure_leaves_torch_alone():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tools.device import gpu_wheelhouse

    pins = gpu_wheelhouse.closure(["3.11", "3.12"])
    assert {
        "transformers",
        "peft",
        "tokenizers",
        "accelerate",
        "safetensors",
        "huggingface-hub",
        "jsonschema",
        "numpy",
        "ipython",
    } <= set(pins)
    assert "torch" not in pins and not any(name.startswith("nvidia-") for name in pins)
    assert "pytest" in pins  # the device tests run on the card
    assert not set(pins) & gpu_wheelhouse.NOT_IMPORTED
    assert pins["transformers"] == md.version("transformers")


# ---------------------------------------------------------------------------- fresh install (opt-in)
def _torch_only_site(folder: Path) -> Path:
    """A folder holding torch and the distributions torch requires (symlinks into this venv): what a
    device with 'torch installed, nothing else' has."""
    from packaging.requirements import Requirement

    folder.mkdir()
    todo, seen = ["torch"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        dist = md.distribution(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                try:
                    md.distribution(req.name)
                except md.PackageNotFoundError:
                    continue
                todo.append(req.name)
        for entry in {Path(str(f)).parts[0] for f in dist.files or []}:
            source = Path(dist.locate_file(entry))
            if source.exists() and not (folder / entry).exists() and not entry.startswith(".."):
                (folder / entry).symlink_to(source)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(
    not (WHEELHOUSE / "requirements.txt").is_file(),
    reason="no wheelhouse: run `make gpu-wheelhouse` first (needs PyPI or a warm pip cache)",
)
@pytest.mark.skipif(
    os.environ.get("GRPO_TEST_GPU_WHEELHOUSE") != "1",
    reason="opt-in (installs ~60 MiB of wheels): set GRPO_TEST_GPU_WHEELHOUSE=1",
)
def test_wheelhouse_installs_into_a_bare_interpreter_and_runs_the_cpu_path(tmp_path):
    env_dir = tmp_path / "bare"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "device_torch.pth").write_text(str(_torch_only_site(tmp_path / "torch-only")) + "\n")
    bare = subprocess.run(
        [str(python), "-c", "import torch\ntry:\n import transformers\nexcept ImportError:\n print('bare')"],
        capture_output=True,
        text=True,
    )
    assert bare.stdout.strip() == "bare", bare.stderr  # torch, and no transformers
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(GPU_PYTHON=str(python), GPU_SITE=str(tmp_path / "site"), PATH=os.defpath)
    done = subprocess.run(["bash", str(SCRIPT), "--install-only"], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "install-only: done (torch unchanged" in done.stdout
    smoke = r"""
import json, sys, torch, transformers
assert transformers.__file__.startswith(sys.argv[1]), transformers.__file__
from tools import grpo_experiment as gx
from tools.post_training_runtime import build_response_batch, response_sequence_logps
from tools.tiny_model import build_qwen25_like_tokenizer, tiny_checkpoint_path
import IPython.display
path = str(tiny_checkpoint_path())
precision = gx.Precision(torch.device("cpu"), torch.bfloat16, autocast=True, grad_scaler=False)
policy, trainable = gx.load_lora_policy(path, precision, revision=None, local_files_only=True, lora_rank=8,
    lora_alpha=16, lora_dropout=0.0, target_modules=("q_proj", "v_proj"), seed=42)
cs = gx.build_candidate_set("minimal_pair", 2)
tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
batch = build_response_batch(tok, cs.prompts, cs.responses, max_length=96)
with precision.autocast_context():
    mean, _ = response_sequence_logps(policy, batch)
mean.sum().backward()
assert all(p.grad is not None for p in trainable)
shape = gx.batch_shape_entry("minimal_pair", build_response_batch(build_qwen25_like_tokenizer(), cs.prompts, cs.responses, 96))
assert shape["input_ids_shape"] == [4, 44], shape
gx.validate_record(json.load(open(sys.argv[2])))
print("smoke ok", transformers.__version__)
"""
    env_run = dict(env, PYTHONPATH=f"{tmp_path / 'site'}:{ROOT}", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    ran = subprocess.run(
        [str(python), "-c", smoke, str(tmp_path / "site"), str(REFERENCE_RECORD)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env_run,
        timeout=600,
    )
    assert ran.returncode == 0 and "smoke ok" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-3000:]
    # the device tests as the script runs them (pytest --noconftest, the wheelhouse only), here on the CPU
    step = next(s for s in gpu_steps.STEPS if s.name == "device_tests")
    argv = gpu_steps.command(step, {}, str(python))
    assert "tests/test_device_multiprocess.py" in argv and not any("*" in part for part in argv)
    tests = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env_run, timeout=600)
    assert tests.returncode == 0 and " passed" in tests.stdout, tests.stdout[-3000:] + tests.stderr[-2000:]
    shutil.rmtree(tmp_path / "site", ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the runner on a machine without CUDA")
def test_runner_executes_the_notebook_code_and_writes_a_failure_record_without_cuda(tmp_path):
    """The device runner on a CPU: every code cell runs in one process; without CUDA the experiment
    cell writes a schema-valid failure record (stage environment_preflight) and verify rejects it."""
    label = f"pytest-gpu-check-{os.getpid()}"
    record_path = ROOT / gx.output_relative_path("pt-grpo-real-model-update", label)
    env = dict(os.environ, GRPO_MODEL_ID=str(tmp_path / "no-checkpoint"), OMP_NUM_THREADS="1")
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "device" / "gpu_check.py"), "run-notebook", "--label", label],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "figure cell skipped" in done.stdout
        record = json.loads(record_path.read_text(encoding="utf-8"))
        assert record["run_mode"] == "real_gpu" and record["failure"]["stage"] == "environment_preflight"
        problems = gpu_check.check_record(record, "bfloat16", "auto")
        assert problems and "failure record" in problems[0]
    finally:
        record_path.unlink(missing_ok=True)
