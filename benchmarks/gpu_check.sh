#!/usr/bin/env bash
# The one script for whoever has a CUDA card (24-80 GB, one card, <= 10 minutes): a bare machine with torch
# installed, nothing else, no network. Carry the working tree plus .cache/gpu-wheelhouse (`make gpu-wheelhouse`).
#
#   bash benchmarks/gpu_check.sh                 # the whole check; one record under benchmarks/results/local/gpu-check/
#   bash benchmarks/gpu_check.sh --dry-run       # print the steps and check that what they name exists; run nothing
#   bash benchmarks/gpu_check.sh --install-only  # only install the wheelhouse and import it (a CPU test runs this)
#
# 1. installs the wheelhouse with pip --no-index --no-deps into a target folder on PYTHONPATH (the machine's torch is
#    never replaced);
# 2. runs the steps of tools/device/gpu_steps.py (STEPS), each in its own process with a time limit: the card's
#    snapshot; the Qwen-shaped random-init checkpoint; the device and dtype tests (tests/test_device_*.py) on cuda;
#    notebook 6's real_gpu experiment with the automatic dtype and with fp16 + GradScaler forced, each verified
#    (tools/device/gpu_check.py); two steps of lesson 7's real_gpu preset;
# 3. writes one record, gpu-check_<label>.json (tools/schemas/gpu-check-v1.json), with notebook 6's peak memory and
#    median update time beside the reference chapter's 3.29 GB and 76.88 ms.
#
# Environment: GPU_PYTHON (interpreter with torch; default python3), GPU_WHEELHOUSE (default .cache/gpu-wheelhouse),
# GPU_SITE (install target; default .cache/gpu-site), GPU_CHECK_LABEL (record label; default gpu_check),
# GPU_CHECK_OUT (copy the record and the per-step files there, e.g. $OUT).
# Exit status: 0 every step passed within the budget; 1 a step failed; 2 the set-up failed (no torch, no wheelhouse).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
PY=${GPU_PYTHON:-python3}
WHEELHOUSE=${GPU_WHEELHOUSE:-$ROOT/.cache/gpu-wheelhouse}
SITE=${GPU_SITE:-$ROOT/.cache/gpu-site}
LABEL=${GPU_CHECK_LABEL:-gpu_check}
OUT_DIR=${GPU_CHECK_OUT:-}
STARTED=$(date +%s)

say() { printf '[gpu_check %4ss] %s\n' "$(( $(date +%s) - STARTED ))" "$*"; }
die() { say "SET-UP FAILED: $*"; exit 2; }

command -v "$PY" >/dev/null 2>&1 || die "no interpreter $PY (set GPU_PYTHON)"
if [ "${1:-}" = "--dry-run" ]; then
    exec "$PY" tools/device/gpu_steps.py dry-run
fi

# ---- 1. packages ------------------------------------------------------------------------------
"$PY" -c "import torch" 2>/dev/null || die "$PY cannot import torch: the device must have torch installed"
[ -f "$WHEELHOUSE/requirements.txt" ] || die "no wheelhouse at $WHEELHOUSE: run 'make gpu-wheelhouse' here and carry .cache/gpu-wheelhouse"
say "python $("$PY" -c 'import sys; print(sys.version.split()[0])'), torch $("$PY" -c 'import torch; print(torch.__version__)')"
TORCH_BEFORE=$("$PY" -c 'import torch; print(torch.__version__, torch.__file__)')
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m ensurepip --default-pip >/dev/null 2>&1 || die "$PY has no pip and ensurepip failed"
fi
mkdir -p "$SITE"
say "installing $(grep -c '==' "$WHEELHOUSE/requirements.txt") pinned wheels from $WHEELHOUSE into $SITE"
if ! PIP_NO_INDEX=1 "$PY" -m pip install --disable-pip-version-check -q --no-index --no-deps --upgrade \
        --find-links "$WHEELHOUSE" --target "$SITE" -r "$WHEELHOUSE/requirements.txt"; then
    die "pip could not install the wheelhouse (built for CPython $(python3 -c "import json,sys; print(' / '.join(json.load(open(sys.argv[1]))['python_versions']))" "$WHEELHOUSE/manifest.json" 2>/dev/null || echo '?'))"
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELHOUSE" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" -c "import transformers, peft, tokenizers, accelerate, safetensors, jsonschema, numpy, pytest, IPython.display; \
print('[gpu_check] imports: transformers', transformers.__version__, 'peft', peft.__version__, 'pytest', pytest.__version__)" \
    || die "the installed packages do not import"
TORCH_AFTER=$("$PY" -c 'import torch; print(torch.__version__, torch.__file__)')
[ "$TORCH_BEFORE" = "$TORCH_AFTER" ] || die "torch changed: before '$TORCH_BEFORE', after '$TORCH_AFTER'"
if [ "${1:-}" = "--install-only" ]; then
    say "install-only: done (torch unchanged: $TORCH_AFTER)"
    exit 0
fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || die "torch.cuda.is_available() is False"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader

# ---- 2. the steps, 3. the record --------------------------------------------------------------
exec "$PY" tools/device/gpu_steps.py run --label "$LABEL" --started "$STARTED" ${OUT_DIR:+--copy-to "$OUT_DIR"}
