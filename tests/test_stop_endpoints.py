"""`TritonServer.stop()` against a stand-in tritonserver that behaves, after SIGTERM, as the
real one does in each case: it exits; its core stops but an endpoint never closes (Triton
2.51's gRPC endpoint waiting without a deadline for a call its handlers never finished:
caught under gdb on the real server, see tritonserver.py); or it never gets as far as
stopping its core. The stand-in is started the way the real binary is (`start()`, through
the key shim, its log forwarded), from an installation folder of its own (`home`).

The real server's hang comes up in `tests/test_faults.py`'s stop under load, in about 1
stop in 20-50 (5 of 174 here); these pin down what `stop()` does when it happens."""

from __future__ import annotations

import os
import signal
import sys
import time

from readability_triton.server.tritonserver import CORE_STOPPED, TritonServer

#: A tritonserver stand-in: answers /v2/health/ready on --http-port; on SIGTERM it logs what
#: Triton's core logs as it stops and then, by its `mode`, exits 0, hangs after the core's
#: last line, or hangs before it.
STAND_IN = """\
#!{python}
import http.server, signal, sys, threading, time
MODE = {mode!r}
port = int(sys.argv[sys.argv.index("--http-port") + 1])

class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v2/health/ready" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass

http_server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Ready)
threading.Thread(target=http_server.serve_forever, daemon=True).start()
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
print("I server.cc] Started HTTPService at 127.0.0.1:%d" % port, flush=True)
stop.wait()
print("Signal (15) received.", flush=True)
print('I server.cc:305] "Waiting for in-flight requests to complete."', flush=True)
if MODE == "core-stuck":
    time.sleep(3600)
print('I server.cc:336] "All models are stopped, unloading models"', flush=True)
print('I server.cc:345] "Timeout 10: Found 0 live models and 0 in-flight non-inference requests"', flush=True)
if MODE == "endpoint-hang":
    time.sleep(3600)
time.sleep(0.2)
sys.exit(0)
"""


def _stand_in(tmp_path, mode: str, **kw) -> TritonServer:
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "backends").mkdir()
    binary = home / "bin" / "tritonserver"
    binary.write_text(STAND_IN.format(python=sys.executable, mode=mode))
    binary.chmod(0o755)
    repository = tmp_path / "repository"
    repository.mkdir()
    server = TritonServer(str(repository), home=str(home), log_file=str(tmp_path / "server.log"), **kw)
    return server.start(timeout=60)


def test_the_core_stopped_line_is_triton_2_51s_last_stop_line():
    """The line `stop()` waits for, as tritonserver 2.51 prints it (the CI log of a real stop)."""
    prefix = b'I1204 17:04:10.530700 15438 server.cc:345] "Timeout '
    assert CORE_STOPPED in (prefix + b'10: Found 0 live models and 0 in-flight non-inference requests"\n')
    assert CORE_STOPPED not in (prefix + b'9: Found 1 live models and 0 in-flight non-inference requests"\n')
    assert CORE_STOPPED not in (prefix + b'9: Found 0 live models and 2 in-flight non-inference requests"\n')


def test_a_server_that_exits_is_not_killed(tmp_path):
    server = _stand_in(tmp_path, "exit")
    code = server.stop(drain=False)
    report = server.last_stop
    assert code == 0, report
    assert report["killed"] is False and "endpoint_hang" not in report
    assert report["exit_seconds"] < 5


def test_an_endpoint_that_never_closes_after_the_core_stopped_is_ended_after_the_grace(tmp_path):
    """The core has stopped (nothing loaded, nothing in flight) and only an endpoint holds
    the exit: `stop()` waits `endpoint_grace` s, not the whole exit timeout + 10 s, then
    SIGKILLs it and says why."""
    server = _stand_in(tmp_path, "endpoint-hang", endpoint_grace=1.0, exit_timeout=30)
    pid = server.pid
    code = server.stop(drain=False)
    report = server.last_stop
    assert code == -signal.SIGKILL, report
    assert report["killed"] is True and report["endpoint_hang"] is True
    assert 1.0 <= report["exit_seconds"] < 10, report
    assert not os.path.exists(f"/proc/{pid}")


def test_a_server_whose_core_never_stops_waits_the_whole_timeout(tmp_path):
    """Before the core's last line, the grace does not apply: a core still waiting for
    models or requests gets the timeout, and being killed then is not an endpoint hang."""
    server = _stand_in(tmp_path, "core-stuck", endpoint_grace=0.5)
    started = time.monotonic()
    code = server.stop(drain=False, timeout=3)
    report = server.last_stop
    assert code == -signal.SIGKILL, report
    assert report["killed"] is True and "endpoint_hang" not in report
    assert time.monotonic() - started >= 3


def test_serve_says_when_an_endpoint_held_the_exit(tmp_path, caplog):
    """serve's closing report: still a clean stop (exit 0: drained, nothing lost), with a
    line that says tritonserver was ended and why."""
    import logging

    from readability_triton.server.serve import ServeOptions, Service

    service = Service(ServeOptions(str(tmp_path)))
    service.server = TritonServer(str(tmp_path), endpoint_grace=5.0)
    service.server.last_stop = {"drained": True, "killed": True, "endpoint_hang": True, "exit_status": -9}
    service.stopping = [signal.SIGTERM]
    with caplog.at_level(logging.INFO, logger="readability_triton.server.serve"):
        assert service._report(-9, {"drained": True}) == 0
    said = caplog.text
    assert "its gRPC endpoint did not close within 5 s" in said and "ended with SIGKILL" in said
    assert "tritonserver stopped (status -9)" in said
