#!/usr/bin/env bash
# Build .gpu-check/{p01,p2}, what the GPU kit's two calls carry (scripts/gpu_kit_prepare.py).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python scripts/gpu_kit.py prepare "$@"
