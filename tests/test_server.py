"""Integration: the assembled `portable` repository served by a real tritonserver (the
binary of the nvidia-pytriton wheel), queried over HTTP and gRPC."""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from served import served_weights, settled, start_server
from tritonclient.utils import InferenceServerException

from readability_triton import contracts as C
from readability_triton import scoring
from readability_triton.client.readability import ReadabilityClient
from readability_triton.layout import load_manifest
from readability_triton.measure.launch import launch_serve
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server import tritonserver

pytestmark = pytest.mark.integration

MAX_TEXT_BYTES = 4000
BATCH_WINDOW_US = 200_000
TEXTS = [
    "The cat sat on the mat. It was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor.",
    'Don\'t panic... "Mr. Smith’s dog-house," she said!',
    "Ünïcödé — “quotes”, 漢字とかな, עברית, emoji 😀🚀 and a very long wordddddddddddddddddddddddd.",
    "word " * 300,
]


@pytest.fixture(scope="module")
def repo(tiny_artifacts, tmp_path_factory):
    out = tmp_path_factory.mktemp("served") / "repository"
    repository.assemble(tiny_artifacts, str(out), AssemblyOptions("portable", max_text_bytes=MAX_TEXT_BYTES))

    # A long batching window on the two text steps, so that requests sent together are
    # certain to share execute() calls (the production window is 1 ms: too short to rely on).
    def widen(config) -> None:
        config.dynamic_batching.max_queue_delay_microseconds = BATCH_WINDOW_US

    for model in (C.PREPROCESS, C.FEATURIZE):
        configs.edit_config(str(out / model / "config.pbtxt"), widen)
    return str(out)


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    server = start_server(repo, str(log), str(tmp_path_factory.mktemp("backends")))
    yield server
    status = server.stop()
    assert server.process.poll() is not None, "the server must be gone after stop()"
    assert status is not None


@pytest.fixture(scope="module")
def expected(tiny_artifacts):
    """What the artifacts compute in process, with the runners the Python models run."""
    from readability_triton.pipeline import Pipeline

    pipeline = Pipeline.from_folder(tiny_artifacts)

    def compute(texts):
        ids, mask = pipeline.tokenizer(texts)
        features = pipeline.features(texts)[0]
        bert, forest = pipeline.bert(ids, mask).reshape(-1), pipeline.forest(features).reshape(-1)
        return {
            "ids": ids,
            "mask": mask,
            "features": features,
            C.BERT_SCORE: bert,
            C.FOREST_SCORE: forest,
            C.SCORE: scoring.blend(bert, forest, *pipeline.weights),
        }

    return compute


def test_health_readiness_and_metadata(server):
    with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready") as reply:
        assert reply.status == 200
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert http.is_server_live() and grpc.is_server_ready()
        for model in configs.repository_models():
            assert http.is_model_ready(model) and grpc.is_model_ready(model), model
        meta = http.get_model_metadata(C.ENSEMBLE)
        assert [(t["name"], t["datatype"]) for t in meta["inputs"]] == [("TEXT", "BYTES")]
        assert [t["name"] for t in meta["outputs"]] == list(C.OUTPUTS)
    finally:
        http.close()
        grpc.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_scores_equal_the_in_process_computation(server, expected, protocol):
    url = server.http_url if protocol == "http" else server.grpc_url
    with ReadabilityClient(url, protocol) as client:
        outputs, _ = client.infer_batch(TEXTS)
    want = expected(TEXTS)
    # the forest: same checkpoint, same float32 features -> the same numbers
    np.testing.assert_array_equal(outputs[C.FOREST_SCORE], want[C.FOREST_SCORE])
    # BERT: same TorchScript module; batch composition may change float rounding slightly
    np.testing.assert_allclose(outputs[C.BERT_SCORE], want[C.BERT_SCORE], rtol=0, atol=1e-5)
    # SCORE: the set's fitted weights, served by postprocess and used in process alike
    weights = served_weights(server.repository)
    assert weights == load_manifest(server.repository + "/" + C.BERT + "/1").blend_weights != (0.5, 0.5)
    np.testing.assert_array_equal(
        outputs[C.SCORE], scoring.blend(outputs[C.BERT_SCORE], outputs[C.FOREST_SCORE], *weights)
    )
    assert all(v.dtype == np.float32 and v.shape == (len(TEXTS),) for v in outputs.values())


