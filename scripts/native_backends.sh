#!/usr/bin/env bash
# `make native-backends`: Triton's own PyTorch, ONNX Runtime and FIL backends (r24.10, the
# release of the test server's core, Triton 2.51), built offline from the sources in
# ../shared/third_party/triton-r24.10 (with the backend, common and core repositories they
# build against) and ../shared/third_party/fil-r24.10, into a folder the server loads them
# from:
#
#   .cache/native-backends/<hash>/backends/pytorch/libtriton_pytorch.so      (against this venv's torch)
#   .cache/native-backends/<hash>/backends/onnxruntime/libtriton_onnxruntime.so
#   .cache/native-backends/<hash>/backends/fil -> ../../fil-<hash>/fil       (libtriton_fil.so, CPU only)
#
# beside what each loads through its RPATH ($ORIGIN), as in NVIDIA's images: libonnxruntime
# 1.21.1 in onnxruntime/, links to the venv's libtorch in pytorch/, and in both a
# libtritonserver.so link to the wheel's (hashed) library, which the backends load by that
# name (the loader finds it is the one tritonserver already holds).
#
# and points ~/.cache/readability-triton/native-backends at it (where `serve` and the tests
# look; READABILITY_TRITON_NATIVE_BACKENDS overrides). The hash covers every input (the
# source archives, torch's version, ONNX Runtime's, this script), so a rebuild happens only
# when one changes (FIL has a hash of its own: its 1-2 minute build is not redone when torch
# moves, nor the others when a FIL source does). ONNX Runtime's C API headers come from Debian trixie's libonnxruntime-dev
# 1.21.0 and its library from the onnxruntime 1.21.1 wheel, both unpacked into the build's
# own folder (never into the project's .venv). FIL (RAPIDS' fil_backend with rapids-triton,
# Treelite 4.3.0 linked in statically, CPU only) needs CMake >= 3.26.4, which Debian bookworm
# does not have: pip installs cmake 3.31 and ninja into a venv of the build's own; the
# rapids-cmake and CPM.cmake it would download are given from the sources, and the ccache it
# names as its compiler launcher is a pass-through script. Where a source archive or a build
# tool is missing it says so and stops with status 0 (FIL alone is skipped where only its
# sources are missing): the tests that need the backends then skip, saying why. Needs
# (Debian): cmake build-essential rapidjson-dev python3-dev googletest (`.ci/run` installs
# them).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
SRC=${TRITON_SOURCES:-../shared/third_party/triton-r24.10}
ROOT=${NATIVE_BACKENDS_ROOT:-.cache/native-backends}
LINK=${READABILITY_TRITON_NATIVE_BACKENDS:-$HOME/.cache/readability-triton/native-backends}
ORT_WHEEL=1.21.1
ORT_DEV=1.21.0
say() { echo "native-backends: $*" >&2; }
skip() { say "not built: $*"; exit 0; }
hash_of() { sha256sum | cut -c1-16; }

[ -d "$SRC" ] || skip "no Triton sources at $SRC (../shared/third_party)"
for archive in backend common core pytorch_backend onnxruntime_backend; do
  [ -f "$SRC/$archive.tar.gz" ] || skip "no $SRC/$archive.tar.gz"
done
for tool in cmake make g++ dpkg-deb apt-get; do
  command -v "$tool" >/dev/null 2>&1 || skip "no $tool (apt-get install cmake build-essential)"
done
[ -f /usr/include/rapidjson/rapidjson.h ] || skip "no RapidJSON headers (apt-get install rapidjson-dev)"
[ -d /usr/src/googletest ] || skip "no /usr/src/googletest (apt-get install googletest)"
ls /usr/include/python3*/Python.h >/dev/null 2>&1 || skip "no Python headers for CMake (apt-get install python3-dev)"
torch_dir=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) \
  || skip "no torch in $PY (the PyTorch backend builds against its headers and libtorch)"
torch_version=$("$PY" -c 'import torch; print(torch.__version__)')

