"""`serve`'s health port: GET /livez, /readyz, /healthz for orchestrators, and /metrics (the
front door's counters, in Prometheus' text format; tritonserver's own are on its metrics
port).

- /livez: 200 while serve supervises a running or restarting server; load never fails it.
- /readyz: 200 while the server answers right (no repair under way, no dead stub, the last
  canary right or merely busy) and serve is not stopping.
- /healthz: the whole status as JSON (the supervisor's and the front door's), 200 when ready.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

#: The front door's counters and gauges: (name in the snapshot, metric, type, help).
_METRICS = (
    ("accepted", "readability_front_accepted_total", "counter", "Inference requests accepted by the front door"),
    ("answered", "readability_front_answered_total", "counter", "Accepted requests tritonserver answered"),
    (
        "dropped_before_compute",
        "readability_front_dropped_total",
        "counter",
        "Accepted requests whose client left before they were sent on (never computed)",
    ),
    (
        "abandoned_after_send",
        "readability_front_abandoned_total",
        "counter",
        "Requests whose client left after they were sent on (computed, answer dropped)",
    ),
    (
        "expired",
        "readability_front_expired_total",
        "counter",
        "Accepted requests refused after waiting twice the stated wait",
    ),
    (
        "resent",
        "readability_front_resent_total",
        "counter",
        "Sends again of requests refused before anything computed them (load shedding, a restart)",
    ),
    (
        "holds",
        "readability_front_holds_total",
        "counter",
        "Holds of the queue after an answer that named a dead stub of this repository",
    ),
    (
        "holds_dismissed",
        "readability_front_holds_dismissed_total",
        "counter",
        "Holds the supervisor ended at once: nothing to repair behind the answer",
    ),
    ("http_connections_open", "readability_front_http_connections", "gauge", "Open connections to the HTTP port"),
    (
        "http_connections_evicted",
        "readability_front_http_connections_evicted_total",
        "counter",
        "Idle HTTP connections closed to make room under the connection caps",
    ),
    (
        "http_connections_timed_out",
        "readability_front_http_connections_timed_out_total",
        "counter",
        "HTTP connections closed for sending no request, or not all of its headers, in time",
    ),
    (
        "http_connections_refused",
        "readability_front_http_connections_refused_total",
        "counter",
        "HTTP connections closed at once: the caps were reached and no connection was idle",
    ),
    ("texts_waiting", "readability_front_texts_waiting", "gauge", "Texts waiting at the front door"),
    ("texts_inside", "readability_front_texts_inside", "gauge", "Texts sent on to tritonserver, not answered yet"),
    (
        "rate_texts_per_s",
        "readability_front_rate_texts_per_second",
        "gauge",
        "Texts the pipeline lately finished per busy second",
    ),
    ("workers", "readability_front_workers", "gauge", "Front door worker processes that answered (--door-workers)"),
    (
        "worker_restarts",
        "readability_front_worker_restarts_total",
        "counter",
        "Front door workers started again after they exited",
    ),
)


def prometheus_text(front: dict) -> str:
    """The front door's snapshot (`Gate.snapshot`) as Prometheus text."""
    lines = []
    for key, name, kind, doc in _METRICS:
        if key in front:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name} {front[key]}"]
    refused = front.get("refused") or {}
    if refused:
        name = "readability_front_refused_total"
        lines += [f"# HELP {name} Inference requests the front door refused, by reason", f"# TYPE {name} counter"]
        lines += [f'{name}{{reason="{reason}"}} {count}' for reason, count in sorted(refused.items())]
    return "\n".join(lines) + "\n"


def health_endpoint(port: int, status: Callable[[bool], dict], address: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve the probes on `port` from a thread; `status(front)` is `Service.status` (the
    supervisor's status, with the front door's snapshot under "front" where `front`: only
    /healthz and /metrics ask for it, so that a front door kept busy by a flood of
    connections never delays a liveness or readiness probe). Stop it with `.shutdown()`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.rstrip("/")
            now = status(path in ("/healthz", "/metrics"))
            content = "text/plain; charset=utf-8"
            if path == "/livez":
                ok, body = now["live"], ("live" if now["live"] else f"not live: {now['problem']}")
            elif path == "/readyz":
                ok = now["ready"]
                body = "ready" if ok else f"not ready ({now['phase']}): {now['problem'] or now['canary']}"
            elif path == "/healthz":
                ok, body, content = now["ready"], json.dumps(now), "application/json"
            elif path == "/metrics":
                ok, body, content = True, prometheus_text(now.get("front") or {}), "text/plain; version=0.0.4"
            else:
                self.send_error(404, "GET /livez, /readyz, /healthz or /metrics")
                return
            data = (body if body.endswith("\n") else body + "\n").encode("utf-8")
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", content)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet: probes come every few seconds
            pass

    httpd = ThreadingHTTPServer((address, port), Handler)
    # serve_forever looks for shutdown() between polls: its default 0.5 s poll cost every
    # stop of serve up to half a second
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True, name="health-port").start()
    return httpd
