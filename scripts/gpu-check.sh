#!/usr/bin/env bash
# The GPU check: one prepared run, under 8 minutes, on a machine with an NVIDIA GPU.
#   - installs what it needs: from .gpu-check/whl when present (offline machine; made by
#     scripts/prepare-gpu-check.sh), else `pip install -e '.[gpu,portable,client,test]'`;
#   - runs the `gpu`-marked tests (CuPy vs NumPy parity, DLPack hand-offs, GPU WordPiece);
#   - runs the featurize and tokenize benchmarks on the GPU (and the CPU, same run);
#   - prints a short table. Everything is also written under $OUT (default .gpu-check/out).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CARRY=.gpu-check
OUT=${OUT:-$CARRY/out}
mkdir -p "$OUT"
start=$(date +%s)

if [ -d "$CARRY/whl" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/readability-site "$CARRY"/whl/*.whl || exit 1
    export PYTHONPATH="/tmp/readability-site${PYTHONPATH:+:$PYTHONPATH}"
else
    $PY -m pip install -q -e '.[gpu,portable,client,test]' || exit 1
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[ -f "$CARRY/triton_python_backend_utils.py" ] && export READABILITY_TRITON_PB_UTILS="$PWD/$CARRY/triton_python_backend_utils.py"
[ -d "$CARRY/tokenizer" ] && export READABILITY_TRITON_TOKENIZER_DIR="$PWD/$CARRY/tokenizer"
data=../shared/data/commonlit/train.csv
[ -f "$CARRY/train.csv" ] && data="$CARRY/train.csv"
export READABILITY_TRITON_COMMONLIT="$data"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
$PY - <<'PY' | tee "$OUT/versions.txt"
import importlib
for name in ("numpy", "cupy", "cudf", "torch", "tokenizers", "transformers", "treelite"):
    try:
        print(f"{name:<12} {importlib.import_module(name).__version__}")
    except Exception as exc:  # noqa: BLE001
        print(f"{name:<12} missing ({type(exc).__name__})")
PY

echo "== gpu tests"
timeout 300 $PY -m pytest -q -m gpu -rA -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu-tests.log"
tests_status=${PIPESTATUS[0]}

echo "== featurize benchmark"
timeout 120 $PY benchmarks/bench_featurize.py --data "$data" --json "$OUT/featurize.json" 2>&1 | tee "$OUT/featurize.txt"
echo "== tokenize benchmark"
tok_args=()
[ -n "${READABILITY_TRITON_TOKENIZER_DIR:-}" ] && tok_args=(--tokenizer "$READABILITY_TRITON_TOKENIZER_DIR")
timeout 120 $PY benchmarks/bench_tokenize.py --data "$data" "${tok_args[@]}" --paths cpu,gpu \
    --json "$OUT/tokenize.json" 2>&1 | tee "$OUT/tokenize.txt"

echo "== summary"
$PY - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    path = os.path.join(out, f"{name}.json")
    return json.load(open(path)) if os.path.isfile(path) else None
f = load("featurize")
if f:
    print(f"{'featurize batch':>15} | {'reference':>10} | {'numpy':>10} | {'cupy':>10}   (texts/s, medians)")
    for r in f["results"]:
        cupy = f"{r['cupy']:>10,.0f}" if r.get("cupy") else f"{'-':>10}"
        print(f"{r['batch_size']:>15} | {r['reference']:>10,.0f} | {r['numpy']:>10,.0f} | {cupy}")
t = load("tokenize")
if t:
    print(f"{'tokenize path':>22} | {'batch':>5} | texts/s")
    for r in t["runs"]:
        print(f"{r['path']:>22} | {r['batch']:>5} | {r['texts_per_s']:,.0f}")
PY
grep -E "passed|failed|error" "$OUT/gpu-tests.log" | tail -1
echo "gpu tests exit status: $tests_status; wall time $(( $(date +%s) - start )) s"
exit "$tests_status"
