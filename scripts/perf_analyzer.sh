#!/usr/bin/env bash
# Put Triton's perf_analyzer into the venv: .venv/bin/perf_analyzer (part of `make`'s set-up).
#
# perf_analyzer is not on PyPI as a package of its own (the `perf-analyzer` project holds only
# a placeholder) and the newer tritonclient wheels do not carry it, but the tritonclient
# 2.51.0 manylinux wheel does (tritonclient-2.51.0.data/data/bin/perf_analyzer), the same
# release as the test server. It needs libb64.so.0d and libcudart.so.12, which the
# nvidia-pytriton wheel ships in nvidia_pytriton.libs/ under hashed names. This unpacks the
# binary into .venv/share/perf_analyzer/ with links to those two libraries by their sonames
# and writes a wrapper that runs it with them, leaving the venv's own tritonclient as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
VENV=$(dirname "$(dirname "$PY")")
share="$VENV/share/perf_analyzer"
version=2.51.0
say() { echo "perf_analyzer: $*" >&2; }

if [ -x "$share/perf_analyzer" ] && [ -f "$share/.version-$version" ]; then
  exit 0
fi
work=$(mktemp -d /tmp/perf-analyzer.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$work" "tritonclient==$version" \
  2>"$work/pip.log" || { tail -5 "$work/pip.log" >&2; say "cannot download the tritonclient $version wheel"; exit 1; }
rm -rf "$share" && mkdir -p "$share/lib"
"$PY" - "$work"/tritonclient-*.whl "$share/perf_analyzer" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".data/data/bin/perf_analyzer"))
    with wheel.open(name) as source, open(sys.argv[2], "wb") as target:
        shutil.copyfileobj(source, target)
EOF
chmod +x "$share/perf_analyzer"
libs=$("$PY" -c 'import os, pytriton; print(os.path.realpath(os.path.join(os.path.dirname(pytriton.__file__), "..", "nvidia_pytriton.libs")))')
ln -sf "$(ls "$libs"/libb64-*.so.0d)" "$share/lib/libb64.so.0d"
ln -sf "$(ls "$libs"/libcudart-*.so.12*)" "$share/lib/libcudart.so.12"
cat > "$VENV/bin/perf_analyzer" <<EOF
#!/bin/sh
# Triton's perf_analyzer $version (from the tritonclient $version wheel), with the two
# libraries it needs from the nvidia-pytriton wheel: scripts/perf_analyzer.sh.
LD_LIBRARY_PATH="$(realpath "$share/lib")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$(realpath "$share/perf_analyzer")" "\$@"
EOF
chmod +x "$VENV/bin/perf_analyzer"
"$VENV/bin/perf_analyzer" --version >/dev/null 2>&1 || { "$VENV/bin/perf_analyzer" --version 2>&1 | head -5 >&2; say "does not run"; exit 1; }
touch "$share/.version-$version"
say "installed $VENV/bin/perf_analyzer ($version)"
