"""serve's health port (`server.probes`): what each endpoint answers, and that liveness and
readiness never wait for the front door's loop (a flood of connections keeps it busy; the
image's HEALTHCHECK gives a probe 5 s)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from readability_triton.server.probes import health_endpoint
from readability_triton.server.tritonserver import free_port

FRONT = {"accepted": 3, "answered": 2, "refused": {"busy": 1}, "rate_texts_per_s": 12.5}


@pytest.fixture
def probes():
    asked: list[bool] = []

    def status(front: bool) -> dict:
        asked.append(front)
        now = {"live": True, "ready": True, "phase": "serving", "problem": None, "canary": None}
        if front:
            time.sleep(1.0)  # the front door's loop, busy
            now["front"] = FRONT
        return now

    port = free_port()
    httpd = health_endpoint(port, status)
    try:
        yield f"http://127.0.0.1:{port}", asked
    finally:
        httpd.shutdown()
        httpd.server_close()


def _get(url: str) -> tuple[int, str, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode(), time.perf_counter() - started
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), time.perf_counter() - started


def test_liveness_and_readiness_answer_without_the_front_doors_snapshot(probes):
    base, asked = probes
    for path, body in (("/livez", "live\n"), ("/readyz", "ready\n")):
        status, text, seconds = _get(base + path)
        assert (status, text) == (200, body)
        assert seconds < 0.5, (path, seconds)  # never waited for the busy loop
    assert asked == [False, False]


def test_healthz_and_metrics_carry_the_front_doors_counts(probes):
    base, asked = probes
    status, text, _ = _get(base + "/healthz")
    assert status == 200 and json.loads(text)["front"] == FRONT
    status, text, _ = _get(base + "/metrics")
    assert status == 200
    assert "readability_front_accepted_total 3" in text
    assert 'readability_front_refused_total{reason="busy"} 1' in text
    assert asked == [True, True]
    assert _get(base + "/nothing")[0] == 404
