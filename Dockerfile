# A tritonserver image serving the readability ensemble, for a chosen Triton release.
#
#   readability-triton build-demo --out artifacts          # or your own trained artifacts
#   docker build -t readability-triton:24.10-gpu .                             # defaults below
#   docker build -t readability-triton:26.08-gpu --build-arg TRITON_VERSION=26.08 .
#   docker build -t readability-triton:24.10-cpu --build-arg PROFILE=cpu .     # no CUDA wheels
#   docker run --gpus all --shm-size=1g -p8000:8000 -p8001:8001 -p8002:8002 readability-triton:24.10-gpu
#
# TRITON_VERSION: the nvcr.io/nvidia/tritonserver:<YY.MM>-py3 base (24.10 or later). What
#   differs between releases (Python, CUDA major, whether the python backend's stub takes
#   numpy 2, FIL's config keys) is in readability_triton/triton/releases.py, which this file
#   asks for the pins and the configs. The tests run Triton 24.10's core.
# PROFILE: gpu (Python steps on CuPy; libtorch/ONNX Runtime and FIL on the GPU), hybrid
#   (Python steps on the CPU, models on the GPU), cpu (everything on the CPU: no CUDA wheels
#   are installed) or portable (bert and forest as Python models).
# ARTIFACTS: an artifact set (manifest.json, ...), assembled into /models at build time. A
#   folder without manifest.json (e.g. deploy/no-artifacts) builds an image that serves a
#   repository mounted at /models instead: -v "$PWD/models:/models:ro".
# --shm-size: each Python model instance talks to tritonserver through a region in
#   /dev/shm (1 MiB to start, growing with the batch); Docker's default of 64 MiB is too
#   small for five Python models under load: give 1g (Kubernetes: an emptyDir in memory).
ARG TRITON_VERSION=24.10
FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3

ARG TRITON_VERSION
ARG PROFILE=gpu
ARG ARTIFACTS=artifacts
ARG UID=10001

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /opt/readability-triton
COPY pyproject.toml setup.cfg README.md ./
COPY readability_triton ./readability_triton
COPY backends ./backends

# The package with the extras of PROFILE, numpy that this release's stub can take (24.10:
# numpy < 2, held for every later install by a constraint), CuPy for the image's CUDA major
# (gpu profile), then cuDF where pip has it for this Python (WordPiece on the GPU; without
# it preprocess tokenizes on the CPU and logs why). The ranges come from releases.py.
# hadolint ignore=DL3013
RUN release() { python3 -m readability_triton.triton.releases "$1" --triton-version "${TRITON_VERSION}" \
        --profile "${PROFILE}"; } \
    && read -r -a required <<< "$(release requirements)" \
    && read -r -a optional <<< "$(release optional)" \
    && release numpy > /opt/readability-triton/numpy-constraint.txt \
    && export PIP_CONSTRAINT=/opt/readability-triton/numpy-constraint.txt \
    && python3 -m pip install --no-cache-dir ".[$(release extras)]" "${required[@]}" \
    && for req in "${optional[@]}"; do \
         python3 -m pip install --no-cache-dir "${req}" \
           || echo "no ${req} for this Python: preprocess will tokenize on the CPU"; \
       done
# Fail the build, not the first request, if the image's numpy or CuPy cannot work here.
RUN python3 -m readability_triton.triton.releases check --triton-version "${TRITON_VERSION}" --profile "${PROFILE}"

# The repository, assembled for this release (configs differ, e.g. FIL's keys from 25.09).
COPY ${ARTIFACTS} /opt/readability-triton/artifacts
RUN mkdir -p /models \
    && if [ -f /opt/readability-triton/artifacts/manifest.json ]; then \
         readability-triton assemble --profile "${PROFILE}" --triton-version "${TRITON_VERSION}" \
           --artifacts /opt/readability-triton/artifacts --out /models --force; \
       else echo "no artifact set in ${ARTIFACTS}: mount a model repository at /models"; fi \
    && useradd --uid "${UID}" --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin readability \
    && chown -R "${UID}" /models

USER ${UID}
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=30s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4)"]
# summary_latencies: the p50/p90/p99 summaries the Grafana dashboard and the HPA read.
CMD ["tritonserver", "--model-repository=/models", "--disable-auto-complete-config", \
     "--metrics-config=summary_latencies=true", "--exit-timeout-secs=30"]
