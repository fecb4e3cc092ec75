#!/usr/bin/env bash
# Build the image: `make image PROFILE=portable` -> readability-triton:24.10-portable.
#
#   PROFILE         gpu | hybrid | cpu | portable | portable-gpu (default portable)
#   TRITON_VERSION  the release the image is for (default 24.10)
#   BASE_IMAGE      the tritonserver image to build FROM (default: NVIDIA's, nvcr.io/nvidia/
#                   tritonserver:<TRITON_VERSION>-py3, when REGISTRY_BASE=1; otherwise the
#                   stand-in below, which needs no registry)
#   ARTIFACTS       an artifact set inside the build context to assemble into /models
#                   (default .cache/demo-artifacts, built first as `make demo` builds it;
#                   ARTIFACTS=deploy/no-artifacts for an image that serves a mounted repository)
#   TAG             the image's tag (default readability-triton:<TRITON_VERSION>-<PROFILE>)
#
# Where no registry is reachable (these machines: neither Docker Hub nor nvcr.io), it builds
# a stand-in for NVIDIA's image first: Debian bookworm made with debootstrap from Debian's
# mirror, imported into Docker, with the tritonserver of the nvidia-pytriton wheel (Triton
# 2.51, the core of 24.10) in NVIDIA's layout (deploy/standin/Dockerfile). Each is tagged by a
# hash of what makes it and rebuilt only when that changes. The image then installs from a
# wheelhouse resolved here with the project's pins (`pip download`: this machine's indexes
# and CA), so that the build itself needs no network, as at an air-gapped site.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${PROFILE:-portable}
TRITON_VERSION=${TRITON_VERSION:-24.10}
PY=${PY:-.venv/bin/python}
TAG=${TAG:-readability-triton:${TRITON_VERSION}-${PROFILE}}
CACHE=.cache/image
say() { echo "make image: $*" >&2; }
hash_of() { sha256sum | cut -c1-16; }

if ! docker info >/dev/null 2>&1; then
  say "no Docker engine answers (docker info). Install docker.io and start dockerd, e.g.:"
  say "  dockerd --iptables=false --ip-masq=false --bridge=none --data-root /tmp/docker &"
  exit 2
fi
started=$(date +%s)
mkdir -p "$CACHE"

if [ -z "${BASE_IMAGE:-}" ] && [ "${REGISTRY_BASE:-0}" = 1 ]; then
  BASE_IMAGE="nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3"