def test_step_models_answer_directly(server, expected):
    texts = TEXTS + [""]  # preprocess takes an empty text (the first step refuses it: below)
    want = expected(texts)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        rows = np.empty((len(texts), 1), dtype=np.object_)
        rows[:, 0] = [t.encode() for t in texts]
        text = httpclient.InferInput("TEXT", list(rows.shape), "BYTES")
        text.set_data_from_numpy(rows)
        tokens = client.infer(C.PREPROCESS, [text])
        np.testing.assert_array_equal(tokens.as_numpy(C.INPUT_IDS), want["ids"])
        np.testing.assert_array_equal(tokens.as_numpy(C.ATTENTION_MASK), want["mask"])
        # featurize is the served wiring's first step: it refuses the request with a text
        # without words, and answers the others
        with pytest.raises(InferenceServerException, match=f"text {len(TEXTS)} of the request holds no words"):
            client.infer(C.FEATURIZE, [text])
        good = httpclient.InferInput("TEXT", [len(TEXTS), 1], "BYTES")
        good.set_data_from_numpy(rows[: len(TEXTS)])
        features = client.infer(C.FEATURIZE, [good]).as_numpy(C.FEATURES)
        assert features.dtype == np.float32 and features.shape == (len(TEXTS), C.N_FEATURES)
        np.testing.assert_array_equal(features, want["features"][: len(TEXTS)])
    finally:
        client.close()


def _text_input(payload: bytes):
    text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[payload]], dtype=np.object_))
    return text


def _infer_concurrently(url, payloads):
    """One request per payload, all in flight at once (the HTTP client's own concurrency:
    tritonclient.http is not thread-safe, so no threads); a failed request gives its error."""
    client = httpclient.InferenceServerClient(url, concurrency=len(payloads))
    try:
        pending = [client.async_infer(C.ENSEMBLE, [_text_input(p)]) for p in payloads]
        results = []
        for request in pending:
            try:
                results.append(request.get_result().as_numpy(C.SCORE)[0, 0])
            except InferenceServerException as err:
                results.append(err)
        return results
    finally:
        client.close()


def _stats(url, model):
    client = httpclient.InferenceServerClient(url)
    try:
        (stats,) = client.get_inference_statistics(model)["model_stats"]
        return int(stats["inference_count"]), int(stats["execution_count"])
    finally:
        client.close()


def test_a_bad_request_among_good_ones_fails_alone(server, expected):
    good = [f"Sentence number {i} is short. It is easy to read." for i in range(14)]
    payloads = [t.encode() for t in good]
    bad = {3: b"broken \xff\xfe utf-8", 9: b"x" * (MAX_TEXT_BYTES + 1)}
    for index, payload in bad.items():
        payloads.insert(index, payload)
    # featurize is the served (serial) wiring's first step; preprocess starts the BERT branch
    first, branch = C.FEATURIZE, C.PREPROCESS
    before = {m: _stats(server.http_url, m) for m in (first, branch)}
    results = _infer_concurrently(server.http_url, payloads)
    after = settled(
        lambda: {m: _stats(server.http_url, m) for m in (first, branch)},
        lambda now: (
            now[first][0] - before[first][0] >= len(payloads) and now[branch][0] - before[branch][0] >= len(good)
        ),
    )
    mean = expected(good)[C.SCORE]
    goods = iter(range(len(good)))
    for index, result in enumerate(results):
        if index in bad:
            assert isinstance(result, InferenceServerException), f"request {index} should fail"
            assert "not valid UTF-8" in str(result) or "over the limit" in str(result), str(result)
        else:
            assert not isinstance(result, Exception), f"good request {index} failed: {result}"
            assert result == pytest.approx(mean[next(goods)], abs=1e-5)
    # the first step saw every request and refused the bad ones; the BERT branch only the good ones
    assert after[branch][0] - before[branch][0] == len(good)
    inferences, executions = (after[first][i] - before[first][i] for i in (0, 1))
    assert inferences == len(payloads)
    assert executions < inferences, "concurrent requests were batched into shared execute() calls"


