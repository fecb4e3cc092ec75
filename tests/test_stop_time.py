"""How long an idle `serve` takes to stop, in a module of its own: no other server of the
suite's runs beside it (test_front_door's keep two, which took 0.1-0.2 s more of these 2
cores' time during the stop)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from served import CLIENTS, assemble_portable, score_texts
from test_front_door import TEXTS, _front, _serve

from readability_triton import contracts as C

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repo(tiny_artifacts, tmp_path_factory):
    return assemble_portable(tiny_artifacts, str(tmp_path_factory.mktemp("stop") / "repository"))


def test_an_idle_serve_stops_within_4_s_after_both_protocols_were_used(repo, tmp_path):
    """With no request in flight, SIGTERM ends serve in at most 4 s (its 2 s drain grace
    included; the median of three serves), also after clients of both protocols left
    keep-alive connections behind: after the drain the door closes its own keep-alive
    connections to tritonserver, which otherwise counts them down for its exit timeout
    (10 s: 14 s in all), and keeps its ports open for the clients still asking (they are
    told it is shutting down). The floor is the grace, then the steps' unload: the python
    backend sleeps 1 s in each instance's, and its stub's health thread takes up to 0.3 s
    to end (3.6-3.7 s measured)."""
    took = []
    for run in range(3):
        (tmp_path / str(run)).mkdir()
        with _serve(repo, tmp_path / str(run)) as target:
            front = _front(target)
            for protocol in CLIENTS:
                assert np.isfinite(score_texts(front, protocol, TEXTS, [C.SCORE])[C.SCORE]).all()
            time.sleep(0.5)
            target.running.terminate()
            signalled = time.monotonic()
            assert target.running.wait(timeout=60) == 0
            took.append(time.monotonic() - signalled)
    print(f"idle serves stopped in {', '.join(f'{t:.1f}' for t in took)} s")
    assert sorted(took)[1] <= 4.0, took
