"""`bench` and `perf-input` (`triton.bench`, `cli.bench`).

Integration: `bench --repository` serves the tiny portable repository itself, `bench
--url` loads a server already running; both with short rows. The JSON's per-model
breakdown is checked against what the load did (every step saw exactly the requests the
clients sent in the row), and the PNG is checked for being an image with something drawn.
`perf-input` is checked against perf_analyzer's documented --input-data layout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

import numpy as np
import pytest
from harness import check_png, write_csv
from served import assemble_portable, start_server

from readability_triton import contracts as C
from readability_triton.cli import main
from readability_triton.corpus import generate_corpus
from readability_triton.measure import bench, perf
from readability_triton.repository import configs
from readability_triton.repository.options import AssemblyOptions


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def texts_csv(tmp_path_factory):
    texts, targets = generate_corpus(60, seed=21)
    return write_csv(
        tmp_path_factory.mktemp("bench") / "texts.csv", [(i, t, y) for i, (t, y) in enumerate(zip(texts, targets))]
    )


#: The steps of the served (serial) wiring, whose statistics every row breaks down.
STEPS_IN_REPOSITORY = [m for m in bench.STEPS if m in configs.repository_models()]


def check_rows(report, per_request, concurrency):
    rows = report["rows"]
    assert [(r["texts_per_request"], r["concurrency"]) for r in rows] == [
        (p, c) for p in per_request for c in concurrency
    ]
    for r in rows:
        assert r["errors"] == 0 and r["requests"] > 0
        assert r["texts_per_s"] == pytest.approx(r["requests"] * r["texts_per_request"] / r["seconds"])
        assert 0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
        assert set(r["models"]) == set(STEPS_IN_REPOSITORY)
        for model, m in r["models"].items():
            # the statistics extension, over the row only: exactly the requests the clients sent
            assert m["requests"] == r["requests"] and m["failed"] == 0, model
            assert m["inferences"] == r["requests"] * r["texts_per_request"], model
            assert 1 <= m["executions"] <= m["requests"] and m["average_batch"] >= r["texts_per_request"]
            assert m["average_batch"] == pytest.approx(m["inferences"] / m["executions"])
            for key in ("queue", "compute_input", "compute_infer", "compute_output"):
                assert m[f"{key}_ms_per_request"] is not None and m[f"{key}_ms_per_request"] >= 0
            assert m["compute_infer_ms_per_request"] > 0 and m["compute_infer_ms_per_execution"] > 0
            if m["executions"] == m["requests"]:  # no request shared an execution: the two views agree
                assert m["compute_infer_ms_per_execution"] == pytest.approx(m["compute_infer_ms_per_request"])
    return rows


@pytest.mark.integration
def test_bench_serves_a_repository_itself(tiny_artifacts, tmp_path, texts_csv):
    repo = assemble_portable(tiny_artifacts, str(tmp_path / "repo"))
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    code, printed, err = run(
        "bench",
        "--repository",
        repo,
        "--protocol",
        "grpc",
        "--concurrency",
        "1,3",
        "--duration",
        "2",
        "--warmup",
        "0.5",
        "--data",
        texts_csv,
        "--json",
        str(out),
        "--plot",
        str(plot),
    )
    assert code == 0, err
    report = json.loads(out.read_text())
    rows = check_rows(report, (1,), (1, 3))
    for r in rows:  # the same artifacts in process, in the same run
        assert r["in_process_texts_per_s"] > 0
        assert r["served_vs_in_process"] == pytest.approx(r["texts_per_s"] / r["in_process_texts_per_s"])
    assert "served/in-process" in printed and "per model" in printed
    for model in STEPS_IN_REPOSITORY:
        assert model in printed
    assert "bench" in err  # the progress bar
    check_png(plot, min_width=1500)


@pytest.mark.integration
def test_bench_against_a_running_server(tiny_artifacts, tmp_path, texts_csv):
    repo = assemble_portable(tiny_artifacts, str(tmp_path / "repo"))
    server = start_server(repo, str(tmp_path / "server.log"), str(tmp_path / "backends"))
    try:
        out = tmp_path / "bench.json"
        code, printed, err = run(
            "bench",
            "--url",
            server.http_url,
            "--protocol",
            "http",
            "--concurrency",
            "2",
            "--texts-per-request",
            "1,4",
            "--duration",
            "1.5",
            "--warmup",
            "0.3",
            "--data",
            texts_csv,
            "--artifacts",
            tiny_artifacts,
            "--json",
            str(out),
        )
        assert code == 0, err
        assert "served bert: a Python model; in process: " in err  # what each side of the ratio ran
        rows = check_rows(json.loads(out.read_text()), (1, 4), (2,))
        assert all(r["in_process_texts_per_s"] > 0 for r in rows)
        above = [r for r in rows if r["served_vs_in_process"] > 1]
        assert ("served/in-process above 1" in printed) == bool(above), printed
        code, _, err = run(
            "bench",
            "--url",
            server.http_url,
            "--protocol",
            "http",
            "--concurrency",
            "1",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--data",
            texts_csv,
        )
        assert code == 0 and "in-process row is left out" in err
    finally:
        server.stop()


def test_bench_refusals(tmp_path):
    for argv, message in (
        (("--url", "127.0.0.1:9", "--concurrency", "0"), "at least 1"),
        (("--url", "127.0.0.1:9", "--concurrency", "a,b"), "comma-separated whole numbers"),
        (("--url", "127.0.0.1:9", "--texts-per-request", "65"), "at most 64"),
        (("--url", "127.0.0.1:9", "--duration", "0"), "positive"),
        (("--repository", str(tmp_path), "--artifacts", str(tmp_path)), "--artifacts goes with --url"),
        (("--url", "127.0.0.1:9", "--duration", "1"), "does not answer"),
    ):
        code, _, err = run("bench", *argv)
        assert code == 2 and message in err, (argv, err)


def test_perf_analyzer_retries_unstable_windows_once_twice_as_long(tmp_path):
    """Where no three windows agree, perf_analyzer exits 2 advising longer windows: bench
    runs it once more with windows twice as long; any other failure, or a second unstable
    run, is an error that quotes it. (A stand-in binary that answers as perf_analyzer 2.51
    does; the real one runs in test_perf_analyzer.py.)"""
    calls = tmp_path / "calls"
    fake = tmp_path / "perf_analyzer"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
case " $* " in
  *"--measurement-interval 1000 "*|*"--measurement-interval 2000 "*)
    echo "Failed to obtain stable measurement within 10 measurement windows for concurrency 2. \
Please try to increase the --measurement-interval."; exit 2;;
esac
while [ "$1" != "-f" ]; do shift; done
printf 'Concurrency,Inferences/Second,p50 latency,p99 latency\n2,12.5,150000,300000\n' > "$2"
echo "Request count: 50"
""")
    fake.chmod(0o755)
    result = perf.perf_analyzer("127.0.0.1:1", "grpc", "in.json", clients=2, duration=2.0, binary=str(fake))
    tried = calls.read_text().splitlines()
    assert len(tried) == 2 and "--measurement-interval 2000" in tried[0] and "--measurement-interval 4000" in tried[1]
    assert result["texts_per_s"] == 12.5 and result["p50_ms"] == 150.0 and result["requests"] == 50
    assert "--measurement-interval 4000" in result["command"]
    calls.unlink()
    with pytest.raises(RuntimeError, match="status 2: .*stable measurement"):
        perf.perf_analyzer("127.0.0.1:1", "grpc", "in.json", clients=2, duration=1.0, binary=str(fake))
    assert len(calls.read_text().splitlines()) == 2  # 1000 ms and 2000 ms: both unstable, no third try


