"""Which devices the device tests (``tests/test_device_*.py``) run on: the one place they read it.

``devices_under_test(default)`` is the comma-separated value of ``tools.env_vars.TEST_DEVICE`` (``GRPO_TEST_DEVICE``),
else ``default`` (each test file's CPU-side choice, e.g. ``("cpu",)`` or ``("meta",)``). ``benchmarks/gpu_check.sh``
sets it to ``cuda`` and runs ``pytest --noconftest tests/test_device_*.py`` with only the device wheelhouse (torch,
transformers, peft, accelerate, numpy, jsonschema, pytest): a device test imports nothing else and needs no fixture of
``tests/conftest.py``."""

from __future__ import annotations

import os

from tools import env_vars


def devices_under_test(default=("cpu",)) -> list[str]:
    value = os.environ.get(env_vars.TEST_DEVICE, "")
    return [name.strip() for name in value.split(",") if name.strip()] or list(default)