@pytest.mark.skipif(
    tritonserver.cuda_driver(), reason="this machine has a CUDA driver: tritonserver has no CUDA errors to log"
)
def test_on_a_machine_without_cuda_every_cuda_line_of_the_log_is_explained(server):
    """tritonserver, a GPU build, logs CUDA errors on a CPU machine (no flag avoids two of
    them): the log says at the first one that they are expected, and the pinned pool, which
    cannot be made there, is not tried."""
    with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready") as reply:  # a request went through
        assert reply.status == 200
    lines = open(server.log_file, encoding="utf-8", errors="replace").read().splitlines()
    cuda = [i for i, line in enumerate(lines) if "cuda" in line.lower() and "cuda_shared_memory" not in line]
    note = [i for i, line in enumerate(lines) if line + "\n" == tritonserver.CPU_CUDA_NOTE]
    assert cuda and len(note) == 1, lines[:60]
    errors = [i for i in cuda if lines[i][:1] in "EW"]
    assert errors and note[0] == errors[0] + 1, [lines[i] for i in cuda]
    assert not any("Unable to allocate pinned system memory" in line for line in lines)


def test_metrics_endpoint(server):
    _infer_concurrently(server.http_url, [b"One more text."])

    def read():
        with urllib.request.urlopen(server.metrics_url) as reply:
            return reply.read().decode()

    def successes(text):
        return [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("nv_inference_request_success") and f'model="{C.ENSEMBLE}"' in line
        ]

    text = settled(read, lambda text: sum(successes(text)) >= 1)
    assert successes(text) and successes(text)[0] >= 1
    assert 'nv_inference_count{model="featurize"' in text


def _cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "readability_triton.cli", *args], capture_output=True, text=True, timeout=120, **kw
    )