def test_perf_input_is_perf_analyzers_documented_layout(tmp_path):
    """perf_analyzer --input-data FILE (docs/input_data.md, "Real Input Data"): {"data": [one
    object per request: {INPUT_NAME: {"content": [...], "shape": [...]}}]}, where a BYTES
    tensor's content is a list of strings and "shape" excludes the batch dimension."""
    rows = [
        (0, "A plain text.", 0.0),
        (1, "Ünïcödé — “quotes”, 漢字, emoji 😀.", -1.0),
        (2, "Two lines,\nand a comma.", 0.5),
    ]
    data = write_csv(tmp_path / "t.csv", rows)
    out = tmp_path / "input.json"
    code, _, err = run("perf-input", "--data", data, "--out", str(out))
    assert code == 0, err
    document = json.loads(out.read_text(encoding="utf-8"))
    assert set(document) == {"data"} and len(document["data"]) == 3
    for entry, (_, text, _) in zip(document["data"], rows):
        assert set(entry) == {C.TEXT}  # the ensemble's only input
        assert entry[C.TEXT] == {"content": [text], "shape": [1]}  # TEXT dims [1], BYTES
    contracts = C.contracts()
    assert contracts[C.ENSEMBLE].inputs[0].name == C.TEXT and list(contracts[C.ENSEMBLE].inputs[0].dims) == [1]
    assert "3 excerpts" in err
    code, _, _ = run("perf-input", "--data", data, "--out", str(out), "--limit", "2")
    assert code == 0 and len(json.loads(out.read_text(encoding="utf-8"))["data"]) == 2
    code, _, err = run("perf-input", "--data", data, "--out", str(out), "--limit", "0")
    assert code == 2 and "at least 1" in err
    bad = write_csv(tmp_path / "bad.csv", [(0, "text")], header=("id", "body"))
    code, _, err = run("perf-input", "--data", bad, "--out", str(out))
    assert code == 2 and "no column 'excerpt'" in err


