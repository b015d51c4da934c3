"""``make gpu-wheelhouse``: the wheels ``benchmarks/gpu_check.sh`` installs on a bare CUDA machine.

The device machine has torch and nothing else, and no network; the working tree travels with at most
64 MiB of extra files. This script (run here, with network to PyPI or a warm pip cache) downloads the
wheels of the packages the check imports - transformers, peft, tokenizers, accelerate, safetensors,
huggingface_hub, jsonschema, numpy, IPython (the notebook's ``IPython.display``), pytest and their dependencies -
for CPython on x86_64 Linux, into ``.cache/gpu-wheelhouse/`` (ignored by git; carry it to the device).

* The set is the dependency closure of :data:`ROOTS` as installed in this ``.venv`` (the versions the CPU
  tests run), minus torch and what only torch needs (:data:`LEFT_TO_TORCH`): the device's torch stays;
  and minus declared dependencies the check never imports (:data:`NOT_IMPORTED`).
* ``--python 3.11 --python 3.12`` (default: both): binary wheels per interpreter; pure wheels once.
* ``requirements.txt`` (pins, installed with ``--no-deps``) and ``manifest.json`` (files, sizes, sha256)
  are written beside the wheels. The folder must fit ``--budget-mib`` (default 60 of the 64 MiB).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.preflight import normalise_name

ROOT = Path(__file__).resolve().parents[2]
ROOTS = (
    "transformers",
    "peft",
    "tokenizers",
    "accelerate",
    "safetensors",
    "huggingface-hub",
    "jsonschema",
    "numpy",
    "ipython",
    "jinja2",
    "pytest",  # the device and dtype tests (tests/test_device_*.py) run on the card
)
# Provided by the device's torch install (or only needed by torch): never downloaded, never replaced.
LEFT_TO_TORCH = {"torch", "triton", "sympy", "mpmath", "networkx", "setuptools"}
# Declared dependencies the check never imports, left out to fit the budget (install uses --no-deps):
# transformers' and huggingface_hub's command-line interfaces (typer, rich, pydantic, ...), the Xet
# download backend (no downloads offline) and IPython's optional completer (jedi). The fresh-install test
# (tests/test_gpu_check.py) imports and runs the check's code path without them.
NOT_IMPORTED = {
    "typer",
    "pydantic",
    "pydantic-core",
    "typing-inspection",
    "annotated-types",
    "rich",
    "markdown-it-py",
    "mdurl",
    "shellingham",
    "annotated-doc",
    "hf-xet",
    "jedi",
    "parso",
}
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)


def closure(python_versions: list[str]) -> dict[str, str]:
    """{normalised name: installed version} of ROOTS and their (non-extra) requirements, for every
    target interpreter's markers; torch and its own dependencies left out."""
    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    todo = list(ROOTS)
    while todo:
        name = normalise_name(todo.pop())
        if name in found or name in LEFT_TO_TORCH or name in NOT_IMPORTED or name.startswith("nvidia-"):
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # a dependency only another interpreter needs (not installed here); see markers below
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None:
                todo.append(req.name)
                continue
            for version in python_versions:
                env = {
                    "python_version": version,
                    "python_full_version": version + ".0",
                    "extra": "",
                    "sys_platform": "linux",
                    "platform_system": "Linux",
                    "platform_machine": "x86_64",
                    "implementation_name": "cpython",
                    "platform_python_implementation": "CPython",
                    "os_name": "posix",
                }
                if req.marker.evaluate(env):
                    todo.append(req.name)
                    break
    return dict(sorted(found.items()))


def _download(pins: list[str], dest: Path, python_version: str) -> None:
    tag = python_version.replace(".", "")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        python_version,
        "--abi",
        f"cp{tag}",
        "--abi",
        "abi3",
        "--abi",
        "none",
        "-d",
        str(dest),
    ]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    done = subprocess.run(command + pins, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"pip download failed for Python {python_version}:\n{done.stderr[-3000:]}")


def build(out: Path, python_versions: list[str], budget_mib: float) -> dict:
    pins = [f"{name}=={version}" for name, version in closure(python_versions).items()]
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.whl"):
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="gpu-wheelhouse-") as tmp:
        for version in python_versions:
            _download(pins, Path(tmp), version)
        for wheel in sorted(Path(tmp).glob("*.whl")):
            shutil.copy2(wheel, out / wheel.name)
    files = sorted(out.glob("*.whl"))
    total = sum(f.stat().st_size for f in files)
    (out / "requirements.txt").write_text(
        "# generated by `make gpu-wheelhouse` (tools/device/gpu_wheelhouse.py): install with\n"
        "#   pip install --no-index --no-deps --find-links <this folder> -r requirements.txt\n"
        + "\n".join(pins)
        + "\n",
        encoding="utf-8",
    )
    manifest = {
        "python_versions": python_versions,
        "platform": "x86_64 Linux (manylinux)",
        "pins": pins,
        "left_to_the_device_torch": sorted(LEFT_TO_TORCH),
        "not_imported_left_out": sorted(NOT_IMPORTED),
        "total_bytes": total,
        "files": [
            {"name": f.name, "bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
            for f in files
        ],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"{len(files)} wheels, {total / 2**20:.1f} MiB, for CPython {' / '.join(python_versions)} -> {out}")
    if total > budget_mib * 2**20:
        raise SystemExit(
            f"the wheelhouse is {total / 2**20:.1f} MiB, over the {budget_mib} MiB budget: "
            "build it for one interpreter (--python 3.12) instead"
        )
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "gpu-wheelhouse")
    parser.add_argument("--python", action="append", dest="pythons", help="target CPython X.Y (repeatable)")
    parser.add_argument("--budget-mib", type=float, default=60.0)
    parser.add_argument("--list", action="store_true", help="print the pins and exit (no download)")
    args = parser.parse_args(argv)
    pythons = args.pythons or ["3.11", "3.12"]
    if args.list:
        print("\n".join(f"{n}=={v}" for n, v in closure(pythons).items()))
        return 0
    build(args.out, pythons, args.budget_mib)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
