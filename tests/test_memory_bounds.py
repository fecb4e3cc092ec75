"""Integration: a request too large for the python backend's shared memory, straight to
tritonserver (what a deployment without serve's front door gets): memory stays bounded.

serve's front door refuses an oversized body or message before it is read
(tests/test_front_door.py). Behind it, and for users who drop the repository into a
tritonserver of their own, the server's own bound: each python-backend /dev/shm region is
capped (`TritonServer.shm_region_limit`), so a big request that reaches the server fails
instead of growing a region for good.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from served import assemble_portable, start_server, text_rows

from readability_triton import contracts as C
from readability_triton.measure.load import rss_by_process

pytestmark = pytest.mark.integration
BIG = 300 << 20  # a 300 MiB text
TEXTS = ["The cat sat on the mat.", "Notwithstanding the aforementioned stipulations, the lessee shall pay."]


@pytest.fixture(scope="module")
def server(tiny_artifacts, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounds")
    repo = assemble_portable(tiny_artifacts, str(tmp / "repository"))
    server = start_server(repo, str(tmp / "server.log"), str(tmp / "backends"))
    yield server
    server.stop()


def _footprint(server) -> tuple[int, int]:
    """tritonserver's resident memory and its python-backend /dev/shm segments, in MiB."""
    rss = rss_by_process(server.pid).get("tritonserver", 0) // 1024
    shm = sum(os.path.getsize(os.path.join("/dev/shm", n)) for n in server.leftover_shm()) >> 20
    return rss, shm


def _grpc(url, rows, timeout=120):
    import tritonclient.grpc as grpc

    client = grpc.InferenceServerClient(url)
    try:
        tensor = grpc.InferInput(C.TEXT, [len(rows), 1], "BYTES")
        tensor.set_data_from_numpy(text_rows(rows))
        return client.infer(C.ENSEMBLE, [tensor], client_timeout=timeout).as_numpy(C.SCORE)[:, 0]
    finally:
        client.close()


def _http_binary(url, rows, timeout=300):
    import tritonclient.http as http

    client = http.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    try:
        tensor = http.InferInput(C.TEXT, [len(rows), 1], "BYTES")
        tensor.set_data_from_numpy(text_rows(rows), binary_data=True)
        return client.infer(C.ENSEMBLE, [tensor]).as_numpy(C.SCORE)[:, 0]
    finally:
        client.close()


def test_the_capped_regions_refuse_a_300_mb_text_and_memory_comes_back(server):
    """Straight to tritonserver (binary HTTP): the request fails when validate's region
    would have to grow past its cap; the server's memory and /dev/shm return to where they
    were, and it keeps serving."""
    expected = _grpc(server.grpc_url, TEXTS)
    before = _footprint(server)
    big = b"word " * (BIG // 5)
    for _ in range(3):
        with pytest.raises(Exception, match="Failed to increase the shared memory pool size"):
            _http_binary(server.http_url, [big])
    time.sleep(1.0)
    after = _footprint(server)
    assert after[0] - before[0] < 200 and after[1] - before[1] < 5, (before, after)
    assert np.allclose(_grpc(server.grpc_url, TEXTS), expected, atol=1e-6)
