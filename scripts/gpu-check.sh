#!/usr/bin/env bash
# The GPU kit (scripts/gpu_kit.py): phases that each fit one call on a lent GPU machine.
#   here, once:        .venv/bin/python scripts/gpu_kit.py prepare
#   on the GPU:        bash scripts/gpu-check.sh --phase 0,1        (carry .gpu-check/p01)
#                      bash scripts/gpu-check.sh --phase 2a         (carry .gpu-check/p2a)
#                      bash scripts/gpu-check.sh --phase 2          (carry .gpu-check/p2b, within 30 s)
#   without a GPU:     bash scripts/gpu-check.sh --phase 0,1 --cpu-dry-run
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_kit.py run "$@"
