# A tritonserver image serving the readability ensemble.
#
#   readability-triton build-demo --out artifacts          # or your own trained artifacts
#   docker build -t readability-triton --build-arg PROFILE=gpu .
#   docker run --gpus all -p8000:8000 -p8001:8001 -p8002:8002 readability-triton
#
# Base: Triton 24.10 (Triton 2.51.0, the same core the test suite runs), which carries the
# python, pytorch (libtorch) and FIL backends. PROFILE: gpu (default), hybrid or cpu;
# `portable` also works and needs neither libtorch nor FIL.
ARG TRITON_VERSION=24.10
FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3

ARG PROFILE=gpu
ARG ARTIFACTS=artifacts
# Extras for the Python models: `serve` (tokenizers) always; CuPy for KIND_GPU Python steps
# (gpu profile); `portable` (torch, treelite 4.x) only for the portable profile.
ARG EXTRAS=serve
# (--build-arg CUPY= for a CPU-only image)
ARG CUPY=cupy-cuda12x>=13

WORKDIR /opt/readability-triton
COPY pyproject.toml setup.cfg README.md ./
COPY readability_triton ./readability_triton
COPY backends ./backends
RUN python3 -m pip install --no-cache-dir ".[${EXTRAS}]" ${CUPY:+"$CUPY"}
# cuDF >= 25.04 (WordPieceVocabulary) puts WordPiece on the GPU. Where pip has none for the
# image's Python, the preprocess model runs its exact CPU path and logs why at load; the
# other steps stay on the GPU.
RUN python3 -m pip install --no-cache-dir "cudf-cu12>=25.04" \
    || echo "no cudf-cu12>=25.04 for this Python: preprocess will tokenize on the CPU"

# The python backend runs model.py with the image's python3, where the package now is.
COPY ${ARTIFACTS} /opt/readability-triton/artifacts
RUN readability-triton assemble --profile ${PROFILE} --artifacts /opt/readability-triton/artifacts \
        --out /models --force

EXPOSE 8000 8001 8002
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
    CMD curl -fs http://127.0.0.1:8000/v2/health/ready || exit 1
CMD ["tritonserver", "--model-repository=/models", "--disable-auto-complete-config"]
