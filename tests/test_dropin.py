"""The repository dropped into a plain tritonserver, as a user of an existing Triton
deployment does it: `make wheel`, the wheel installed into a fresh venv, `assemble` and
`triton-command` from that venv, the printed line run with bash (no `serve`, no
readability-triton process beside tritonserver), and its answers set against `serve`'s on
the same repository, for every output selection and both protocols. And the first request
to a plain server, which the models' `model_warmup` makes cost within 2x a warm one.

The fresh venv gets the wheel from `pip install --no-index`; its dependencies come from the
project's venv (a `.pth` file: the tests install nothing from the network), and pip checks
that they satisfy every extra the portable profile needs.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import sysconfig
import time
import types
import urllib.error
import urllib.request

import numpy as np
import pytest
from harness import output_selections
from served import score_texts

from readability_triton import __version__
from readability_triton import contracts as C
from readability_triton.client.readability import ReadabilityClient
from readability_triton.corpus import default_texts
from readability_triton.measure.launch import launch_serve
from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server.tritonserver import TritonServer, free_ports

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "drop-in-key_1"
TEXTS = [
    "The cat sat on the mat. It was warm.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor.",
    "Ünïcödé — “quotes”, 漢字とかな, and a very long wordddddddddddddddddddd.",
]
EXTRAS = "serve,portable,server,client"


def _run(args, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A fresh venv with the wheel `make wheel` built, installed with pip."""
    _run(["make", "wheel"], cwd=ROOT)
    wheel = os.path.join(ROOT, "dist", f"readability_triton-{__version__}-py3-none-any.whl")
    assert os.path.isfile(wheel), os.listdir(os.path.join(ROOT, "dist"))
    home = tmp_path_factory.mktemp("fresh")
    venv = home / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", wheel])
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(purelib, "zz-project-dependencies.pth"), "w", encoding="utf-8") as handle:
        handle.write(sysconfig.get_paths()["purelib"] + "\n")  # after the venv's own site-packages
    # every extra of the portable profile is satisfied without an index (the wheel's own metadata)
    _run([python, "-m", "pip", "install", "--no-index", "--dry-run", f"{wheel}[{EXTRAS}]"])
    where = _run([python, "-c", "import readability_triton; print(readability_triton.__file__)"], cwd=str(home))
    assert where.stdout.startswith(purelib), where.stdout  # the wheel's copy, not the checkout's
    return types.SimpleNamespace(home=home, bin=str(venv / "bin"), wheel=wheel)


