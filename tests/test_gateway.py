"""Integration: oversized requests, with memory bounded.

Triton 2.51 has no request-size limit of its own (HTTP bodies are read whole; gRPC takes up
to 2 GiB), so the deployment puts one in front: `deploy/nginx/templates/readability.conf.template`,
run here by Debian's nginx (`.ci/run` installs it) exactly as the nginx image renders it.
Behind it, the server's own bound: each python-backend /dev/shm region is capped
(`TritonServer.shm_region_limit`), so a big request that does reach the server fails
instead of growing a region for good.
"""
from __future__ import annotations

import json
import os
import socket
import string
import subprocess
import time
import urllib.request

import numpy as np
import pytest
from served import assemble_portable, start_server, system_tool, text_rows

from readability_triton import contracts as C
from readability_triton.client.load import rss_by_process
from readability_triton.server.tritonserver import free_port

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, "deploy", "nginx", "templates", "readability.conf.template")
BIG = 300 << 20  # a 300 MiB text
TEXTS = ["The cat sat on the mat.", "Notwithstanding the aforementioned stipulations, the lessee shall pay."]


@pytest.fixture(scope="module")
def server(tiny_artifacts, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway")
    repo = assemble_portable(tiny_artifacts, str(tmp / "repository"))
    server = start_server(repo, str(tmp / "server.log"), str(tmp / "backends"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(server, tmp_path_factory):
    nginx = system_tool("nginx", "/usr/sbin/nginx", "nginx-light")
    tmp = tmp_path_factory.mktemp("nginx")
    ports = {"GATEWAY_HTTP_PORT": free_port(), "GATEWAY_GRPC_PORT": free_port()}
    with open(TEMPLATE, encoding="utf-8") as handle:
        rendered = string.Template(handle.read()).substitute(
            TRITON_HOST="127.0.0.1", TRITON_HTTP_PORT=server.http_port, TRITON_GRPC_PORT=server.grpc_port,
            MAX_BODY_SIZE="16m", **{k: f"127.0.0.1:{v}" for k, v in ports.items()})
    (tmp / "conf.d").mkdir()
    (tmp / "conf.d" / "readability.conf").write_text(rendered)
    # As root, nginx's workers would run as nobody, who cannot write the request bodies it
    # buffers into this test's private folder.
    user = "user root root;\n" if os.geteuid() == 0 else ""
    (tmp / "nginx.conf").write_text(
        f"{user}pid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\nworker_processes 1;\nevents {{}}\n"
        f"http {{\n  access_log off;\n  client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n"
        f"  include {tmp}/conf.d/*.conf;\n}}\n")
    process = subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-g", "daemon off;"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", ports["GATEWAY_HTTP_PORT"]), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read().decode()
            time.sleep(0.1)
    yield f"127.0.0.1:{ports['GATEWAY_HTTP_PORT']}", f"127.0.0.1:{ports['GATEWAY_GRPC_PORT']}"
    process.terminate()
    process.wait(timeout=20)


def _footprint(server) -> tuple[int, int]:
    """tritonserver's resident memory and its python-backend /dev/shm segments, in MiB."""
    rss = rss_by_process(server.pid).get("tritonserver", 0) // 1024
    shm = sum(os.path.getsize(os.path.join("/dev/shm", n)) for n in server.leftover_shm()) >> 20
    return rss, shm


def _http_json(url, texts, timeout=120):
    body = json.dumps({"inputs": [{"name": C.TEXT, "datatype": "BYTES", "shape": [len(texts), 1],
                                   "data": list(texts)}]}).encode()
    request = urllib.request.Request(f"http://{url}/v2/models/{C.ENSEMBLE}/infer", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        out = {o["name"]: o["data"] for o in json.loads(reply.read())["outputs"]}
    return np.asarray(out[C.SCORE], dtype=np.float32)


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


def test_the_gateway_passes_requests_and_refuses_oversized_bodies_before_the_server_reads_them(server, gateway):
    http_url, grpc_url = gateway
    direct = _grpc(server.grpc_url, TEXTS)
    assert np.allclose(_http_json(http_url, TEXTS), direct, atol=1e-6)
    assert np.allclose(_grpc(grpc_url, TEXTS), direct, atol=1e-6)
    biggest = ["x" * (C.DEFAULT_MAX_TEXT_BYTES - 10) + " words"] * C.MAX_BATCH_SIZE[C.ENSEMBLE]
    assert _http_json(http_url, biggest, timeout=300).shape == (64,)  # the largest valid request passes
    before = _footprint(server)
    big = b"word " * (BIG // 5)
    for send in (lambda: _http_binary(http_url, [big]),
                 lambda: _http_json(http_url, [big.decode()]),
                 lambda: _grpc(grpc_url, [big])):
        with pytest.raises(Exception) as refused:
            send()
        assert "413" in str(refused.value) or "Request Entity Too Large" in str(refused.value), refused.value
    after = _footprint(server)
    assert after[0] - before[0] < 50 and after[1] - before[1] < 5, (before, after)
    assert server.process.poll() is None
    assert np.allclose(_grpc(grpc_url, TEXTS), direct, atol=1e-6)


def test_behind_no_gateway_the_capped_regions_refuse_a_300_mb_text_and_memory_comes_back(server):
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


def test_the_template_uses_only_the_variables_it_documents():
    """envsubst in the nginx image replaces ${NAME}; a name the docs do not list would be
    left empty there."""
    with open(TEMPLATE, encoding="utf-8") as handle:
        names = {m.group("braced") for m in string.Template.pattern.finditer(handle.read()) if m.group("braced")}
    assert names == {"TRITON_HOST", "TRITON_HTTP_PORT", "TRITON_GRPC_PORT", "GATEWAY_HTTP_PORT",
                     "GATEWAY_GRPC_PORT", "MAX_BODY_SIZE"}, names