def test_serve_and_score_commands(repo, tmp_path, expected):
    with launch_serve(repo, tmp_path, ready_timeout=240) as serve:
        ports = serve.ports["http"], serve.ports["grpc"]
        texts = ["A short and easy text.", "Another, somewhat longer, sentence follows it."]
        mean = expected(texts)[C.SCORE]

        result = _cli("score", *texts, "--url", f"127.0.0.1:{ports[0]}")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.strip().splitlines()[2:]
        order = list(C.HEADING)  # the table's columns: BERT, forest, score, ...
        at = order.index(C.SCORE) - len(order)
        assert result.stdout.splitlines()[0].split()[at] == "score"
        assert [float(line.split()[at]) for line in lines] == pytest.approx(mean.tolist(), abs=1e-3)

        csv_in, csv_out = tmp_path / "in.csv", tmp_path / "out.csv"
        csv_in.write_text("id,excerpt\n1," + texts[0] + '\n2,"' + texts[1] + '"\n')
        result = _cli(
            "score", "--csv", str(csv_in), "--out", str(csv_out), "--protocol", "grpc", "--url", f"127.0.0.1:{ports[1]}"
        )
        assert result.returncode == 0, result.stderr
        rows = csv_out.read_text().strip().splitlines()
        assert rows[0] == ",".join(["text"] + [name.lower() for name in C.OUTPUTS]) and len(rows) == 3
        assert rows[0].startswith("text,score,")
        score_at = len(C.OUTPUTS)  # the score column, counted from the right
        assert [float(r.rsplit(",", score_at)[1]) for r in rows[1:]] == pytest.approx(mean.tolist(), abs=1e-5)

        # several requests in flight at once: the scores keep the texts' order
        many = [f"Text {i}: " + " ".join(["a short word"] * (i + 1)) + "." for i in range(7)]
        csv_in.write_text("excerpt\n" + "\n".join(many) + "\n")
        result = _cli(
            "score", "--csv", str(csv_in), "--out", str(csv_out), "--batch-size", "2", "--concurrency", "3",
            "--protocol", "grpc", "--url", f"127.0.0.1:{ports[1]}",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        rows = csv_out.read_text().strip().splitlines()[1:]
        assert [r.split(",")[0] for r in rows] == many
        assert [float(r.rsplit(",", score_at)[1]) for r in rows] == pytest.approx(
            expected(many)[C.SCORE].tolist(), abs=1e-5
        )
        assert _cli("score", "x", "--concurrency", "0", "--url", f"127.0.0.1:{ports[0]}").returncode == 2

        result = _cli("score", "--url", f"127.0.0.1:{ports[0]}", input=texts[0] + "\n\n" + texts[1] + "\n")
        assert result.returncode == 0 and len(result.stdout.strip().splitlines()) == 4, result.stderr

        serve.process.send_signal(signal.SIGINT)
        assert serve.process.wait(timeout=60) == 0
        assert "tritonserver stopped" in serve.said()
    result = _cli("score", "text", "--url", f"127.0.0.1:{ports[0]}")
    assert result.returncode == 2 and "no ready 'readability' model" in result.stderr


def test_score_names_a_refused_row_by_its_row_and_line_and_skip_bad_scores_the_rest(server, expected, tmp_path):
    """One blank row in a 150-row CSV: `score` says which row (and the file's line: a quoted
    text before it spans two), in one line and exit status 2, and writes nothing; with
    --skip-bad it writes all 150 rows, the refused one with its error, and lists it."""
    texts = [f"Row {i} is a short sentence. It has words." for i in range(1, 151)]
    texts[99] = "   "
    texts[9] = "A text\nthat spans two lines."
    csv_in, csv_out = tmp_path / "in.csv", tmp_path / "out.csv"
    with open(csv_in, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "excerpt"])
        writer.writerows([i, text] for i, text in enumerate(texts, 1))
    url = ["--url", server.http_url]
    failed = _cli("score", "--csv", str(csv_in), "--out", str(csv_out), "--batch-size", "64", *url)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
    assert f"row 100 (line 102 of {csv_in}): the server refused it: it holds no words" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1 and not csv_out.exists(), failed.stderr

    done = _cli("score", "--csv", str(csv_in), "--out", str(csv_out), "--skip-bad", "--batch-size", "64", *url)
    assert done.returncode == 0, done.stderr
    assert (
        "skipped 1 of 150 texts" in done.stderr and f"row 100 (line 102 of {csv_in}): it holds no words" in done.stderr
    )
    with open(csv_out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["text"] for row in rows] == texts and list(rows[0])[-1] == "error"
    assert rows[99]["score"] == "" and rows[99]["error"].startswith("holds no words")
    good = [i for i in range(150) if i != 99]
    assert all(rows[i]["error"] == "" for i in good)
    want = expected([texts[i] for i in good])[C.SCORE]
    assert [float(rows[i]["score"]) for i in good] == pytest.approx(want.tolist(), abs=1e-5)


def test_score_on_standard_input_that_is_not_utf8_names_the_line_without_a_traceback(server):
    good = "A short and easy text.".encode()
    stdin = good + b"\n\xff\xfe not UTF-8\n\n" + good + b"\n"
    args = [sys.executable, "-m", "readability_triton.cli", "score", "--url", server.http_url]
    failed = subprocess.run(args, input=stdin, capture_output=True, timeout=120)
    err = failed.stderr.decode()
    assert failed.returncode == 2 and "Traceback" not in err, err
    assert "line 2 of standard input: the server refused it: it is not valid UTF-8" in err
    skipped = subprocess.run(args + ["--skip-bad"], input=stdin, capture_output=True, timeout=120)
    assert skipped.returncode == 0, skipped.stderr.decode()
    assert len(skipped.stdout.decode().strip().splitlines()) == 4  # header, rule, the two good lines
    assert "line 2 of standard input: it is not valid UTF-8" in skipped.stderr.decode()