def test_breakdown_is_the_difference_of_two_snapshots():
    """Unit: the arithmetic on Triton's statistics JSON (durations in ns, counts)."""

    def snapshot(count, executions, ns, texts_per_request=2):
        stats = {
            key: {"count": count, "ns": ns * count}
            for key in ("queue", "compute_input", "compute_infer", "compute_output", "success")
        }
        return {
            C.PREPROCESS: {
                "name": C.PREPROCESS,
                "inference_count": count * texts_per_request,
                "execution_count": executions,
                "inference_stats": stats,
            }
        }

    before, after = snapshot(10, 5, 1_000_000), snapshot(30, 9, 1_000_000)
    # batch_stats: one entry per batch size; there a count is an execution, ns its duration
    before[C.PREPROCESS]["batch_stats"] = [{"batch_size": 2, "compute_infer": {"count": 5, "ns": 5_000_000}}]
    after[C.PREPROCESS]["batch_stats"] = [
        {"batch_size": 2, "compute_infer": {"count": 6, "ns": 6_000_000}},
        {"batch_size": 8, "compute_infer": {"count": 3, "ns": 6_000_000}},
    ]
    got = bench.breakdown(before, after)[C.PREPROCESS]
    assert got["requests"] == 20 and got["inferences"] == 40 and got["executions"] == 4
    assert got["average_batch"] == 10.0 and got["failed"] == 0
    assert got["compute_infer_ms_per_request"] == pytest.approx(1.0)
    assert got["compute_infer_ms_per_execution"] == pytest.approx((1.0 + 6.0) / 4)
    assert got["compute_input_ms_per_execution"] is None  # no batch_stats for it
    assert bench.compute_ms(got) == pytest.approx(3.0)  # input + infer + output, 1 ms each
    assert bench.compute_ms({"compute_infer_ms_per_request": 2.5, "compute_input_ms_per_request": None}) == 2.5
    assert bench.compute_ms(got, "execution") == pytest.approx(7.0 / 4)  # only infer has batch_stats
    assert set(bench.breakdown({}, {})) == set()
    assert np.isclose(bench.breakdown({}, snapshot(4, 4, 2_000_000))[C.PREPROCESS]["queue_ms_per_request"], 2.0)


def test_perf_analyzers_rows_have_their_own_served_vs_in_process_ratio():
    """Unit: with `--engine both` and an in-process rate, perf_analyzer's texts/s are set
    against the same in-process rate as bench's own (a C++ client's ratio beside the Python
    one's), in the table and in the JSON; without an in-process rate there is no ratio."""
    pa = {"texts_per_s": 300.0, "p50_ms": 3.0, "p99_ms": 6.0, "requests": 900, "errors": 0, "command": "pa"}
    row = bench.Row(1, 1, 10.0, 2000, 0, 200.0, {"p50": 4.0, "p95": 5.0, "p99": 6.0}, {}, 600.0, pa)
    assert row.served_vs_in_process == pytest.approx(1 / 3)
    assert row.perf_analyzer_vs_in_process == pytest.approx(0.5)
    assert row.to_dict()["perf_analyzer_vs_in_process"] == pytest.approx(0.5)
    out = io.StringIO()
    bench.print_rows([row], out)
    header, line = out.getvalue().split("perf_analyzer, the same rows right after")[1].splitlines()[1:3]
    assert header.split()[-1] == "perf_analyzer/in-process"
    assert line.split()[-2:] == ["1.50", "0.50"]  # perf_analyzer/bench, perf_analyzer/in-process
    alone = bench.Row(1, 4, 10.0, 2000, 0, 200.0, {"p50": 4.0, "p95": 5.0, "p99": 6.0}, {}, None, pa)
    assert alone.perf_analyzer_vs_in_process is None and alone.to_dict()["perf_analyzer_vs_in_process"] is None
    out = io.StringIO()
    bench.print_rows([alone], out)
    assert out.getvalue().split("perf_analyzer, the same rows right after")[1].splitlines()[2].split()[-1] == "-"


