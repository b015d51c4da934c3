"""real_gpu's notebook cells outside a notebook: nb06's experiment cell and lesson 7's cells, executed from
``solutions/`` in this process with the policy and the device a test chooses (tests/test_device_placement.py on meta,
tests/test_device_numerics.py on the CPU in the presets' dtypes)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import torch

from tools import grpo_experiment as gx
from tools import online_grpo as og

ROOT = Path(__file__).resolve().parents[1]
A6 = "nb06_real_model_grpo"
A7 = "nb07_online_grpo"


def solution_cells(assignment: str) -> list[tuple[dict, str]]:
    """(metadata, source) of every code cell of ``solutions/<assignment>.py`` (jupytext percent), in order."""
    import jupytext

    path = ROOT / "solutions" / f"{assignment}.py"
    return [
        (dict(cell.metadata), cell.source)
        for cell in jupytext.read(path, fmt="py:percent").cells
        if cell.cell_type == "code"
    ]


def cell_source(assignment: str, grade_id: str, visible_only: bool = True) -> str:
    """The source of the cell with nbgrader ``grade_id``; ``visible_only``: without its hidden-test region."""
    for metadata, source in solution_cells(assignment):
        if metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            if visible_only and "### BEGIN HIDDEN TESTS" in source:
                source = source.split("### BEGIN HIDDEN TESTS")[0]
            return source
    raise KeyError(f"{assignment} has no cell {grade_id!r}")


def run_cell(source: str, namespace: dict, where: str) -> dict:
    """Execute a cell's source in ``namespace`` (the notebook's globals), naming its frames ``where``."""
    exec(compile(source, where, "exec"), namespace)  # noqa: S102 - the course's own notebook source
    return namespace


def run_nb06_real_gpu(monkeypatch, precision, replace=None, scaler_device=None) -> dict:
    """nb06's code cells up to its experiment cell with RUN_MODE = real_gpu injected after the parameters cell (as
    papermill does), the Qwen-shaped checkpoint as ``GRPO_MODEL_ID`` and ``gx.select_precision`` answering
    ``precision`` (the device a test stands in for CUDA with). ``replace``: (old, new) applied to the experiment
    cell's source. ``scaler_device``: the device the cell's ``torch.amp.GradScaler("cuda", ...)`` is made for (the
    CPU for an fp16 run on the CPU). Returns the record the cell writes, not validated (a real_gpu record's schema
    wants CUDA's memory counters) and not written."""
    from tools.tiny_model import qwen_shaped_checkpoint_path

    monkeypatch.setenv("GRPO_MODEL_ID", str(qwen_shaped_checkpoint_path()))
    monkeypatch.delenv("GRPO_REAL_GPU_DTYPE", raising=False)
    monkeypatch.setattr(gx, "select_precision", lambda run_mode, force_dtype=None: precision)
    if scaler_device is not None:
        scaler = torch.amp.GradScaler
        monkeypatch.setattr(torch.amp, "GradScaler", lambda device, **kwargs: scaler(scaler_device, **kwargs))
    written = []

    def keep(path, record):
        written.append(copy.deepcopy(record))
        return record

    monkeypatch.setattr(gx, "write_record", keep)
    namespace = {"__name__": "__main__"}
    for index, (metadata, source) in enumerate(solution_cells(A6)):
        experiment = "gx.new_record(" in source
        if experiment and replace is not None:
            assert replace[0] in source, f"the replacement's target is not in the experiment cell: {replace[0]!r}"
            source = source.replace(*replace)
        run_cell(source, namespace, f"{A6}:cell{index}")
        if "parameters" in metadata.get("tags", []):
            run_cell('RUN_MODE = "real_gpu"\nRUN_LABEL = "device_test"', namespace, f"{A6}:injected")
        if experiment:
            break
    assert len(written) == 1, "the experiment cell writes one record"
    return written[0]


def nb07_namespace(policy, tokenizer, device, sample_group=None) -> dict:
    """The globals lesson 7's cells see in RUN_MODE=real_gpu: the policy and tokenizer, the reference answers of the
    three TODOs (``tools.lessons``; ``sample_group`` replaced when given), the course's helpers."""
    from IPython.display import Image, Markdown, display

    from tools.grading import assert_close, expect_value_error
    from tools.lessons import nb07_online_grpo as saved
    from tools.lessons.nb01_group_advantages import compute_group_advantages
    from tools.lessons.nb04_verifiable_rewards import verify_integer_response

    return {
        "__name__": "__main__",
        "torch": torch,
        "copy": copy,
        "json": json,
        "math": math,
        "og": og,
        "assert_close": assert_close,
        "expect_value_error": expect_value_error,
        "display": display,
        "Markdown": Markdown,
        "Image": Image,
        "RUN_MODE": "real_gpu",
        "DEVICE": torch.device(device),
        "policy": policy,
        "tokenizer": tokenizer,
        "TRAIN_PROBLEMS": og.split_problems()[0],
        "sample_group": saved.sample_group if sample_group is None else sample_group,
        "grpo_step": saved.grpo_step,
        "log_step_metrics": saved.log_step_metrics,
        "compute_group_advantages": compute_group_advantages,
        "verify_integer_response": verify_integer_response,
    }
