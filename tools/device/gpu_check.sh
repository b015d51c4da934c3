#!/usr/bin/env bash
# Device check of notebook 6's real_gpu path, for a bare CUDA machine: torch installed,
# nothing else, no network. Carry the working tree plus .cache/gpu-wheelhouse (`make gpu-wheelhouse`).
#
#   bash tools/device/gpu_check.sh                 # the whole check (< 8 minutes on one modern card)
#   bash tools/device/gpu_check.sh --install-only  # only install the wheelhouse and import it (CPU test)
#
# 1. installs the wheelhouse with pip --no-index --no-deps into a target folder on PYTHONPATH (the
#    machine's torch is never replaced);
# 2. builds the Qwen-shaped random-init checkpoint (Qwen2.5-0.5B's architecture, Qwen2.5's chat template
#    and token counts) with `python -m tools.tiny_model --qwen-shaped`;
# 3. runs notebook 6 with RUN_MODE=real_gpu on it for both candidate sets: once with the automatic
#    dtype (bf16 where the card supports it natively), once with fp16 + GradScaler forced;
# 4. validates both records against the schema and checks the invariants (540,672 trainable LoRA
#    parameters, dtype / scaler as chosen, nothing left allocated between candidate sets, ...);
# 5. prints the key figures beside the reference document's (labelled not comparable: random-init);
# 6. runs two online GRPO steps of lesson 7's real_gpu preset (LoRA on the attention projections, bf16 where
#    native) on the same checkpoint: trainable count, optimizer state, frozen base (tools.online.run.preset_check).
#
# Environment: GPU_PYTHON (interpreter with torch; default python3), GPU_WHEELHOUSE (default
# .cache/gpu-wheelhouse), GPU_SITE (install target; default .cache/gpu-site), GPU_CHECK_LABEL (record
# label prefix; default gpu_check), GPU_CHECK_OUT (copy records, snapshot and log there, e.g. $OUT).
# Exit status: 0 all checks passed; 1 a check failed; 2 the set-up failed (no torch, no CUDA, wheelhouse).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$(pwd)
PY=${GPU_PYTHON:-python3}
WHEELHOUSE=${GPU_WHEELHOUSE:-$ROOT/.cache/gpu-wheelhouse}
SITE=${GPU_SITE:-$ROOT/.cache/gpu-site}
PREFIX=${GPU_CHECK_LABEL:-gpu_check}
OUT_DIR=${GPU_CHECK_OUT:-}
CHECKPOINT=$ROOT/.cache/qwen2.5-0.5b-shaped
RESULTS=$ROOT/benchmarks/results/local/pt_grpo  # non-reference labels (tools.project_runtime.record_relative_path)
STARTED=$(date +%s)
FAILED=0

say() { printf '[gpu_check %4ss] %s\n' "$(( $(date +%s) - STARTED ))" "$*"; }
die() { say "SET-UP FAILED: $*"; exit 2; }

# ---- 1. packages ------------------------------------------------------------------------------
command -v "$PY" >/dev/null 2>&1 || die "no interpreter $PY (set GPU_PYTHON)"
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
"$PY" -c "import transformers, peft, tokenizers, accelerate, safetensors, jsonschema, numpy, IPython.display; \
print('[gpu_check] imports: transformers', transformers.__version__, 'peft', peft.__version__, 'tokenizers', tokenizers.__version__)" \
    || die "the installed packages do not import"
TORCH_AFTER=$("$PY" -c 'import torch; print(torch.__version__, torch.__file__)')
[ "$TORCH_BEFORE" = "$TORCH_AFTER" ] || die "torch changed: before '$TORCH_BEFORE', after '$TORCH_AFTER'"
if [ "${1:-}" = "--install-only" ]; then
    say "install-only: done (torch unchanged: $TORCH_AFTER)"
    exit 0
fi

# ---- 2. hardware and checkpoint ---------------------------------------------------------------
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || die "torch.cuda.is_available() is False"
"$PY" - <<'EOF' || die "could not take the hardware snapshot"
import json
from tools.training_mechanism_runtime import cuda_hardware_snapshot
snapshot = cuda_hardware_snapshot()
print("[gpu_check] hardware:", json.dumps(snapshot))
json.dump(snapshot, open(".cache/gpu_check_hardware.json", "w"), indent=2)
EOF
NATIVE_BF16=$("$PY" -c "import torch; print(torch.cuda.is_bf16_supported(including_emulation=False))")
AUTO_DTYPE=float16; [ "$NATIVE_BF16" = "True" ] && AUTO_DTYPE=bfloat16
say "native bf16: $NATIVE_BF16 -> automatic dtype $AUTO_DTYPE"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
say "building the Qwen-shaped checkpoint (random init, bf16, ~1 GB)"
timeout 300 "$PY" -m tools.tiny_model --qwen-shaped --out "$CHECKPOINT" || die "could not build the Qwen-shaped checkpoint"

# ---- 3. the two runs --------------------------------------------------------------------------
run_case() {  # label dtype_env expected_dtype expected_choice
    local label=$1 force=$2 dtype=$3 choice=$4
    say "run $label: RUN_MODE=real_gpu GRPO_REAL_GPU_DTYPE=${force:-<auto>}"
    rm -f "$RESULTS/pt-grpo-real-model-update_${label}.json"
    if ! GRPO_MODEL_ID="$CHECKPOINT" GRPO_REAL_GPU_DTYPE="$force" timeout 240 \
            "$PY" tools/device/gpu_check.py run-notebook --label "$label"; then
        say "FAIL: the notebook raised (run $label)"; FAILED=1
    fi
    local record="$RESULTS/pt-grpo-real-model-update_${label}.json"
    if [ -f "$record" ]; then
        "$PY" tools/device/gpu_check.py verify "$record" --expect-dtype "$dtype" --expect-choice "$choice" || FAILED=1
        "$PY" tools/device/gpu_check.py report "$record"
        [ -n "$OUT_DIR" ] && cp "$record" "$OUT_DIR/"
    else
        say "FAIL: no record written for $label"; FAILED=1
    fi
}
[ -n "$OUT_DIR" ] && mkdir -p "$OUT_DIR" && cp .cache/gpu_check_hardware.json "$OUT_DIR/"
run_case "${PREFIX}_auto_${AUTO_DTYPE}" "" "$AUTO_DTYPE" auto
run_case "${PREFIX}_forced_float16" float16 float16 forced

# ---- 3b. lesson 7's real_gpu preset: two online GRPO steps with LoRA on q/k/v/o, bf16 where native ----------
say "lesson 7: two steps of the real_gpu preset on the Qwen-shaped checkpoint"
if timeout 180 "$PY" -m tools.cli.online --preset-check real_gpu --model "$CHECKPOINT" > .cache/gpu_check_nb07.json; then
    say "lesson 7 preset: all checks passed ($(tr -d '\n ' < .cache/gpu_check_nb07.json | grep -o '"trainable_parameters":[0-9]*'))"
else
    say "FAIL: lesson 7's real_gpu preset check"; cat .cache/gpu_check_nb07.json; FAILED=1
fi
[ -n "$OUT_DIR" ] && cp .cache/gpu_check_nb07.json "$OUT_DIR/"

ELAPSED=$(( $(date +%s) - STARTED ))
say "total ${ELAPSED} s (budget 480 s)"
[ "$ELAPSED" -le 480 ] || { say "FAIL: over the 8-minute budget"; FAILED=1; }
if [ "$FAILED" -ne 0 ]; then say "RESULT: FAILED"; exit 1; fi
say "RESULT: all checks passed"
