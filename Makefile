# The two commands: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# CPU environment: the pinned CPU build of PyTorch (see constraints/cpu.txt).
CONSTRAINTS := -c constraints/cpu.txt
EXTRAS := serve,portable,torchscript,native,onnx,server,client,train,demo,plot,test
STAMP  := $(VENV)/.installed-$(shell cat setup.cfg constraints/cpu.txt | cksum | cut -d' ' -f1)
TOOLS  := .venv-tools
TOOLS_STAMP := $(TOOLS)/.installed-$(shell cksum < constraints/tools.txt | cut -d' ' -f1)
DEMO_ARTIFACTS := .cache/demo-artifacts
DEMO_REPO      := .cache/demo-repository

.PHONY: demo test check lint deploy-check venv clean gpu-check image native-backends wheel

venv: $(STAMP)

$(STAMP): setup.cfg constraints/cpu.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	PY=$(PY) bash scripts/perf_analyzer.sh
	rm -f $(VENV)/.installed-*
	touch $@

# DATA=path/to/train.csv: train the demo on that CommonLit-layout CSV (default: the shared
# ../shared/data/commonlit/train.csv where it exists, else a generated corpus).
DATA ?=
demo: $(STAMP)
	$(VENV)/bin/readability-triton demo --artifacts $(DEMO_ARTIFACTS) --repository $(DEMO_REPO) $(if $(DATA),--data "$(DATA)")

# The installable wheel, dist/readability_triton-<version>-py3-none-any.whl: the package, the
# Python models' model.py files and their data, no dependencies (docs/deployment.md installs
# it, with the extras a profile needs, into a tritonserver's Python).
wheel:
	test -x $(PY) || $(MAKE) venv
	rm -rf build dist/readability_triton-*.whl
	$(PIP) wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .
	@ls dist/readability_triton-*.whl

# Lint (ruff: errors, style, import order; its formatter) and type-check (mypy) the code
# first: seconds, before the minutes of pytest. Every setting is in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The image and the deployment, statically (no Docker engine or cluster here): hadolint and
# checkov on the Dockerfile, checkov on the Kubernetes manifests; tests/test_deploy.py
# validates them against the Kubernetes schemas.
$(TOOLS_STAMP): constraints/tools.txt
	test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --upgrade pip
	$(TOOLS)/bin/python -m pip install --quiet -r constraints/tools.txt
	rm -f $(TOOLS)/.installed-*
	touch $@

CHECKOV := $(TOOLS)/bin/checkov --quiet --compact --skip-download

deploy-check: $(TOOLS_STAMP)
	$(TOOLS)/bin/hadolint Dockerfile
	$(CHECKOV) --framework dockerfile --file Dockerfile
	$(CHECKOV) --framework kubernetes --directory deploy

# Triton's own PyTorch and ONNX Runtime backends (r24.10) for the test server, built from
# ../shared/third_party and cached by a hash of their inputs (scripts/native_backends.sh);
# where sources or build tools are missing it says so and the tests that need them skip.
native-backends: $(STAMP)
	PY=$(PY) bash scripts/native_backends.sh

test: lint deploy-check native-backends
	$(PY) -m pytest -q

# The edit loop: lint, then every test not marked integration, docker or slow (no
# tritonserver, no whole-program runs, no image, no model training or export, no pass over
# the whole CommonLit set): under a minute. `make test` stays the whole suite.
check: lint
	$(PY) -m pytest -q -m "not integration and not docker and not slow"

gpu-check:
	bash scripts/gpu-check.sh

# The image (scripts/image.sh): `make image PROFILE=portable` -> readability-triton:24.10-portable,
# on a stand-in for NVIDIA's base where nvcr.io cannot be reached (BASE_IMAGE=... to choose).
PROFILE ?= portable
TRITON_VERSION ?= 24.10
image: $(STAMP)
	PROFILE=$(PROFILE) TRITON_VERSION=$(TRITON_VERSION) PY=$(PY) bash scripts/image.sh

clean:
	rm -rf $(VENV) $(TOOLS) .cache .pytest_cache .hypothesis
