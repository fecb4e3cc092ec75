#!/usr/bin/env bash
# The GPU kit (scripts/gpu_kit.py): two self-contained calls on a lent GPU machine, each
# under one deadline.
#   here, once:        .venv/bin/python scripts/gpu_kit.py prepare    (then `... plan`: phases, deadline, carry)
#   on the GPU:        bash scripts/gpu-check.sh --phase 0,1      (call 1: carry .gpu-check/p01)
#                      bash scripts/gpu-check.sh --phase 2a,2     (call 2: carry .gpu-check/p2)
#   without a GPU:     bash scripts/gpu-check.sh --phase 0,1 --cpu-dry-run
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_kit.py run "$@"
