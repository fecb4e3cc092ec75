"""Integration: BERT's sequence-length buckets against a real tritonserver.

preprocess cuts each request's ids to the smallest bucket that holds its longest text, and
bert (Triton's ONNX Runtime backend in `cpu`, ONNX Runtime in a Python model in `portable`)
runs what it is handed. The answers must not move: BERT_SCORE and SCORE of a repository
assembled with the default buckets equal those of one padded to the sequence length
(`--buckets <max_length>`) within 1e-5, on 256 CommonLit excerpts and 256 short texts (their
first sentences), served side by side. Also: what preprocess hands on has the bucket's width,
bert takes any width a client sends (a Python bert refuses 0 and more than max_length, beside
a good request), and the dynamic batcher still batches requests of one bucket.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from served import Failure, infer, score_texts, side_by_side, start_server

from readability_triton import contracts as C
from readability_triton.corpus import first_sentences
from readability_triton.measure.bench import breakdown, settled_statistics
from readability_triton.repository import assemble as repository
from readability_triton.repository.configs import read_config
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server.installation import native_backends

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def texts(commonlit):
    excerpts = list(commonlit.texts[:256])
    return {"excerpts": excerpts, "short": first_sentences(excerpts)}


@pytest.fixture(scope="module", params=["portable", "cpu"])
def pair(request, tiny_artifacts, tmp_path_factory):
    """(bucketed server, padded server, max_length) of one profile, both running."""
    if request.param == "cpu" and native_backends() is None:
        pytest.skip("Triton's native backends are not built (`make native-backends`)")
    root = tmp_path_factory.mktemp(f"buckets-{request.param}")
    manifest = None
    servers = []
    for name, buckets in (("bucketed", None), ("padded", "padded")):
        repo = str(root / name)
        manifest = repository.assemble(
            tiny_artifacts,
            repo,
            AssemblyOptions(request.param, bert_format="onnx", buckets=None if buckets is None else [64]),
        )
        native = native_backends() if request.param == "cpu" else None
        servers.append(start_server(repo, str(root / f"{name}.log"), native=native))
    assert manifest.max_length == 64  # the tiny set: default buckets 8, 16, ..., 64
    yield servers[0], servers[1], manifest.max_length
    for server in servers:
        assert server.stop() == 0


@pytest.mark.parametrize("data", ["excerpts", "short"])
def test_bucketed_scores_equal_padded_ones(pair, texts, data):
    bucketed, padded, _ = pair
    chunk = 32
    rows = texts[data]
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        got = score_texts(bucketed, "grpc", part, [C.BERT_SCORE, C.SCORE])
        want = score_texts(padded, "grpc", part, [C.BERT_SCORE, C.SCORE])
        for name in (C.BERT_SCORE, C.SCORE):
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=f"{data} {start} {name}")
    if data == "short":
        assert len(set(np.round(got[C.BERT_SCORE].ravel(), 4))) > 1  # the texts score apart


def test_one_text_at_a_time_answers_the_same(pair, texts):
    """One text per request, each its own bucket, as production sends them."""
    bucketed, padded, _ = pair
    for text in texts["short"][:16] + texts["excerpts"][:4]:
        got = score_texts(bucketed, "http", [text], [C.BERT_SCORE])[C.BERT_SCORE]
        want = score_texts(padded, "http", [text], [C.BERT_SCORE])[C.BERT_SCORE]
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=text)


def test_preprocess_hands_on_each_request_cut_to_its_bucket(pair):
    bucketed, padded, max_length = pair
    buckets = repository.repository_buckets(bucketed.repository)
    assert buckets == C.default_buckets(max_length, joined=True)  # both profiles join every bucket here
    widths = set()
    for group in (("Tom ran.",), ("Tom ran.", "word " * 20), ("word " * 40,), ("word " * 200,)):
        rows = np.array([[t.encode()] for t in group], dtype=np.object_)
        got = infer(bucketed, "grpc", C.PREPROCESS, {C.TEXT: ("BYTES", rows)}, [C.INPUT_IDS, C.ATTENTION_MASK])
        full = infer(padded, "grpc", C.PREPROCESS, {C.TEXT: ("BYTES", rows)}, [C.INPUT_IDS, C.ATTENTION_MASK])
        assert full[C.INPUT_IDS].shape == (len(group), max_length)
        width = min(b for b in buckets if b >= full[C.ATTENTION_MASK].sum(axis=1).max())  # the longest text's bucket
        assert got[C.INPUT_IDS].shape == got[C.ATTENTION_MASK].shape == (len(group), width), group
        assert (full[C.INPUT_IDS][:, :width] == got[C.INPUT_IDS]).all() and not full[C.ATTENTION_MASK][:, width:].any()
        widths.add(width)
    assert len(widths) == 4 and max(widths) == max_length, widths


def test_bert_takes_any_width_and_a_python_bert_refuses_bad_ones_alone(pair):
    bucketed, _, max_length = pair
    python = read_config(f"{bucketed.repository}/bert/config.pbtxt").backend == "python"

    def call(width):
        ids = np.full((1, width), 1000, dtype=np.int64)
        if width:
            ids[0, 0] = 101
        return infer(
            bucketed,
            "grpc",
            C.BERT,
            {C.INPUT_0: ("INT64", ids), C.INPUT_1: ("INT64", np.ones_like(ids))},
            [C.OUTPUT_0],
        )

    for width in (3, 17, max_length):
        assert np.isfinite(call(width)[C.OUTPUT_0]).all()
    if python:
        results = side_by_side([lambda: call(8), lambda: call(max_length + 1), lambda: call(0), lambda: call(8)])
        assert not isinstance(results[0], Exception) and not isinstance(results[3], Exception), results
        for bad in results[1:3]:
            assert isinstance(bad, Failure) and "the model takes rows of 1 to 64 tokens" in bad.message, bad


def test_the_batcher_still_batches_within_a_bucket(pair, texts):
    """Eight clients of short texts (fewer than 8 words: buckets 8 and 16, which both
    servers' bert joins): bert runs fewer executions than requests."""
    bucketed, _, _ = pair
    before = settled_statistics(bucketed.grpc_url, "grpc")
    # 64 requests (the 27 such texts, again): with 27, eight clients of
    # 3-4 requests each met no queue at bert once in four CI runs (27 executions)
    short = [t for t in texts["short"] if len(t.split()) < 8]
    short = (short * (64 // len(short) + 1))[:64]
    results = side_by_side([lambda k=k: [score_texts(bucketed, "grpc", [t]) for t in short[k::8]] for k in range(8)])
    assert not any(isinstance(r, Exception) for r in results), results
    row = breakdown(before, settled_statistics(bucketed.grpc_url, "grpc"), [C.BERT])[C.BERT]
    assert row["inferences"] == len(short) and row["executions"] < row["inferences"], row


def test_the_ragged_bert_batches_requests_of_every_bucket_together(pair):
    """bert takes its ids ragged (cpu: the ragged graph, configs.ragged_bert; portable: a
    Python bert runs what it is handed by bucket), so requests of several widths queued at
    once run in few executions; the batcher would end a batch at every change of shape
    otherwise (32 requests alternating 16 and 64 tokens: 31 executions, measured with
    --no-ragged). Each answer equals the one its request gets alone."""
    import tritonclient.grpc as grpcclient

    bucketed, _, max_length = pair
    config = read_config(f"{bucketed.repository}/bert/config.pbtxt")
    assert [t.allow_ragged_batch for t in config.input] == [True, True]
    assert len(config.batch_input) == (0 if config.backend == "python" else 2)
    rng = np.random.default_rng(7)
    requests = []
    for k in range(32):
        width = 16 if k % 2 else max_length
        ids = rng.integers(1000, 5000, (1 + k % 3, width), dtype=np.int64)
        ids[:, 0] = 101
        mask = np.ones_like(ids)
        mask[:, width - 3 :] = 0  # some padding of their own
        ids[mask == 0] = 0
        requests.append((ids, mask))
    alone = [
        infer(bucketed, "grpc", C.BERT, _bert_inputs(ids, mask), [C.OUTPUT_0])[C.OUTPUT_0] for ids, mask in requests
    ]
    # one bad neighbour: a mask 8 columns wider than its ids (a client calling bert directly)
    ids, mask = requests[5]
    requests[5] = (ids, np.concatenate([mask, np.ones((len(mask), 8), dtype=np.int64)], axis=1))
    rows = []
    for _ in range(5):  # a burst the server outruns (a loaded CI host) forms no queue: try again
        row = _burst(bucketed, grpcclient, requests, alone, config.backend == "python")
        rows.append(row)
        # the shapes alternate: about a batch per request without ragged (31 of 32 measured), 8-18 with
        if row["executions"] <= len(requests) * 3 // 4:
            break
    else:
        raise AssertionError(f"no burst batched requests of several widths together: {rows}")


def _burst(bucketed, grpcclient, requests, alone, python: bool) -> dict:
    """The requests sent at once (async); each answer checked; bert's statistics for them."""
    before = settled_statistics(bucketed.grpc_url, "grpc")
    client = grpcclient.InferenceServerClient(bucketed.grpc_url)
    done: list = [None] * len(requests)
    finished = threading.Semaphore(0)
    try:
        for k, (ids, mask) in enumerate(requests):
            inputs = []
            for name, array in ((C.INPUT_0, ids), (C.INPUT_1, mask)):
                tensor = grpcclient.InferInput(name, list(array.shape), "INT64")
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)

            def callback(result, error, k=k):
                done[k] = error if error is not None else result.as_numpy(C.OUTPUT_0)
                finished.release()

            client.async_infer(C.BERT, inputs, callback)
        for _ in requests:
            assert finished.acquire(timeout=60)
    finally:
        client.close()
    for k, got in enumerate(done):
        if k == 5:  # refused alone (a Python bert), or answered from its own rows (the ragged graph)
            assert isinstance(got, Exception) if python else np.isfinite(got).all(), got
            continue
        assert not isinstance(got, Exception), got
        np.testing.assert_allclose(got, alone[k], atol=1e-5, err_msg=f"request {k}")
    row = breakdown(before, settled_statistics(bucketed.grpc_url, "grpc"), [C.BERT])[C.BERT]
    assert row["inferences"] >= sum(len(ids) for ids, _ in requests) - len(requests[5][0])
    return row


def _bert_inputs(ids, mask):
    return {C.INPUT_0: ("INT64", ids), C.INPUT_1: ("INT64", mask)}
