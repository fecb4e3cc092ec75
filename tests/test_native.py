"""Integration: the seeds' own routes, served for real: the `cpu` profile's bert on Triton's
own ONNX Runtime backend (`onnxruntime_onnx`, model.onnx) and PyTorch backend
(`pytorch_libtorch`, model.pt), built by `make native-backends` from the r24.10 sources and
loaded by the test server (Triton 2.51) beside the python backend. The other steps are the
Python models; the forest, which needs RAPIDS' FIL (not built here), runs as the Python
model of the portable profile on the same checkpoint.tl (what `serve` does).

Each route answers what `portable` answers (ONNX Runtime / torch.jit in a Python model,
Treelite's GTIL), within 1e-5: every output selection over tritonclient HTTP, gRPC and curl
with KServe v2 JSON, bad requests beside good ones, a request of 64 texts. Loading the cpu
profile's configs is the check that every key in them is one the backend accepts.
Skipped, saying why, where the backends were not built.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from served import (
    CLIENTS,
    Failure,
    portable_in_process,
    score_texts,
    side_by_side,
    start_server,
)

from readability_triton import contracts as C
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.server.backends import python_forest_view
from readability_triton.server.installation import native_backends

pytestmark = pytest.mark.integration
TEXTS = [
    "The cat sat on the mat. It was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor.",
    "Ünïcödé — “quotes”, 漢字とかな, emoji 😀🚀.",
]
SELECTIONS = [None] + [list(s) for k in (1, 2, 3) for s in itertools.combinations(C.OUTPUTS, k)]
PLATFORMS = {"onnx": "onnxruntime_onnx", "torchscript": "pytorch_libtorch"}


@pytest.fixture(scope="module")
def native():
    path = native_backends()
    if path is None:
        pytest.skip(
            "Triton's native backends are not built (`make native-backends` builds them from "
            "../shared/third_party, or says why it cannot)"
        )
    return path


@pytest.fixture(scope="module")
def portable(tiny_artifacts, tmp_path_factory):
    """What the portable profile answers, in process (the runners its Python models run)."""
    return portable_in_process(tiny_artifacts, str(tmp_path_factory.mktemp("portable")), TEXTS)


@pytest.fixture(scope="module", params=["onnx", "torchscript"])
def served(request, native, tiny_artifacts, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"native-{request.param}")
    repo = str(root / "repository")
    repository.assemble(tiny_artifacts, repo, "cpu", bert_format=request.param)
    view = python_forest_view(repo, str(root / "view"))
    server = start_server(view, str(root / "server.log"), native=native)
    yield request.param, server
    assert server.stop() == 0


def _log(server) -> str:
    with open(server.log_file, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def test_bert_is_served_by_tritons_own_backend_with_every_key_accepted(served):
    fmt, server = served
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{C.BERT}/config") as reply:
        config = json.loads(reply.read())
    assert config["platform"] == PLATFORMS[fmt], config
    score_texts(server, "grpc", TEXTS)
    log = _log(server)
    library = {"onnx": "libtriton_onnxruntime.so", "torchscript": "libtriton_pytorch.so"}[fmt]
    assert library in log, log[-2000:]
    for sign in ("nknown parameter", "unrecognized", "is ignored", "not supported"):
        assert sign not in log, sign


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: "none" if s is None else "+".join(s))
def test_every_output_selection_answers_what_portable_answers(served, portable, client, selection):
    _, server = served
    got = score_texts(server, client, TEXTS, selection)
    assert sorted(got) == sorted(C.OUTPUTS if selection is None else selection)
    for name, array in got.items():
        np.testing.assert_allclose(np.asarray(array, np.float32).reshape(-1), portable[name], atol=1e-5, err_msg=name)


def test_bad_requests_beside_good_ones(served, portable):
    _, server = served
    bad = [b"broken \xff\xfe utf-8", b"", b"   \t  "]
    calls = [lambda t=t: score_texts(server, "grpc", [t], [C.SCORE]) for t in TEXTS * 3]
    calls += [lambda b=b: score_texts(server, "grpc", [b], [C.SCORE]) for b in bad]
    results = side_by_side(calls)
    for i, result in enumerate(results[: len(TEXTS) * 3]):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result[C.SCORE][0, 0], portable[C.SCORE][i % len(TEXTS)], atol=1e-5)
    for result in results[len(TEXTS) * 3 :]:
        assert isinstance(result, Failure) and ("UTF-8" in result.message or "no words" in result.message), result


@pytest.mark.parametrize("client", CLIENTS)
def test_a_request_of_64_texts(served, portable, client):
    _, server = served
    n = C.MAX_BATCH_SIZE[C.ENSEMBLE]
    texts = [TEXTS[i % len(TEXTS)] for i in range(n)]
    got = score_texts(server, client, texts, [C.SCORE])[C.SCORE]
    np.testing.assert_allclose(np.asarray(got, np.float32).reshape(-1), np.resize(portable[C.SCORE], n), atol=1e-5)


def test_the_view_serves_the_forest_from_the_same_checkpoint(served):
    _, server = served
    forest = os.path.join(server.repository, C.FOREST, "1", "checkpoint.tl")
    assert os.path.islink(forest) and os.path.realpath(forest).endswith(
        os.path.join("repository", C.FOREST, "1", "checkpoint.tl")
    )
    assert configs.read_config(os.path.join(server.repository, C.FOREST, "config.pbtxt")).backend == "python"
