"""Integration: `serve`'s front door with real clients (tritonclient HTTP and gRPC, curl),
in front of a real tritonserver: the same answers as tritonserver itself for every output
selection, bad input beside good, the restricted APIs still closed, oversized bodies and
messages refused as the client's error, streams refused, the front's counters, and an
admin key no other local user can read."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
from harness import output_selections
from served import CLIENTS, Failure, assemble_portable, score_texts, start_server

from readability_triton import contracts as C
from readability_triton.measure.honest import Target
from readability_triton.measure.launch import launch_serve
from readability_triton.repository import configs
from readability_triton.server.tritonserver import free_ports
from readability_triton.server.warmup import warm_up

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = [
    "The cat sat on the mat.",
    "Notwithstanding the aforementioned stipulations, the lessee shall pay.",
    "Rivers shape valleys.",
]
LIMIT = 1 << 20  # serve --max-request-bytes in these tests


def _serve(repository: str, folder, key_file: bool = False, extra=()):
    """`serve` on free ports (`launch_serve`), with this file's request limit."""
    return launch_serve(
        repository, folder, args=["--max-request-bytes", str(LIMIT), *extra], key_file=key_file, ready_timeout=240
    )


@pytest.fixture(scope="module")
def repo(tiny_artifacts, tmp_path_factory):
    return assemble_portable(tiny_artifacts, str(tmp_path_factory.mktemp("front") / "repository"))