def test_evaluate_through_the_server_equals_the_artifacts(server, tiny_artifacts, tmp_path):
    import csv
    import json

    from readability_triton.metrics import rmse
    from readability_triton.pipeline import Pipeline

    texts = [t for t in TEXTS if len(t.encode()) <= MAX_TEXT_BYTES]
    targets = np.linspace(-2.0, 1.0, len(texts))
    data = tmp_path / "held.csv"
    with open(data, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("excerpt", "target"), *zip(texts, targets.tolist())])
    for url, protocol in ((server.http_url, "http"), (server.grpc_url, "grpc")):
        result = _cli(
            "evaluate", "--url", url, "--protocol", protocol, "--data", str(data), "--json", "--batch-size", "3"
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        local = Pipeline.from_folder(tiny_artifacts)(texts)
        assert report["texts"] == len(texts)
        assert report["rmse"][C.FOREST_SCORE] == pytest.approx(rmse(local[C.FOREST_SCORE], targets), abs=1e-12)
        for branch in (C.BERT_SCORE, C.SCORE):
            assert report["rmse"][branch] == pytest.approx(rmse(local[branch], targets), abs=1e-5)


def test_stop_says_when_the_server_had_already_died_on_its_own(tmp_path):
    """A server that crashed before stop() (here a stand-in that dies by SIGSEGV, as
    tritonserver 2.51 does on a gRPC cancellation race) is not drained, and `last_stop`
    says that it had exited and how, not 'still loaded after the drain timeout'."""
    from readability_triton.server import tritonserver as S

    stand_in = subprocess.Popen(["sh", "-c", "kill -SEGV $$"], start_new_session=True)
    stand_in.wait(10)
    server = S.TritonServer(str(tmp_path), process=stand_in)
    assert server.stop() == -signal.SIGSEGV
    report = server.last_stop
    assert not report["drained"] and report["died"]
    assert report["error"] == "it had already exited on its own, killed by SIGSEGV (status -11)"


def test_stop_says_when_the_server_died_during_the_drain(tmp_path, monkeypatch):
    """A server that crashes while it is drained (the drain then fails on a refused
    connection) is reported as dead and how, not by the drain's connection error."""
    from readability_triton.server import tritonserver as S

    stand_in = subprocess.Popen(["sleep", "60"], start_new_session=True)
    server = S.TritonServer(str(tmp_path), process=stand_in)

    def crash_while_draining(*args, **kwargs):
        stand_in.send_signal(signal.SIGSEGV)
        while stand_in.poll() is None:
            time.sleep(0.01)
        return {"drained": False, "error": "connection refused"}

    monkeypatch.setattr(server, "ready", lambda timeout=0: True)
    monkeypatch.setattr(server, "drain", crash_while_draining)
    assert server.stop() == -signal.SIGSEGV
    assert server.last_stop["error"] == "it died during the stop, killed by SIGSEGV (status -11)"
    assert not server.last_stop["drained"]


def test_stop_says_when_the_server_did_not_answer_ready_and_was_stopped_without_a_drain(tmp_path, monkeypatch):
    """A server whose readiness endpoint does not answer in time (here a socket that
    accepts and never replies) is stopped without a drain, and `last_stop` says so in
    words (not 'still loaded after the drain timeout' with nothing named)."""
    import socket

    from readability_triton.server import tritonserver as S

    monkeypatch.setattr(S, "READY_BEFORE_DRAIN_S", 0.5)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    stand_in = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        server = S.TritonServer(str(tmp_path), http_port=silent.getsockname()[1], process=stand_in)
        started = time.monotonic()
        code = server.stop()
        assert code == -signal.SIGTERM and time.monotonic() - started < 10
        report = server.last_stop
        assert not report["drained"]
        assert report["error"] == ("it did not answer /v2/health/ready within 0.5 s, so it was stopped without a drain")
    finally:
        silent.close()
        if stand_in.poll() is None:
            stand_in.kill()
