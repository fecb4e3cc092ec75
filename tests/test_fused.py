"""Integration: the fused repository (`assemble --fused`: BERT inside preprocess, the forest
inside featurize) on the real tritonserver answers what the separate one answers, and keeps
the scheduler rules' guarantees: a bad text refused by the first step beside good ones under
load, nothing left in flight.

Every output selection over every client is in test_conformance.py (its `server` fixture
serves both repositories); clients that give up, through serve's front door, in
test_supervision_served.py (its cancellation burst runs on both). A bare tritonserver 2.51
cannot stop cleanly after gRPC cancellations whatever it serves (test_ensemble_rules.py).
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import numpy as np
import pytest
from served import assemble_portable, score_texts, settled, start_server

from readability_triton import contracts as C
from readability_triton.artifacts.corpus import default_texts
from readability_triton.client import load
from readability_triton.stub.admission import pending_requests

pytestmark = pytest.mark.integration

BAD = [b"broken \xff\xfe utf-8", b"", b"   \t  ", b"\xed\xa0\x80 surrogate", b"x" * 5001]


def test_the_fused_repository_answers_what_the_separate_one_does(portable_server, fused_server):
    """Every output, for requests of 1, 8 and 64 texts over gRPC: equal to the last bit (the
    same runners on the same rows, in one stub instead of two)."""
    texts = default_texts()[0][:64]
    for chunk in (texts[:1], texts[:8], texts):
        separate = score_texts(portable_server, "grpc", chunk)
        fused = score_texts(fused_server, "grpc", chunk)
        assert sorted(fused) == sorted(separate) == sorted(C.OUTPUTS)
        for name in C.OUTPUTS:
            np.testing.assert_array_equal(fused[name], separate[name], err_msg=f"{name}, {len(chunk)} texts")


def test_bad_requests_beside_good_ones_under_load_then_a_clean_stop(tiny_artifacts, tmp_path):
    """12 clients, 1 bad request in 9, 12 s over gRPC, on the fused repository: no good
    request fails or is wrong, no bad one is accepted; then no request waits in any queue,
    and a plain SIGTERM stops the server with status 0 within its exit timeout (nothing left
    in flight), leaving no /dev/shm segment."""
    repo = assemble_portable(tiny_artifacts, str(tmp_path / "repository"), fused=True, max_text_bytes=5000)
    server = start_server(repo, str(tmp_path / "server.log"), str(tmp_path / "backends"))
    texts = [f"Text number {i} is here. It has {'a few ' * (i % 5)}words and reads easily." for i in range(24)]
    expected = np.array([score_texts(server, "grpc", [t], [C.SCORE])[C.SCORE][0, 0] for t in texts])
    work, close = load.mixed_worker(server.grpc_url, "grpc", texts, expected, BAD, bad_every=9)
    try:
        outcomes = load.closed_loop(work, 12, 12.0)
    finally:
        close()
    report = load.summarize(outcomes, 12.0, window=4.0)
    print(report)
    assert report["good"] > 100 and report["bad"] > 10, report
    assert report["good_failed"] == 0, report["good_errors"]
    assert report["good_wrong"] == 0 and report["bad_accepted"] == 0, report

    def pending():
        with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
            return pending_requests(reply.read().decode("utf-8", "replace"))

    left = settled(pending, lambda counts: not any(counts.values()))
    assert set(left) >= {C.FEATURIZE, C.PREPROCESS, C.POSTPROCESS} and not any(left.values()), left
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    code = server.process.wait(timeout=server.exit_timeout + 30)
    with open(server.log_file, encoding="utf-8", errors="replace") as handle:
        log = handle.read()
    assert code == 0 and time.monotonic() - started < server.exit_timeout, (code, log[-3000:])
    assert "in-flight inferences" not in log.replace("0 model versions that have in-flight inferences", "")
    for sign in ("Signal (11)", "Signal (6)", "incomplete string data", "not healthy"):
        assert sign not in log, sign
    assert not server.leftover_shm()
    server.stop()
    assert os.path.isdir(repo)