key=$( (sha256sum "$SRC"/*.tar.gz | cut -c1-64; echo "torch $torch_version ort $ORT_WHEEL/$ORT_DEV"; cat "$0") | hash_of)
out="$ROOT/$key"
mkdir -p "$(dirname "$LINK")"

# FIL: built into a folder of its own (its own hash), linked into the backends folder below.
FIL_SRC=${FIL_SOURCES:-../shared/third_party/fil-r24.10}
fil_dir=""
build_fil() {
  local archives=(fil_backend rapids-triton rapids-cmake CPM.cmake mdspan json rapidjson treelite-4.3.0)
  [ -d "$FIL_SRC" ] || { say "FIL not built: no sources at $FIL_SRC"; return 0; }
  for name in "${archives[@]}"; do
    ls "$FIL_SRC/$name"*.tar.gz >/dev/null 2>&1 || { say "FIL not built: no $FIL_SRC/$name*.tar.gz"; return 0; }
  done
  (cd "$FIL_SRC" && sha256sum --quiet -c SHA256SUMS) || { say "FIL not built: $FIL_SRC/SHA256SUMS does not match"; return 0; }
  local fil_key fil_out work_fil started_fil
  fil_key=$( (sha256sum "$FIL_SRC"/*.tar.gz "$SRC"/{backend,common,core}.tar.gz | cut -c1-64; cat "$0") | hash_of)
  fil_out="$ROOT/fil-$fil_key"
  if [ -f "$fil_out/.complete" ]; then fil_dir="$fil_out/fil"; return 0; fi
  started_fil=$(date +%s)
  work_fil=$(mktemp -d /tmp/native-fil.XXXXXX)
  mkdir -p "$work_fil/src" "$work_fil/bin" "$work_fil/build/cmake"
  for archive in "$FIL_SRC"/*.tar.gz; do tar -C "$work_fil/src" -xzf "$archive"; done
  for archive in backend common core; do tar -C "$work_fil/src" -xzf "$SRC/$archive.tar.gz"; done
  "$PY" -m venv "$work_fil/tools" && "$work_fil/tools/bin/pip" install --quiet "cmake==3.31.10" ninja \
    >"$work_fil/pip.log" 2>&1 || { tail -5 "$work_fil/pip.log" >&2; rm -rf "$work_fil"; say "FIL not built: pip cannot install cmake 3.31"; return 0; }
  printf '#!/bin/sh\nexec "$@"\n' > "$work_fil/bin/ccache" && chmod +x "$work_fil/bin/ccache"
  sed 's/1.0.0-development-version/0.38.5/' "$work_fil/src/CPM.cmake/cmake/CPM.cmake" \
    > "$work_fil/build/cmake/CPM_0.38.5.cmake"
  local s="$work_fil/src" rapids="$work_fil/src/rapids-cmake/rapids-cmake"
  say "building the FIL backend (CPU only, Treelite 4.3.0 static) ..."
  PATH="$work_fil/bin:$work_fil/tools/bin:/usr/bin:/bin" cmake -S "$s/fil_backend" -B "$work_fil/build" -GNinja \
    -DCMAKE_BUILD_TYPE=Release -DTRITON_ENABLE_GPU=OFF -DTRITON_ENABLE_STATS=ON -DTRITON_FIL_USE_TREELITE_STATIC=ON \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DTRITON_COMMON_REPO_TAG=r24.10 -DTRITON_CORE_REPO_TAG=r24.10 \
    -DTRITON_BACKEND_REPO_TAG=r24.10 -DRAPIDS_TRITON_REPO_TAG=branch-24.04 \
    "-DCPM_Treelite_SOURCE=$s/treelite-4.3.0/cpp_src" "-DCPM_rapids_triton_SOURCE=$s/rapids-triton" \
    "-DCPM_rapidjson_SOURCE=$s/rapidjson" -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
    "-DFETCHCONTENT_SOURCE_DIR_REPO-COMMON=$s/common" "-DFETCHCONTENT_SOURCE_DIR_REPO-CORE=$s/core" \
    "-DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND=$s/backend" -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest \
    "-DFETCHCONTENT_SOURCE_DIR_NLOHMANN_JSON=$s/json" "-DFETCHCONTENT_SOURCE_DIR_MDSPAN=$s/mdspan" \
    "-DCMAKE_MODULE_PATH=$rapids" "-Drapids-cmake-dir=$rapids" \
    -DPython3_ROOT_DIR=/usr -DPython3_FIND_STRATEGY=LOCATION >"$work_fil/fil.log" 2>&1 \
    && PATH="$work_fil/bin:$work_fil/tools/bin:/usr/bin:/bin" cmake --build "$work_fil/build" -j "$(nproc)" \
       --target triton_fil >>"$work_fil/fil.log" 2>&1 || { tail -30 "$work_fil/fil.log" >&2; rm -rf "$work_fil"; exit 1; }
  rm -rf "$fil_out" && mkdir -p "$fil_out/fil"
  cp "$work_fil/build/libtriton_fil.so" "$fil_out/fil/"
  ln -sf "$tritonserver_lib" "$fil_out/fil/libtritonserver.so"
  printf 'Triton r24.10 FIL backend (fil_backend 87e48ba4, Treelite 4.3.0 static, CPU only), built %s\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$fil_out/BUILD"
  touch "$fil_out/.complete"
  rm -rf "$work_fil"
  fil_dir="$fil_out/fil"
  say "built the FIL backend in $(( $(date +%s) - started_fil )) s"
}
# The backends load libtritonserver.so by that name; the wheel ships it under a hashed one.
libs=$("$PY" -c 'import os, pytriton; print(os.path.join(os.path.dirname(pytriton.__file__), "..", "nvidia_pytriton.libs"))')
tritonserver_lib=$(realpath "$(ls "$libs"/libtritonserver-*.so)")
link_fil() {
  build_fil
  rm -f "$1/backends/fil"
  if [ -n "$fil_dir" ]; then ln -sfn "$(realpath "$fil_dir")" "$1/backends/fil"; fi
}

if [ -f "$out/.complete" ]; then
  link_fil "$out"
  ln -sfn "$(realpath "$out")" "$LINK"
  say "up to date: $out (torch $torch_version, ONNX Runtime $ORT_WHEEL${fil_dir:+, FIL})"
  exit 0
fi
started=$(date +%s)
work=$(mktemp -d /tmp/native-backends.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
for archive in backend common core pytorch_backend onnxruntime_backend; do
  tar -C "$work/src" -xzf "$SRC/$archive.tar.gz"
done

# ONNX Runtime: the C API headers of Debian trixie's libonnxruntime-dev, the library of the
# PyPI wheel (same 1.21 API), in folders of this build.
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/ort-dev" "$work/ort-wheel"
echo "deb http://deb.debian.org/debian trixie main" > "$work/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$work/apt/lists"
          -o "Dir::Cache=$work/apt/cache" -o "APT::Get::List-Cleanup=0")
apt-get "${apt_opts[@]}" -qq update >"$work/apt.log" 2>&1 || { tail -5 "$work/apt.log" >&2; skip "apt-get update for trixie failed"; }
(cd "$work" && apt-get "${apt_opts[@]}" -qq download "libonnxruntime-dev=$ORT_DEV*" >>"$work/apt.log" 2>&1) \
  || { tail -5 "$work/apt.log" >&2; skip "cannot download libonnxruntime-dev $ORT_DEV from trixie"; }
dpkg-deb -x "$work"/libonnxruntime-dev_*.deb "$work/ort-dev"
ort_include=$(dirname "$(find "$work/ort-dev" -name onnxruntime_c_api.h | head -1)")
"$PY" -m pip download --quiet --no-deps --dest "$work/ort-wheel" "onnxruntime==$ORT_WHEEL" 2>"$work/pip.log" \
  || { tail -5 "$work/pip.log" >&2; skip "cannot download the onnxruntime $ORT_WHEEL wheel"; }
"$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$work"/ort-wheel/*.whl "$work/ort-wheel"
build="$work/out"
ort="$build/backends/onnxruntime"
pt="$build/backends/pytorch"
mkdir -p "$ort" "$pt"
cp "$work"/ort-wheel/onnxruntime/capi/libonnxruntime.so.* "$ort/"
(cd "$ort" && lib=$(ls libonnxruntime.so.*) && ln -sf "$lib" libonnxruntime.so.1 && ln -sf "$lib" libonnxruntime.so)
for lib in "$torch_dir"/lib/*.so*; do ln -sf "$lib" "$pt/"; done
ln -sf "$tritonserver_lib" "$ort/libtritonserver.so"
ln -sf "$tritonserver_lib" "$pt/libtritonserver.so"

# CMake must find Debian's Python 3.11 with its headers (not the venv's).
common=(-DCMAKE_BUILD_TYPE=Release -DTRITON_ENABLE_GPU=OFF -DTRITON_ENABLE_STATS=ON
        -DFETCHCONTENT_FULLY_DISCONNECTED=ON
        "-DFETCHCONTENT_SOURCE_DIR_REPO-COMMON=$work/src/common" "-DFETCHCONTENT_SOURCE_DIR_REPO-CORE=$work/src/core"
        "-DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND=$work/src/backend" -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest
        -DPython3_ROOT_DIR=/usr -DPython3_FIND_STRATEGY=LOCATION)
jobs=$(nproc)
say "building the PyTorch backend against torch $torch_version ..."
PATH=/usr/bin:/bin cmake -S "$work/src/pytorch_backend" -B "$work/build-pytorch" "${common[@]}" \
  -DTRITON_PYTORCH_ENABLE_TORCHVISION=OFF \
  "-DTRITON_PYTORCH_INCLUDE_PATHS=$torch_dir/include;$torch_dir/include/torch/csrc/api/include" \
  "-DTRITON_PYTORCH_LIB_PATHS=$torch_dir/lib" >"$work/pytorch.log" 2>&1 \
  && PATH=/usr/bin:/bin cmake --build "$work/build-pytorch" -j "$jobs" --target triton-pytorch-backend \
     >>"$work/pytorch.log" 2>&1 || { tail -30 "$work/pytorch.log" >&2; exit 1; }
cp "$work/build-pytorch/libtriton_pytorch.so" "$pt/"
say "building the ONNX Runtime backend against ONNX Runtime $ORT_DEV headers / $ORT_WHEEL library ..."
PATH=/usr/bin:/bin cmake -S "$work/src/onnxruntime_backend" -B "$work/build-onnxruntime" "${common[@]}" \
  "-DTRITON_ONNXRUNTIME_INCLUDE_PATHS=$ort_include" "-DTRITON_ONNXRUNTIME_LIB_PATHS=$ort" \
  -DTRITON_BUILD_ONNXRUNTIME_VERSION="$ORT_DEV" >"$work/onnxruntime.log" 2>&1 \
  && PATH=/usr/bin:/bin cmake --build "$work/build-onnxruntime" -j "$jobs" --target triton-onnxruntime-backend \
     >>"$work/onnxruntime.log" 2>&1 || { tail -30 "$work/onnxruntime.log" >&2; exit 1; }
cp "$work/build-onnxruntime/libtriton_onnxruntime.so" "$ort/"
cat > "$build/BUILD" <<EOF
Triton r24.10 backends, built $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/native_backends.sh
pytorch: against torch $torch_version ($torch_dir)
onnxruntime: headers libonnxruntime-dev $ORT_DEV (Debian trixie), library onnxruntime $ORT_WHEEL (PyPI wheel)
EOF
rm -rf "$out" && mkdir -p "$ROOT" && mv "$build" "$out"
touch "$out/.complete"
link_fil "$out"
ln -sfn "$(realpath "$out")" "$LINK"
say "built $out in $(( $(date +%s) - started )) s${fil_dir:+ (with FIL)}"