fi
if [ -z "${BASE_IMAGE:-}" ]; then
  if [ "$TRITON_VERSION" != 24.10 ]; then
    say "the stand-in base carries Triton 2.51 (24.10); for ${TRITON_VERSION} give BASE_IMAGE (or REGISTRY_BASE=1)"
    exit 2
  fi
  # 1. Debian bookworm (glibc 2.36), with the shared libpython3.11 the 3.11 stub links.
  packages="python3,python3-pip,libpython3.11,ca-certificates,libgomp1"
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  base="readability-triton-bookworm:$(printf 'bookworm minbase %s' "$packages" | hash_of)"
  if ! docker image inspect "$base" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { say "debootstrap is not installed (apt-get install debootstrap)"; exit 2; }
    root=$(mktemp -d)
    say "debootstrap bookworm ($packages) from $mirror ..."
    debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -20 "$CACHE/debootstrap.log" >&2; rm -rf "$root"; exit 1; }
    tar -C "$root" -c . | docker import - "$base" >/dev/null
    rm -rf "$root"
  fi
  # 2. The stand-in: the wheel's tritonserver on that base, in NVIDIA's layout, with the
  #    ONNX Runtime and FIL backends `make native-backends` built (the PyTorch backend, with
  #    its gigabyte of libtorch, stays out: the cpu image serves model.onnx).
  pytriton=$("$PY" -c 'import os, pytriton; print(os.path.dirname(pytriton.__file__))')
  version=$("$PY" -c 'from importlib import metadata; print(metadata.version("nvidia-pytriton"))')
  native=${READABILITY_TRITON_NATIVE_BACKENDS:-$HOME/.cache/readability-triton/native-backends}
  natives=()
  for backend in onnxruntime fil; do
    [ -d "$native/backends/$backend" ] && natives+=("$backend")
  done
  [ ${#natives[@]} -eq 2 ] || say "the stand-in gets no native backends (${natives[*]:-none} of onnxruntime, fil built: make native-backends); it serves the portable profile only"
  natives_hash=$(for backend in "${natives[@]}"; do find -L "$native/backends/$backend" -type f ! -name 'libtritonserver*' -print0 | sort -z | xargs -0 sha256sum; done | hash_of)
  BASE_IMAGE="readability-triton-standin:24.10-$( (cat deploy/standin/Dockerfile; echo "$base $version $natives_hash") | hash_of)"
  if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    context="$CACHE/standin"
    rm -rf "$context" && mkdir -p "$context/native"
    cp deploy/standin/Dockerfile "$context/"
    cp -a "$pytriton/tritonserver" "$context/tritonserver"
    cp -a "$pytriton/../nvidia_pytriton.libs" "$context/libs"
    for backend in "${natives[@]}"; do  # the files, not the links (libtritonserver.so is in /opt/tritonserver/lib)
      mkdir -p "$context/native/$backend"
      find -L "$native/backends/$backend" -maxdepth 1 -type f ! -name 'libtritonserver*' -exec cp -L {} "$context/native/$backend/" \;
      (cd "$context/native/$backend" && for lib in libonnxruntime.so.*.*; do [ -f "$lib" ] && ln -sf "$lib" libonnxruntime.so.1 && ln -sf "$lib" libonnxruntime.so; done; true)
    done
    say "building the stand-in base $BASE_IMAGE (nvidia-pytriton $version on $base) ..."
    docker build --network host --build-arg "BASE=$base" -t "$BASE_IMAGE" "$context" >"$CACHE/standin.log" 2>&1 \
      || { tail -30 "$CACHE/standin.log" >&2; exit 1; }
    rm -rf "$context"
  fi
fi

# 3. The wheelhouse: everything the image installs for this profile and release, resolved
#    here under the project's pins and the release's (numpy < 2 for 24.10's stub).
extras=$("$PY" -m readability_triton.repository.releases extras --triton-version "$TRITON_VERSION" --profile "$PROFILE")
"$PY" -m readability_triton.repository.releases constraints --triton-version "$TRITON_VERSION" --profile "$PROFILE" \
  > "$CACHE/constraints.txt"
read -r -a required <<< "$("$PY" -m readability_triton.repository.releases requirements --triton-version "$TRITON_VERSION" --profile "$PROFILE")"
key=$( (cat setup.cfg "$CACHE/constraints.txt"; echo "$extras ${required[*]}") | hash_of)
wheelhouse="$CACHE/wheelhouse-$key"
if [ ! -f "$wheelhouse/.complete" ]; then
  say "resolving the wheelhouse for [$extras] ${required[*]} ..."
  rm -rf "$wheelhouse" && mkdir -p "$wheelhouse"
  "$PY" -m pip download --quiet --dest "$wheelhouse" -c "$CACHE/constraints.txt" \
    ".[$extras]" "${required[@]}" setuptools wheel 2>"$CACHE/wheelhouse.log" || { tail -20 "$CACHE/wheelhouse.log" >&2; exit 1; }
  rm -f "$wheelhouse"/readability_triton-*  # the package itself is built from the source in the image
  touch "$wheelhouse/.complete"
fi

# 4. What goes in: the artifact set (the demo's, built as `make demo` builds it, when none is
#    given) and the shim that keeps the admin key off tritonserver's command line, compiled
#    here (the base may have no compiler; NVIDIA's has none).
artifacts=${ARTIFACTS:-.cache/demo-artifacts}
if [ "$artifacts" = .cache/demo-artifacts ] && [ ! -f "$artifacts/manifest.json" ]; then
  say "no artifact set given: building the demo's in $artifacts (as make demo does; minutes) ..."
  data=()
  [ -f ../shared/data/commonlit/train.csv ] && data=(--data ../shared/data/commonlit/train.csv)
  "$PY" -m readability_triton.cli build-demo --out "$artifacts" "${data[@]}" >&2
fi
keyshim="$CACHE/keyshim"
rm -rf "$keyshim" && mkdir -p "$keyshim"
"$PY" -c 'import sys; from readability_triton.server.keyshim import build; build(sys.argv[1])' \
  "$keyshim/keyshim.so"
# The wheelhouse reaches pip over loopback (the build runs on the host's network), so that no
# layer of the image keeps a copy of it.
port=$("$PY" -c 'from readability_triton.server.processes import free_port; print(free_port())')
"$PY" -m http.server "$port" --bind 127.0.0.1 --directory "$wheelhouse" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
say "building $TAG FROM $BASE_IMAGE (profile $PROFILE, artifacts $artifacts) ..."
docker build --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "TRITON_VERSION=$TRITON_VERSION" \
  --build-arg "PROFILE=$PROFILE" --build-arg "ARTIFACTS=$artifacts" --build-arg "KEYSHIM=$keyshim" \
  --build-arg "PIP_FIND_LINKS=http://127.0.0.1:$port/" --build-arg PIP_NO_INDEX=1 \
  -t "$TAG" . >"$CACHE/image.log" 2>&1 || { tail -40 "$CACHE/image.log" >&2; exit 1; }
size=$(docker image inspect "$TAG" --format '{{.Size}}')
say "built $TAG: $((size / 1000000)) MB, in $(( $(date +%s) - started )) s (log: $CACHE/image.log)"
