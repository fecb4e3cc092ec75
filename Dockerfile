# A tritonserver image serving the readability ensemble under `readability-triton serve`
# (supervised, self-healing, draining), for a chosen Triton release and profile.
#
#   make image PROFILE=portable          # builds readability-triton:24.10-portable here (scripts/image.sh)
#   docker build -t readability-triton:24.10-gpu .                                   # NVIDIA's base
#   docker build -t readability-triton:26.08-cpu --build-arg TRITON_VERSION=26.08 --build-arg PROFILE=cpu .
#   docker run --gpus all --shm-size=1g --stop-timeout 60 -p8000:8000 -p8001:8001 -p8002:8002 -p8003:8003 \
#       -e READABILITY_TRITON_ADMIN_KEY=... readability-triton:24.10-gpu
#
# BASE_IMAGE: the tritonserver image to build FROM: NVIDIA's image of TRITON_VERSION by
#   default; where nvcr.io cannot be reached, the stand-in `make image` builds (Triton 2.51 on
#   Debian, deploy/standin/Dockerfile). The build checks the python-backend stub it finds there.
# TRITON_VERSION: the release (24.10 or later). What differs between releases (CUDA major,
#   whether the stub takes numpy 2, FIL's config keys, the ensemble's wiring) is in
#   readability_triton/repository/releases.py, which this file asks for the pins and the configs.
# PROFILE: gpu (Python steps on CuPy; ONNX Runtime/libtorch and FIL on the GPU), hybrid
#   (Python steps on the CPU, models on the GPU), cpu (everything on the CPU), portable (bert
#   and forest as Python models: ONNX Runtime and Treelite, no torch) or portable-gpu (every
#   step in the python backend on the GPU: torch on CUDA and CuPy). Each installs only what
#   its Python models run, with every heavy dependency pinned (`releases constraints`).
# ARTIFACTS: an artifact set (manifest.json, ...), assembled into /models at build time. A
#   folder without manifest.json (deploy/no-artifacts) builds an image that serves a
#   repository mounted at /models instead: -v "$PWD/models:/models:ro" (serve refuses to
#   start, saying so, while /models holds no ensemble).
# KEYSHIM: a folder with a built keyshim.so (readability_triton/server/keyshim.c: it hands
#   tritonserver the admin key without putting it on its command line, where every local
#   user can read it). Without one, the build compiles it with the base's C compiler, or
#   installs gcc with apt-get to compile it and removes it again. `make image` builds it on
#   the host.
# PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX: where pip finds packages,
#   for sites that reach only a mirror or nothing at all (`make image` resolves a wheelhouse
#   on the host and serves it on loopback: PIP_FIND_LINKS=http://127.0.0.1:PORT/ with
#   PIP_NO_INDEX=1, so the build needs no other network and no layer keeps the wheels).
# At run time: the admin key of the model-repository API from the environment
#   (READABILITY_TRITON_ADMIN_KEY, or a file named by READABILITY_TRITON_ADMIN_KEY_FILE; in
#   Kubernetes a Secret), never from the image; ports 8000/8001 are serve's front door
#   (tritonserver itself listens on 127.0.0.1 inside); ports and
#   the listening address from READABILITY_TRITON_{HTTP,GRPC,METRICS,HEALTH}_PORT and
#   READABILITY_TRITON_ADDRESS. On SIGTERM serve drains and exits 0: give it --stop-timeout
#   60 (Docker's default of 10 s is shorter than a drain). --shm-size: each Python model
#   instance talks to tritonserver through a region in /dev/shm (capped at 64 MiB each);
#   Docker's 64 MiB default is too small for six of them under load: give 1g.
ARG TRITON_VERSION=24.10
ARG BASE_IMAGE=nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3
# checkov:skip=CKV_DOCKER_7: the base is BASE_IMAGE, by default NVIDIA's image tagged with the release
FROM ${BASE_IMAGE}

ARG TRITON_VERSION
ARG PROFILE=gpu
ARG ARTIFACTS=artifacts
ARG KEYSHIM=deploy/no-artifacts
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ARG UID=10001

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /opt/readability-triton
COPY pyproject.toml setup.cfg README.md ./
COPY readability_triton ./readability_triton
COPY backends ./backends