def test_a_ratio_above_1_comes_with_why_and_what_each_side_ran():
    """Unit: a served/in-process ratio above 1 (2.02 at one client was printed with no
    word) is followed by what each side ran and what makes a server faster; at or below 1,
    nothing; cache hits in the row are named."""
    latency = {"p50": 4.0, "p95": 5.0, "p99": 6.0}
    fast = bench.Row(1, 1, 10.0, 2000, 0, 202.0, latency, {}, 100.0)
    slow = bench.Row(1, 4, 10.0, 2000, 0, 90.0, latency, {}, 100.0)
    assert bench.ratio_note([slow]) is None
    note = bench.ratio_note([fast, slow], "model.pt, 2 thread(s)", "Triton's onnxruntime_onnx backend")
    assert note is not None and "2.02 at 1 client(s)" in note and "0.90" not in note
    assert "model.pt, 2 thread(s)" in note and "onnxruntime_onnx" in note and "--repository" in note
    assert "response cache answered" not in note
    cached = bench.Row(1, 1, 10.0, 2000, 0, 202.0, latency, {"bert": {"cache_hits": 40}}, 100.0)
    assert "the response cache answered repeats in 1 of these row(s)" in (bench.ratio_note([cached]) or "")


def test_statistics_are_read_once_the_counts_stop_moving():
    """Unit: python_backend counts an execute after its replies were sent, so the snapshot
    after the last reply waits until two reads agree (and gives up after the timeout)."""
    counts = iter([5, 6, 7, 7, 7])

    def read(url, protocol):
        n = next(counts)
        return {C.PREPROCESS: {"inference_count": n, "execution_count": n}}

    got = bench.settled_statistics("u", "grpc", interval=0.001, read=read)
    assert got[C.PREPROCESS]["inference_count"] == 7
    moving = iter(range(10_000))
    got = bench.settled_statistics(
        "u",
        "grpc",
        interval=0.001,
        timeout=0.02,
        read=lambda url, protocol: {C.PREPROCESS: {"inference_count": next(moving)}},
    )
    assert got[C.PREPROCESS]["inference_count"] > 1  # it stopped at the timeout, still moving


@pytest.mark.parametrize("profile", ["portable", "cpu"])
@pytest.mark.parametrize("bert_format", [None, "onnx", "torchscript"])
def test_the_in_process_row_runs_the_served_bert_format(tiny_artifacts, tmp_path, profile, bert_format):
    """bench compares like with like: its in-process pipeline runs the BERT file the served
    repository holds (portable now serves ONNX by default), with the served thread plan and
    padding."""
    from readability_triton.bert.runner import OnnxRunner, TorchScriptRunner
    from readability_triton.repository import assemble as repository

    repo = str(tmp_path / "repository")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions(profile, bert_format=bert_format))
    served = os.listdir(os.path.join(repo, "bert", "1"))
    expected = "model.pt" if bert_format == "torchscript" else "model.onnx"
    assert expected in served and ({"model.pt", "model.onnx"} - {expected}).isdisjoint(served)
    pipeline = repository.repository_pipeline(repo)
    assert isinstance(pipeline.bert, TorchScriptRunner if bert_format == "torchscript" else OnnxRunner)
    assert repository.served_bert(repo).startswith(expected)
    # rows by the repository's buckets, as preprocess cuts them for a native backend and a Python bert runs them
    joined = profile == "portable" or pipeline.bert.__class__ is OnnxRunner  # configs.fine_buckets
    assert pipeline.bert.buckets == repository.repository_buckets(repo) == C.default_buckets(64, joined)
    assert isinstance(pipeline.forest.threads, int)
    if profile == "portable":
        assert pipeline.forest.threads == 1  # the cheap steps' one thread, as served


def test_first_sentences_are_the_short_texts_bench_sends():
    from readability_triton.corpus import first_sentences

    texts = ['He said "Stop!" Then he left.', "One sentence only", "  Two. Sentences here.  ", "Why? Because."]
    assert first_sentences(texts) == ['He said "Stop!"', "One sentence only", "Two.", "Why?"]


def test_assemble_refuses_bad_buckets(tiny_artifacts, tmp_path):
    from readability_triton.errors import AssemblyError
    from readability_triton.repository import assemble as repository

    for bad in ("16,x", "1,64", "65", ""):
        with pytest.raises(AssemblyError, match="--buckets"):
            repository.assemble(tiny_artifacts, str(tmp_path / "r"), AssemblyOptions("portable", buckets=bad))
    repository.assemble(tiny_artifacts, str(tmp_path / "r"), AssemblyOptions("portable", buckets="32"))
    assert repository.repository_buckets(str(tmp_path / "r")) == (32, 64)
