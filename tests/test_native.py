"""Integration: the seeds' own CPU pipeline, served for real on Triton's own backends: the
`cpu` profile's bert on the ONNX Runtime backend (`onnxruntime_onnx`, model.onnx) or the
PyTorch backend (`pytorch_libtorch`, model.pt), and its forest on the FIL backend (`fil`,
KIND_CPU, the Treelite checkpoint), all built by `make native-backends` from the r24.10
sources and loaded by the test server (Triton 2.51) beside the python backend, which runs
the other steps.

Each route answers what `portable` answers (ONNX Runtime / torch.jit in a Python model,
Treelite's GTIL), within 1e-5: every output selection over tritonclient HTTP, gRPC and curl
with KServe v2 JSON, bad requests beside good ones, a request of 64 texts, 16 clients of
saturating load. Loading the cpu profile's configs is the check that every key in them is
one the backend accepts. `serve` of the same repository heals a kill -9 of tritonserver.
Skipped, saying why, where the backends were not built.
"""

from __future__ import annotations

import os
import types

import numpy as np
import pytest
from harness import output_selections
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
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server.installation import native_backends

pytestmark = pytest.mark.integration
TEXTS = [
    "The cat sat on the mat. It was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor.",
    "Ünïcödé — “quotes”, 漢字とかな, emoji 😀🚀.",
]
SELECTIONS = output_selections()
PLATFORMS = {"onnx": "onnxruntime_onnx", "torchscript": "pytorch_libtorch"}


@pytest.fixture(scope="module")
def native():
    path = native_backends()
    if path is None:
        pytest.skip(
            "Triton's native backends are not built (`make native-backends` builds them from "
            "../shared/third_party, or says why it cannot)"
        )
    if not os.path.isdir(os.path.join(path, "backends", "fil")):
        pytest.skip("the FIL backend is not built (`make native-backends` says why it skipped it)")
    return path


@pytest.fixture(scope="module")
def portable(tiny_artifacts, tmp_path_factory):
    """What the portable profile answers, in process (the runners its Python models run)."""
    return portable_in_process(tiny_artifacts, str(tmp_path_factory.mktemp("portable")), TEXTS)


@pytest.fixture(scope="module", params=["onnx", "torchscript"])
def served(request, native, tiny_artifacts, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"native-{request.param}")
    repo = str(root / "repository")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions("cpu", bert_format=request.param))
    server = start_server(repo, str(root / "server.log"), native=native)
    yield request.param, server
    assert server.stop() == 0


def _log(server) -> str:
    with open(server.log_file, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def test_bert_and_forest_are_served_by_tritons_own_backends_with_every_key_accepted(served):
    fmt, server = served
    import json
    import urllib.request

    def config(model):
        with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/config") as reply:
            return json.loads(reply.read())

    assert config(C.BERT)["platform"] == PLATFORMS[fmt]
    forest = config(C.FOREST)
    assert forest["backend"] == "fil" and forest["instance_group"][0]["kind"] == "KIND_CPU", forest
    score_texts(server, "grpc", TEXTS)
    log = _log(server)
    library = {"onnx": "libtriton_onnxruntime.so", "torchscript": "libtriton_pytorch.so"}[fmt]
    assert library in log and "libtriton_fil.so" in log and "TRITONBACKEND_Initialize: fil" in log, log[-2000:]
    for sign in ("nknown parameter", "unrecognized", "is ignored", "not supported", "newer Treelite version"):
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


def test_sixteen_clients_of_saturating_load_get_no_errors(served, portable):
    _, server = served
    from readability_triton.measure.load import closed_loop, mixed_worker

    texts = TEXTS * 8
    work, close = mixed_worker(
        server.grpc_url,
        "grpc",
        texts,
        np.resize(portable[C.SCORE], len(texts)),
        [],
        bad_every=0,
        tolerance=1e-5,
        sizes=(1, 8),
    )
    try:
        outcomes = closed_loop(work, 16, 15.0)
    finally:
        close()
    failed = [o.error for o in outcomes if not o.ok]
    assert outcomes and not failed and not any(o.wrong for o in outcomes), failed[:3]


def test_serve_heals_a_killed_tritonserver(native, tiny_artifacts, tmp_path):
    """`serve` of the all-native cpu repository (its front door, the FIL forest): kill -9 of
    tritonserver is seen and repaired, and the scores come back the same."""
    import signal
    import time

    from readability_triton.measure.launch import launch_serve

    repo = str(tmp_path / "repository")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions("cpu"))
    with launch_serve(
        repo,
        tmp_path,
        args=["--health-interval", "1"],
        env={"READABILITY_TRITON_NATIVE_BACKENDS": native},
        ready_timeout=240,
    ) as target:
        front = types.SimpleNamespace(http_url=target.http, grpc_url=target.grpc)
        before = score_texts(front, "grpc", TEXTS)
        pid = int(target.status()["pid"])
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        while not (target.ready() and int(target.status().get("pid") or 0) not in (0, pid)):
            assert time.monotonic() - killed < 60 and target.returncode is None, target.said()
            time.sleep(0.2)
        assert target.status()["restarts"] == 1
        after = score_texts(front, "grpc", TEXTS)
        for name in C.OUTPUTS:
            np.testing.assert_array_equal(after[name], before[name])
        assert "exited" in target.said()
        assert target.stop() == 0  # SIGTERM