def _ready(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, f"exited with status {process.returncode}"
        try:
            with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        assert time.monotonic() < deadline, "not ready in time"
        time.sleep(0.25)


def _stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait()


def test_the_wheel_in_a_fresh_venv_serves_on_a_plain_tritonserver_as_serve_does(fresh, tiny_artifacts):
    home = fresh.home
    cli = os.path.join(fresh.bin, "readability-triton")
    repo = str(home / "repository")
    _run([cli, "assemble", "--profile", "portable", "--artifacts", tiny_artifacts, "--out", repo], cwd=str(home))
    for model in repository.repository_models():  # the Python models, copied from the wheel's own
        assert model == C.ENSEMBLE or os.path.isfile(os.path.join(repo, model, "1", "model.py")), model
    http, grpc, metrics = free_ports(3)
    line = _run(
        [cli, "triton-command", "--repository", repo, "--http-port", str(http), "--grpc-port", str(grpc)]
        + ["--metrics-port", str(metrics)],
        cwd=str(home),
    ).stdout.strip()
    assert len(line.splitlines()) == 1 and f"PATH={fresh.bin}:" in line and KEY not in line
    env = {k: v for k, v in os.environ.items() if not k.startswith(("READABILITY_TRITON", "VIRTUAL_ENV"))}
    for bad in ({}, {"READABILITY_TRITON_ADMIN_KEY": "a,b:c=d"}):  # no key, or one that would break the flags
        refused = subprocess.run(["bash", "-c", line], env={**env, **bad}, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "READABILITY_TRITON_ADMIN_KEY" in refused.stderr, refused.stderr
    key_file = home / "admin-key"
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(KEY + "\n")  # as a Kubernetes Secret mounted as a file holds it
    log = open(home / "plain.log", "wb")
    plain = subprocess.Popen(
        ["bash", "-c", line],
        env={**env, "READABILITY_TRITON_ADMIN_KEY_FILE": str(key_file)},
        cwd=str(home),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    serve_code = 0
    try:
        _ready(f"127.0.0.1:{http}", plain)
        with open(f"/proc/{plain.pid}/cmdline", "rb") as handle:
            assert b"tritonserver" in handle.read()  # exec: the PID is tritonserver's
        for name in ("cmdline", "environ"):
            with open(f"/proc/{plain.pid}/{name}", "rb") as handle:
                assert KEY.encode() not in handle.read(), name
        index = f"http://127.0.0.1:{http}/v2/repository/index"
        with pytest.raises(urllib.error.HTTPError) as closed:
            urllib.request.urlopen(urllib.request.Request(index, method="POST"), timeout=10)
        assert closed.value.code == 403
        with urllib.request.urlopen(urllib.request.Request(index, method="POST", headers={"admin-key": KEY})) as reply:
            assert reply.status == 200

        with launch_serve(repo, home, key=KEY, ready_timeout=180) as serve:
            plain_urls = types.SimpleNamespace(http_url=f"127.0.0.1:{http}", grpc_url=f"127.0.0.1:{grpc}")
            serve_urls = types.SimpleNamespace(http_url=serve.http, grpc_url=serve.grpc)
            for protocol in ("http", "grpc"):
                for outputs in output_selections():
                    got = score_texts(plain_urls, protocol, TEXTS, outputs)
                    want = score_texts(serve_urls, protocol, TEXTS, outputs)
                    assert set(got) == set(want) == set(outputs or C.OUTPUTS)
                    for name in want:
                        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{protocol} {outputs} {name}")
            serve_code = serve.stop(timeout=60)
    finally:
        codes = {"plain": _stop(plain), "serve": serve_code}
        log.close()
    assert codes["plain"] == 0 and codes["serve"] == 0, (codes, open(home / "plain.log").read()[-3000:])


def _first_and_warm(repo: str, log: str) -> tuple[float, float, float]:
    """A plain tritonserver on `repo` (started, no request sent before): the round trip of
    its first request, the median of the next 30 sent back to back, and the median of 10
    more each sent after 0.3 s idle (as the first came, a moment after readiness); each a
    text it has not seen."""
    texts = default_texts()[0][:41]
    server = TritonServer(repo, log_file=log)
    server.start(timeout=180)
    try:
        with ReadabilityClient(server.http_url, "http") as client:
            assert client.ready()  # the connection is open: the first request pays no connect
            first = client.infer_batch([texts[0]])[1]
            warm = [client.infer_batch([text])[1] for text in texts[1:31]]
            idle = []
            for text in texts[31:]:
                time.sleep(0.3)
                idle.append(client.infer_batch([text])[1])
    finally:
        server.stop()
    return first, statistics.median(warm), statistics.median(idle)


def test_the_first_request_to_a_plain_server_is_warm(tiny_artifacts, tmp_path):
    """The composing models compute a warm-up sample while they load (`model_warmup`;
    Triton refuses one on the ensemble), so a plain tritonserver's first request is not a
    cold start. Without it, with the tiny set, the first request took 67-71 ms against
    4.1-4.4 back to back (16-18x) and 7.6-9.2 after an idle pause (8x); with it 8.1-8.8 ms:
    1.9x back to back (where Python's hops decide, an idle pause alone costs that much:
    the processes' caches) and 1.0x a request after the same idle. With MiniLM (the demo
    set), 43-44 ms against 38.5-41 back to back (1.08-1.12x), 118 ms without warm-up.
    Each ratio is the median of three fresh servers."""
    repo = str(tmp_path / "repository")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions("portable"))
    runs = [_first_and_warm(repo, str(tmp_path / f"server-{run}.log")) for run in range(3)]
    for first, warm, idle in runs:
        print(f"first {first:.1f} ms, back to back {warm:.1f} ms ({first / warm:.2f}x), after idle {idle:.1f} ms")
    assert statistics.median(first / idle for first, _, idle in runs) <= 1.5, runs  # not a cold start
    assert statistics.median(first / warm for first, warm, _ in runs) <= 2.5, runs  # 16-18x without warm-up
