"""Integration: the dashboard and the autoscaler's rule, evaluated by a real Prometheus.

Debian's `prometheus` (`.ci/run` installs it) scrapes the test server every second, with
the `namespace` and `pod` labels the Prometheus Operator adds in a cluster, while clients
send requests. Then every PromQL expression of `deploy/grafana/dashboards/readability.json`
and of the prometheus-adapter rule (`deploy/k8s/prometheus-adapter/values.yaml`, its
template filled in as the adapter does) goes through Prometheus's HTTP API: each must
evaluate without error, and each that needs no GPU must return series. A query that fails
names its panel. The GPU panels (nv_gpu_*) have no series on this CPU-only server: listed.
Skipped, saying why, where prometheus is not installed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml
from served import score_texts, system_tool

from readability_triton.server.tritonserver import free_port

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "dashboards", "readability.json")
ADAPTER = os.path.join(ROOT, "deploy", "k8s", "prometheus-adapter", "values.yaml")
LABELS = {"namespace": "readability", "pod": "readability-triton-0"}


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and of the adapter rule (its seriesQuery, and
    its metricsQuery with <<.LabelMatchers>> and <<.GroupBy>> filled in for one pod)."""
    with open(DASHBOARD, encoding="utf-8") as handle:
        out = [
            (f"panel {panel['title']!r}", target["expr"])
            for panel in json.load(handle)["panels"]
            for target in panel["targets"]
        ]
    with open(ADAPTER, encoding="utf-8") as handle:
        for rule in yaml.safe_load(handle)["rules"]["custom"]:
            name = rule["name"]["as"]
            matchers = ",".join(f'{k}="{v}"' for k, v in LABELS.items())
            out.append((f"adapter rule {name} (seriesQuery)", rule["seriesQuery"]))
            out.append(
                (
                    f"adapter rule {name} (metricsQuery)",
                    rule["metricsQuery"].replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "pod"),
                )
            )
    return out


def _gpu_only(expr: str) -> bool:
    return "nv_gpu_" in expr or "nv_energy_" in expr


@pytest.fixture(scope="module")
def prometheus(portable_server, tmp_path_factory):
    binary = system_tool("prometheus", "/usr/bin/prometheus", "prometheus")
    root = tmp_path_factory.mktemp("prometheus")
    server = portable_server
    port = free_port()
    (root / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "triton",
                        "metrics_path": "/metrics",
                        "static_configs": [{"targets": [f"127.0.0.1:{server.metrics_port}"], "labels": LABELS}],
                    }
                ],
            }
        )
    )
    command = [
        binary,
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={root / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(root / "prometheus.log", "wb"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, (root / "prometheus.log").read_text()
                time.sleep(0.2)
        stop = threading.Event()

        def load():
            while not stop.is_set():
                score_texts(server, "grpc", ["A text to count.", "And another, a little longer than that one."])

        threads = [threading.Thread(target=load) for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(12)  # a dozen scrapes under load: rates over [1m] have samples
        stop.set()
        for thread in threads:
            thread.join()
        time.sleep(2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _query(base: str, expr: str) -> dict:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return json.loads(err.read())


@pytest.mark.parametrize("where, expr", queries(), ids=[w for w, _ in queries()])
def test_every_query_evaluates_and_returns_series_where_there_is_no_gpu(prometheus, where, expr):
    answer = _query(prometheus, expr)
    assert answer.get("status") == "success", f"{where}: {answer.get('error')} ({expr})"
    series = answer["data"]["result"]
    if _gpu_only(expr):
        assert series == [], f"{where}: GPU series on a CPU-only server?"
    else:
        assert series, f"{where}: no series ({expr})"


def test_the_gpu_only_queries_are_the_gpu_panels():
    assert sorted(w for w, e in queries() if _gpu_only(e)) == ["panel 'GPU memory used'", "panel 'GPU utilisation'"]