# The package with the extras of PROFILE and the release's pins (held as a pip constraint for
# every install: numpy < 2 for 24.10's stub, ONNX Runtime, Treelite, tokenizers, CuPy for the
# image's CUDA major), then cuDF where pip has it for this Python (WordPiece on the GPU;
# without it preprocess tokenizes in CuPy and logs why).
# hadolint ignore=DL3013,DL3042
RUN release() { python3 -m readability_triton.repository.releases "$1" --triton-version "${TRITON_VERSION}" \
        --profile "${PROFILE}"; } \
    && read -r -a required <<< "$(release requirements)" \
    && read -r -a optional <<< "$(release optional)" \
    && release constraints > /opt/readability-triton/constraints.txt \
    && export PIP_CONSTRAINT=/opt/readability-triton/constraints.txt \
    && python3 -m pip install --no-cache-dir ".[$(release extras)]" "${required[@]}" \
    && for req in "${optional[@]}"; do \
         python3 -m pip install --no-cache-dir "${req}" \
           || echo "no ${req} for this Python: preprocess will tokenize on the GPU in CuPy"; \
       done
# Fail the build, not the first request, if the image's stub cannot load this Python or the
# numpy/CuPy it has: the stub in the image, the libpython it links, the packages.
RUN python3 -m readability_triton.repository.releases check --triton-version "${TRITON_VERSION}" --profile "${PROFILE}"

# The admin-key shim: given, or compiled here (see KEYSHIM above).
COPY ${KEYSHIM} /opt/readability-triton/keyshim/
# hadolint ignore=DL3008
RUN out=/opt/readability-triton/keyshim/keyshim.so; source=readability_triton/server/keyshim.c; \
    if [ ! -f "$out" ]; then \
      if command -v cc >/dev/null; then cc -shared -fPIC -O2 -o "$out" "$source" -ldl; \
      else apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev \
        && cc -shared -fPIC -O2 -o "$out" "$source" -ldl \
        && apt-get purge -y -qq gcc libc6-dev && apt-get autoremove -y -qq && rm -rf /var/lib/apt/lists/*; fi; \
    fi; test -f "$out"

# The repository, assembled for this release (configs differ, e.g. FIL's keys from 25.09),
# with the canary's answers the health check compares.
COPY ${ARTIFACTS} /opt/readability-triton/artifacts
RUN mkdir -p /models \
    && if [ -f /opt/readability-triton/artifacts/manifest.json ]; then \
         readability-triton assemble --profile "${PROFILE}" --triton-version "${TRITON_VERSION}" \
           --artifacts /opt/readability-triton/artifacts --out /models --force; \
       else echo "no artifact set in ${ARTIFACTS}: mount a model repository at /models"; fi \
    && useradd --uid "${UID}" --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin readability \
    && chown -R "${UID}" /models

USER ${UID}
ENV READABILITY_TRITON_HOME=/opt/tritonserver \
    READABILITY_TRITON_KEYSHIM=/opt/readability-triton/keyshim/keyshim.so \
    READABILITY_TRITON_ADDRESS=0.0.0.0 \
    READABILITY_TRITON_HTTP_PORT=8000 \
    READABILITY_TRITON_GRPC_PORT=8001 \
    READABILITY_TRITON_METRICS_PORT=8002 \
    READABILITY_TRITON_HEALTH_PORT=8003 \
    HOME=/tmp
EXPOSE 8000 8001 8002 8003
STOPSIGNAL SIGTERM
# serve's readiness: right answers now (a dead stub, a wrong answer or a restart in progress
# make it fail; load does not). Liveness for an orchestrator: /livez on the same port.
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=2 \
    CMD ["/bin/sh", "-c", "readability-triton health --serve \"127.0.0.1:${READABILITY_TRITON_HEALTH_PORT}\" --check ready || exit 1"]
# serve runs as PID 1: it drains and stops tritonserver on SIGTERM, reaps what a dying server
# leaves, and restarts tritonserver on evidence that it is dead, stuck or answering wrong.
CMD ["readability-triton", "serve", "--repository", "/models"]