@pytest.fixture(scope="module")
def served(repo, tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    with _serve(repo, folder) as target:
        yield target, folder
        assert target.stop() == 0


@pytest.fixture(scope="module")
def direct(repo, tmp_path_factory):
    """tritonserver itself on the same repository: what the front door must pass on unchanged."""
    root = tmp_path_factory.mktemp("direct")
    server = start_server(repo, str(root / "server.log"), str(root / "backends"))
    yield server
    server.stop()


def _front(target: Target):
    return types.SimpleNamespace(http_url=target.http, grpc_url=target.grpc)


@pytest.mark.parametrize("client", CLIENTS)
def test_every_output_selection_through_the_front_door_equals_tritonserver(served, direct, client):
    target, _ = served
    want = score_texts(direct, client, TEXTS)
    for outputs in output_selections():
        got = score_texts(_front(target), client, TEXTS, outputs)
        assert set(got) == set(outputs or C.OUTPUTS)
        for name, value in got.items():
            np.testing.assert_array_equal(value, want[name])


@pytest.mark.parametrize("client", CLIENTS)
def test_a_bad_text_beside_good_ones_gets_its_own_error(served, client):
    target, _ = served
    with pytest.raises(Failure) as bad:
        score_texts(_front(target), client, ["A fine text.", ""])
    assert "text 1 of the request holds no words" in bad.value.message
    assert str(bad.value.status) in ("400", "StatusCode.INVALID_ARGUMENT")
    assert score_texts(_front(target), client, TEXTS)[C.SCORE].shape == (3, 1)


def test_the_restricted_apis_stay_closed_without_the_key(served):
    target, _ = served
    index = f"http://{target.http}/v2/repository/index"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(index, method="POST"))
    assert refused.value.code == 403 and "restricted" in refused.value.read().decode()
    wrong = urllib.request.Request(index, method="POST", headers={"admin-key": "not-the-key"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(wrong)
    right = urllib.request.Request(index, method="POST", headers={"admin-key": target.key})
    with urllib.request.urlopen(right) as reply:
        assert {m["name"] for m in json.loads(reply.read())} >= set(configs.repository_models())

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(target.grpc)
    try:
        with pytest.raises(InferenceServerException) as closed:
            client.get_model_repository_index()
        assert "UNAVAILABLE" in str(closed.value.status())
        opened = client.get_model_repository_index(headers={"triton-grpc-protocol-admin-key": target.key})
        assert {m.name for m in opened.models} >= set(configs.repository_models())
    finally:
        client.close()


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/readability/infer",
        "/v2/repository/index",
        "/v2/logging",
        "/v2/trace/setting",
        "/v2/repository/models/readability/load",
    ],
)
def test_a_body_that_is_not_json_gets_400_not_500(served, path):
    """tritonserver 2.51 answers a body that is not JSON with 500 ("failed to parse the
    request JSON buffer"), a server error for the client's fault: the door answers 400,
    with the key (the restricted APIs) and on inference."""
    target, _ = served
    for body in (b"not json", b'{"unclosed": ', b"\xff\xfe"):
        request = urllib.request.Request(
            f"http://{target.http}{path}", data=body, method="POST", headers={"admin-key": target.key}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 400, (path, body, refused.value.code)
        assert "not valid JSON" in json.loads(refused.value.read())["error"]


def _leaks(key: str, where: str) -> bytes:
    script = (
        'ps -eo args; for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do cat "$f" 2>/dev/null | '
        f"tr '\\0' ' '; echo; done; cat {where}/*.log 2>/dev/null; cat /dev/shm/* 2>/dev/null"
    )
    out = subprocess.run(["su", "nobody", "-s", "/bin/sh", "-c", script], capture_output=True, timeout=120).stdout
    return b"\n".join(line for line in out.split(b"\n") if key.encode() in line)


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user (su nobody) needs root")
@pytest.mark.parametrize("source", ["environment", "file"])
def test_no_other_local_user_can_read_the_admin_key(served, repo, tmp_path, source):
    # The check sees a key that is visible: a process with it on its command line.
    control = secrets.token_urlsafe(24)
    visible = subprocess.Popen(["sh", "-c", "sleep 60", control])
    try:
        assert _leaks(control, str(tmp_path))
    finally:
        visible.kill()
        visible.wait()
    with contextlib.ExitStack() as stack:
        if source == "environment":
            target, folder = served
        else:
            folder = tmp_path
            target = stack.enter_context(_serve(repo, folder, key_file=True))
        assert _leaks(target.key, str(folder)) == b""
        assert target.key.encode() not in (folder / "tritonserver.log").read_bytes()
        request = urllib.request.Request(
            f"http://{target.http}/v2/repository/index", method="POST", headers={"admin-key": target.key}
        )
        with urllib.request.urlopen(request) as reply:  # the key still opens the APIs
            assert reply.status == 200
        if source == "file":
            assert target.stop() == 0


def _raw_http(target: Target, head: bytes, body_chunks) -> tuple[int, bytes]:
    host, port = target.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", f"/v2/models/{C.ENSEMBLE}/infer", skip_accept_encoding=True)
    for line in head.decode().splitlines():
        name, value = line.split(": ", 1)
        conn.putheader(name, value)
    conn.endheaders()
    try:
        for chunk in body_chunks:
            conn.send(chunk)
    except OSError:
        pass  # the front door answered and closed early
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, data


def test_oversized_bodies_and_messages_are_the_clients_error(served):
    target, _ = served
    size = 4 * LIMIT
    status, body = _raw_http(
        target, f"Content-Type: application/json\nContent-Length: {size}".encode(), [b"x" * LIMIT] * 4
    )
    assert status == 413 and f"over the limit of {LIMIT} bytes" in json.loads(body)["error"]

    def chunked():
        for _ in range(4):
            yield b"%x\r\n" % LIMIT + b"x" * LIMIT + b"\r\n"
        yield b"0\r\n\r\n"

    status, body = _raw_http(target, b"Content-Type: application/json\nTransfer-Encoding: chunked", chunked())
    assert status == 413 and "readability-triton-" not in body.decode()

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from readability_triton.client.readability import text_input

    client = grpcclient.InferenceServerClient(target.grpc)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.infer(C.ENSEMBLE, [text_input(grpcclient, ["x" * size])])
        assert "RESOURCE_EXHAUSTED" in str(refused.value.status())
        assert "readability-triton-" not in str(refused.value)
        assert client.infer(C.ENSEMBLE, [text_input(grpcclient, TEXTS)]).as_numpy(C.SCORE).shape == (3, 1)
    finally:
        client.close()


def test_a_client_that_expects_100_continue_is_told_at_once(served):
    """`Expect: 100-continue` (curl past its threshold, .NET and Java clients): the door
    answers `100 Continue` as soon as the head is read, and the request is scored; a body
    declared over the limit is refused 413 at once, without a `100 Continue`, so it is never
    sent; an Expect the door does not meet is 417. curl with the header is answered in well
    under its own 1 s wait for the 100."""
    import socket

    from readability_triton.measure.honest import infer_body

    target, _ = served
    host, port = target.http.rsplit(":", 1)
    body = infer_body(TEXTS)

    def head(length: int, expect: str = "100-continue") -> bytes:
        return (
            f"POST /v2/models/{C.ENSEMBLE}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Expect: {expect}\r\nContent-Length: {length}\r\n\r\n"
        ).encode()

    def read_until(sock: socket.socket, marker: bytes, data: bytes = b"") -> bytes:
        while marker not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    with socket.create_connection((host, int(port)), timeout=0.5) as sock:  # 0.5 s: far under curl's 1 s
        sock.sendall(head(len(body)))
        interim = read_until(sock, b"\r\n\r\n")
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim[:80]
        sock.settimeout(60)
        sock.sendall(body)
        answer = read_until(sock, b'"outputs"', interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :])
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(head(4 * LIMIT))
        refused = read_until(sock, b"\r\n\r\n")
        assert refused.startswith(b"HTTP/1.1 413"), refused[:80]
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(head(len(body), "something-else"))
        assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 417")
    started = time.monotonic()
    done = subprocess.run(
        ["curl", "-s", "-X", "POST", f"http://{target.http}/v2/models/{C.ENSEMBLE}/infer"]
        + ["-H", "Content-Type: application/json", "-H", "Expect: 100-continue", "--data-binary", body.decode()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(done.stdout)["outputs"][0]["name"] in C.OUTPUTS
    assert time.monotonic() - started < 0.8, "curl waited for a 100 Continue that did not come"


def test_streams_are_refused_with_a_reason(served):
    target, _ = served
    channel = grpc.insecure_channel(target.grpc)
    try:
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        with pytest.raises(grpc.RpcError) as refused:
            list(stream(iter([b""]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "use ModelInfer" in refused.value.details()
    finally:
        channel.close()


def test_the_health_port_shows_the_front_doors_counts(served):
    target, _ = served
    score_texts(_front(target), "grpc", TEXTS)
    status = target.status()
    assert status["ready"] and status["front"]["accepted"] >= 1 and status["front"]["stated_wait_s"] == 10.0
    with urllib.request.urlopen(f"http://{target.health}/metrics") as reply:
        text = reply.read().decode()
    assert "readability_front_accepted_total " in text and 'readability_front_refused_total{reason="busy"}' in text


def test_requests_whose_client_sent_and_closed_at_once_are_not_computed(served):
    """40 connections that each send a whole request and close at once, the request and the
    close in one burst (TCP_CORK), one at a time, to an idle server: the front door sees
    each close before it sends the request on, so (almost) none is computed for nobody; a
    client that stays is answered as before."""
    import socket

    from readability_triton.measure.abuse import _connect
    from readability_triton.measure.honest import infer_body

    target, _ = served
    before = target.status()["front"]
    body = infer_body(TEXTS)
    host, port = target.http.rsplit(":", 1)
    request = (
        f"POST /v2/models/{C.ENSEMBLE}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    for _ in range(40):
        with _connect(host, int(port), "127.0.0.4") as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            sock.sendall(request)
        time.sleep(0.05)
    deadline = time.monotonic() + 30
    while (after := target.status()["front"])["requests_inside"] and time.monotonic() < deadline:
        time.sleep(0.2)
    accepted = after["accepted"] - before["accepted"]
    computed = after["abandoned_after_send"] - before["abandoned_after_send"]
    print(f"send-and-close: {accepted} accepted, {computed} computed for nobody")
    assert accepted > 0 and computed <= 4, (accepted, computed)
    assert after["requests_inside"] == 0 and after["texts_inside"] == 0
    assert score_texts(_front(target), "http", TEXTS)[C.SCORE].shape[0] == len(TEXTS)


def test_serve_warms_the_pipeline_and_starts_from_its_measured_rate(served, direct):
    target, folder = served
    log = (folder / "serve.log").read_text()
    line = next(line for line in log.splitlines() if "warmed up with" in line)
    assert "warmed up with 81 texts" in line and "the front door's starting rate" in line
    assert log.index("warmed up with") < log.index("serving ")  # before the ports opened
    warm = warm_up(direct.grpc_url, "grpc")  # the same, straight at tritonserver
    assert warm.texts == 81 and warm.rate > 0 and warm.seconds > 0


def test_a_repository_without_the_ensemble_is_a_stated_error_not_a_restart_loop(tiny_artifacts, tmp_path):
    empty = tmp_path / "models"
    empty.mkdir()
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "readability_triton.cli",
            "serve",
            "--repository",
            str(empty),
            *(f"--{name}-port={port}" for name, port in zip(("http", "grpc", "metrics"), free_ports(3))),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and time.monotonic() - started < 30
    assert f"{empty} holds no 'readability' ensemble" in done.stderr and "it is empty" in done.stderr
    assert "readability-triton assemble" in done.stderr


def test_what_the_pipelines_entrance_sheds_the_front_door_sends_again(tiny_artifacts, tmp_path):
    """The entrance (featurize, the served wiring's first step) sheds load at 1 request
    waiting in a later step (MAX_PENDING_REQUESTS 1):
    under 12 clients it refuses often, and the front door sends those requests again, so
    every client, gRPC and HTTP, gets its scores and no "busy" from inside the pipeline."""
    from served import side_by_side

    repository = assemble_portable(tiny_artifacts, str(tmp_path / "repository"))

    def strict(config) -> None:
        config.parameters[C.MAX_PENDING_REQUESTS].string_value = "1"

    configs.edit_config(os.path.join(repository, C.entrance(parallel=False), "config.pbtxt"), strict)
    with _serve(repository, tmp_path) as target:
        front = _front(target)

        def client(protocol: str):
            def calls():
                return [score_texts(front, protocol, TEXTS, [C.SCORE])[C.SCORE] for _ in range(15)]

            return calls

        # Whether the entrance sheds is a race (its gate samples Triton's pending gauge while
        # the front door keeps only ~0.2 s of work inside): rounds until it has, at most 90 s.
        deadline, rounds = time.monotonic() + 90, 0
        while True:
            results = side_by_side([client(CLIENTS[i % len(CLIENTS)]) for i in range(12)])
            rounds += 1
            errors = [r for r in results if isinstance(r, BaseException)]
            assert not errors, errors[:3]
            assert all(len(r) == 15 and all(np.isfinite(s).all() for s in r) for r in results)
            status = target.status()["front"]
            if status["resent"] > 0 or time.monotonic() > deadline:
                break
        print(f"{rounds} rounds of 12 clients x 15 requests: {status['resent']} sent again")
        # the entrance did shed: the test tested something (else say whether its gate could read
        # the server's metrics at all)
        shedding = [
            line
            for line in (tmp_path / "tritonserver.log").read_text(errors="replace").splitlines()
            if "load shedding" in line
        ]
        assert status["resent"] > 0, (status, shedding[-3:])
        with urllib.request.urlopen(f"http://{target.health}/metrics") as reply:
            assert f"readability_front_resent_total {status['resent']}" in reply.read().decode()
        assert target.stop() == 0


def test_sigterm_turns_readiness_false_everywhere_and_answers_requests_during_the_grace(repo, tmp_path):
    """SIGTERM: readiness is false at once on the health port and on both serving ports,
    requests sent during the drain grace are still answered (a load balancer's last ones),
    requests after it are refused as "shutting down", and serve exits 0."""
    from readability_triton.client.readability import triton_client

    grace = 4.0
    with _serve(repo, tmp_path, extra=["--drain-grace", str(grace)]) as target:
        front = _front(target)
        urls = {"http": front.http_url, "grpc": front.grpc_url}
        clients = {protocol: triton_client(url, protocol) for protocol, url in urls.items()}
        try:
            assert all(client.is_server_ready() for _, client in clients.values())
            target.process.terminate()
            signalled = time.monotonic()
            time.sleep(0.3)
            assert not target.ready()
            assert not any(client.is_server_ready() for _, client in clients.values())
            during = {p: score_texts(front, p, TEXTS, [C.SCORE])[C.SCORE] for p in CLIENTS}
            assert time.monotonic() - signalled < grace - 0.5, "the requests were too slow to test the grace"
            assert all(scores.shape == (len(TEXTS), 1) and np.isfinite(scores).all() for scores in during.values())
            time.sleep(max(0.0, signalled + grace + 0.3 - time.monotonic()))
            refused = []
            for protocol in CLIENTS:
                with pytest.raises(Failure) as failure:
                    score_texts(front, protocol, TEXTS, [C.SCORE])
                refused.append(failure.value)
            assert all("shutting down" in f.message for f in refused), refused
            assert {str(f.status) for f in refused} >= {"503", "StatusCode.UNAVAILABLE"}, refused
        finally:
            for _, client in clients.values():
                client.close()
            code = target.process.wait(timeout=90)
    assert code == 0
    log = (tmp_path / "serve.log").read_text()
    assert f"still taking requests for {grace:g} s" in log


# -- the second round of attacks: what the door decides before tritonserver sees anything ------


def _strings(path: str) -> set[str]:
    """The printable runs of 6 or more bytes in a binary (what `strings` prints)."""
    import re

    with open(path, "rb") as handle:
        return {m.decode() for m in re.findall(rb"[\x20-\x7e]{6,}", handle.read())}


def test_every_route_and_method_tritonserver_serves_is_known_to_the_door():
    """tritonserver's HTTP routes (RE2 patterns) and gRPC methods, read off its binary: the
    door gates every inference route among them, passes the rest on, and answers anything
    else itself, so a route a later release adds cannot skip admission unnoticed."""
    from readability_triton.frontdoor import grpc_front, http_front
    from readability_triton.server.installation import triton_home

    found = _strings(os.path.join(triton_home(), "bin", "tritonserver"))
    routes = {s for s in found if s.startswith("/v2")}
    assert routes == set(http_front.ROUTES), routes ^ set(http_front.ROUTES)
    methods = {s for s in found if s.startswith(("/inference.GRPCInferenceService/", "/grpc.health.v1."))}
    known = set(grpc_front.METHODS) | set(grpc_front.NOT_OFFERED)
    assert methods == known, methods ^ known
    model_route = next(r for r in routes if r.startswith("/v2/models/([^/]+)"))
    actions = model_route.split("(?:/(")[1].split(")")[0].split("|")
    inference = {"infer", "generate", "generate_stream"}  # the actions that create an inference request
    assert inference <= set(actions) and set(http_front.INFERENCE_ACTIONS) == inference


def _front_counts(target: Target) -> dict:
    return target.status()["front"]


def test_generate_and_generate_stream_pass_the_gate_and_other_paths_never_reach_tritonserver(served):
    target, _ = served
    before = _front_counts(target)["accepted"]
    for action in ("generate", "generate_stream"):
        request = urllib.request.Request(
            f"http://{target.http}/v2/models/{C.ENSEMBLE}/{action}",
            data=json.dumps({C.TEXT: ["The cat sat on the mat.", "Rivers shape valleys."]}).encode(),
            method="POST",
        )
        with urllib.request.urlopen(request) as reply:
            data = reply.read().decode()
        assert C.SCORE in data and (action == "generate" or data.startswith("data: "))
    assert _front_counts(target)["accepted"] == before + 2
    for path, method in (("/v2/models/readability/infer/x", "POST"), ("/metrics", "GET"), ("//v2", "GET")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"http://{target.http}{path}", method=method))
        assert refused.value.code == 404


def test_words_that_name_a_dead_stub_in_a_clients_request_hold_nothing(served):
    """The attack that once stopped all inference for 120 s: a model named 'is not healthy'
    (tritonserver echoed the name), and an input named like a dead stub's message."""
    target, _ = served
    import grpc

    module, client = __import__("readability_triton.client.readability", fromlist=["x"]).triton_client(
        target.grpc, "grpc"
    )
    from readability_triton.client.readability import text_input

    with pytest.raises(Exception) as named:
        client.infer("is not healthy", [text_input(module, ["x"])])
    assert "NOT_FOUND" in str(named.value)
    words = "Stub process 'bert_0_0' is not healthy"
    tensor = module.InferInput(words, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"x"]], dtype=object))
    with pytest.raises(Exception) as as_input:
        client.infer(C.ENSEMBLE, [tensor])
    assert "INVALID_ARG" in str(as_input.value)
    client.close()
    with grpc.insecure_channel(target.grpc) as channel:
        with pytest.raises(grpc.RpcError) as unknown:
            channel.unary_unary("/inference.GRPCInferenceService/NoSuchMethod")(b"")
        assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
    front = _front_counts(target)
    assert front["holds"] == 0 and front["paused"] is False
    assert target.status()["restarts"] == 0
    assert score_texts(_front(target), "grpc", TEXTS)[C.SCORE].shape == (3, 1)


def test_each_client_error_tritonserver_answers_500_is_a_400_from_the_door(served, direct):
    """Each request of tests/test_frontdoor_wire.py's CLIENT_ERRORS: tritonserver itself
    answers most with 500 (a server error, and a traceback nowhere); through the door each is
    400, says what is wrong, and leaves no traceback in serve's log."""
    from test_frontdoor_wire import CLIENT_ERRORS

    target, folder = served
    direct_codes = {}
    for name, (body, header_length, words) in CLIENT_ERRORS.items():
        head = f"Content-Type: application/json\nContent-Length: {len(body)}"
        if header_length is not None:
            head += f"\nInference-Header-Content-Length: {header_length}"
        status, reply = _raw_http(target, head.encode("utf-8"), [body])
        assert status == 400, (name, status, reply[:200])
        assert words.lower() in json.loads(reply)["error"].lower(), (name, reply[:200])
        if header_length is None or header_length.isascii():
            direct_status, _ = _raw_http(Target(direct.http_url, "", ""), head.encode("utf-8"), [body])
            direct_codes[name] = direct_status
    assert sum(code == 500 for code in direct_codes.values()) >= 9, direct_codes  # what the door spares its clients
    assert "Traceback" not in (folder / "serve.log").read_text(errors="replace")


def test_model_uploads_with_file_content_are_refused_by_default(served):
    target, _ = served
    body = json.dumps({"parameters": {"config": "{}", "file:1/model.py": "aW1wb3J0IG9z"}}).encode()
    request = urllib.request.Request(
        f"http://{target.http}/v2/repository/models/uploaded/load",
        data=body,
        method="POST",
        headers={"admin-key": target.key},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 403 and "--allow-model-uploads" in refused.value.read().decode()
    import grpc
    from tritonclient.grpc import service_pb2

    load = service_pb2.RepositoryModelLoadRequest(model_name="uploaded")
    load.parameters["config"].string_param = "{}"
    load.parameters["file:1/model.py"].bytes_param = b"import os"
    with grpc.insecure_channel(target.grpc) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/RepositoryModelLoad")
        with pytest.raises(grpc.RpcError) as denied:
            call(load.SerializeToString(), metadata=[("triton-grpc-protocol-admin-key", target.key)])
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # a load without files (a model of the repository loaded again) is passed on as before
    again = urllib.request.Request(
        f"http://{target.http}/v2/repository/models/{C.POSTPROCESS}/load",
        data=b"{}",
        method="POST",
        headers={"admin-key": target.key},
    )
    with urllib.request.urlopen(again) as reply:
        assert reply.status == 200


def _bomb(encoding: str, size: int = 1 << 30) -> bytes:
    """`size` bytes of zeros, compressed (1 GiB of zeros: about 1 MB of gzip or deflate)."""
    import zlib

    chunk = bytes(1 << 20)
    if encoding == "br":
        import brotli

        squeezer = brotli.Compressor()
        return b"".join(squeezer.process(chunk) for _ in range(size >> 20)) + squeezer.finish()
    packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    return b"".join(packer.compress(chunk) for _ in range(size >> 20)) + packer.flush()


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:")) / 1024


def test_compression_bombs_are_refused_and_leave_serve_its_size(served):
    """HTTP bodies that inflate to 1 GiB, three at a time: 413 once the inflated bytes pass
    the limit, and serve's memory near where it was. aiohttp's own read (the port's server
    then) buffered 80-130 MB a bomb in 16-32 MiB pieces that glibc kept in the front door's
    thread arena: these 15 left serve 22-25 MB larger (3 runs), and 10-14 MB with small
    pieces and glibc's fixed mmap threshold (4 runs); the door's own server, 3-10 MB (2 runs)."""
    target, _ = served
    pid = target.process.pid
    before = _rss_mb(pid)
    try:
        import brotli  # noqa: F401 - the door inflates br where brotli is installed

        encodings = ["br"] * 9 + ["gzip", "deflate"] * 3
    except ImportError:
        encodings = ["gzip", "deflate"] * 6
    bombs = {encoding: _bomb(encoding) for encoding in set(encodings)}

    def send(encoding: str) -> tuple[int, bytes]:
        body = bombs[encoding]
        head = f"Content-Type: application/json\nContent-Encoding: {encoding}\nContent-Length: {len(body)}"
        return _raw_http(target, head.encode(), [body])

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:  # three at a time: what left the most behind
        for encoding, (status, reply) in zip(encodings, pool.map(send, encodings)):
            assert status == 413 and b"over the limit" in reply, (encoding, status, reply[:200])
    time.sleep(3.0)
    grown = _rss_mb(pid) - before
    print(f"serve's RSS {before:.0f} MB before {len(encodings)} bombs, {grown:+.0f} MB after")
    assert grown < 18, f"serve grew by {grown:.0f} MB"
    assert score_texts(_front(target), "http", TEXTS)[C.SCORE].shape == (3, 1)
