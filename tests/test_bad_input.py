"""Integration: bad and odd input on the real tritonserver, each case sent side by side
with good requests that must still get their own, unchanged answers.

Every Python step of the served repository waits 50 ms for more requests, so the bad
request and its neighbours share execute() calls. Valid but odd text gets a score; every
other case gets its own error that says what is wrong; and nothing takes down a stub or
the server (checked at the end).
"""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest
from served import (
    Failure,
    assemble_portable,
    curl_infer,
    infer,
    score_texts,
    side_by_side,
    start_server,
    text_rows,
)

from readability_triton import contracts as C
from readability_triton.repository import configs

pytestmark = pytest.mark.integration

MAX_TEXT_BYTES = 20_000
GOOD = [f"Sentence number {i} is short. It is easy to read, and the next one is{' not' * i} harder." for i in range(6)]


@pytest.fixture(scope="module")
def server(tiny_artifacts, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    repo = assemble_portable(
        tiny_artifacts, str(root / "repository"), batch_window_us=50_000, max_text_bytes=MAX_TEXT_BYTES
    )
    server = start_server(repo, str(root / "server.log"), str(root / "backends"))
    server.log_path = str(root / "server.log")
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def reference(server):
    """Each good text's outputs, asked for alone."""
    return [score_texts(server, "grpc", [text]) for text in GOOD]


@pytest.fixture(scope="module")
def direct(tiny_artifacts):
    """Good inputs for each composing model and what it must answer (computed in process)."""
    from readability_triton.pipeline import Pipeline

    pipeline = Pipeline.from_folder(tiny_artifacts)
    ids, mask = pipeline.tokenizer(GOOD)
    bert = pipeline.bert(ids, mask)
    features, words, *formulas = pipeline.features(GOOD)
    trees = pipeline.forest(features)
    scores = np.linspace(-2, 1, len(GOOD), dtype=np.float32).reshape(-1, 1)
    text = ("BYTES", text_rows(GOOD))
    return {
        C.PREPROCESS: ({C.TEXT: text}, {C.INPUT_IDS: ids, C.ATTENTION_MASK: mask}),
        C.FEATURIZE: (
            {C.TEXT: text},
            {C.FEATURES: features, C.WORDS: words, **dict(zip(C.FORMULAS, formulas))},
        ),
        C.BERT: ({C.INPUT_0: ("INT64", ids), C.INPUT_1: ("INT64", mask)}, {C.OUTPUT_0: bert}),
        C.FOREST: ({C.INPUT_0: ("FP32", features)}, {C.OUTPUT_0: trees}),
        C.POSTPROCESS: (
            {C.BERT_OUTPUT: ("FP32", scores), C.FOREST_OUTPUT: ("FP32", -scores), C.WORDS: ("FP32", words)},
            dict(
                zip(
                    C.SCORE_OUTPUTS,
                    pipeline.blender(scores, -scores, words),  # the set's fitted weights and interval
                )
            ),
        ),
    }


def ensemble(texts, client="grpc"):
    return lambda server: score_texts(server, client, texts)


def ensemble_inputs(inputs: dict, client="grpc"):
    return lambda server: infer(server, client, C.ENSEMBLE, inputs)


def raw_json(body: bytes, model: str = C.ENSEMBLE):
    return lambda server: curl_infer(server, model, {}, body=body)


def to_model(model: str, inputs: dict, client="grpc"):
    return lambda server: infer(server, client, model, inputs)


def _long(n):
    return np.zeros((1, n), np.int64)


def _row(model_inputs, **replace):
    """The first good row of a composing model's inputs, with some inputs replaced."""
    out = {name: (datatype, array[:1]) for name, (datatype, array) in model_inputs.items()}
    out.update(replace)
    return out


NO_WORDS = "holds no words"
NOT_UTF8 = "not valid UTF-8"

# (id, request maker (server, direct) -> call, expected: "score" or a substring of the error)
CASES = [
    ("empty", lambda d: ensemble([""]), NO_WORDS),
    ("whitespace-only", lambda d: ensemble([" \t\n\r  \u3000"], "http"), NO_WORDS),
    ("punctuation-only", lambda d: ensemble(["!!! ... ?? -- ''"], "curl"), NO_WORDS),
    ("invalid-utf8", lambda d: ensemble([b"broken \xff\xfe utf-8"]), NOT_UTF8),
    ("truncated-utf8", lambda d: ensemble([b"caf\xc3"], "http"), NOT_UTF8),
    ("encoded-surrogate", lambda d: ensemble([b"lone \xed\xa0\x80 surrogate"]), NOT_UTF8),
    ("nul-and-controls-with-words", lambda d: ensemble(["a\x00b \x07bell\x1b[0m and\ttabs\x7f."]), "score"),
    ("nul-and-controls-only", lambda d: ensemble(["\x00\x01\x02\x1b\x7f"], "curl"), NO_WORDS),
    ("over-max-text-bytes", lambda d: ensemble(["word " * (MAX_TEXT_BYTES // 5) + "x"]), "over the limit of 20000"),
    ("a-10000-character-word", lambda d: ensemble(["w" * 10_000], "http"), "score"),
    (
        "mixed-scripts-and-emoji",
        lambda d: ensemble(
            ["Ünïcödé — “quotes”, 漢字とかな, עברית, Ελληνικά, русский, emoji 😀🚀👍🏽 and ZWJ 👨‍👩‍👧."], "curl"
        ),
        "score",
    ),
    ("int32-text", lambda d: ensemble_inputs({C.TEXT: ("INT32", np.zeros((1, 1), np.int32))}), "INT32"),
    ("fp32-text", lambda d: ensemble_inputs({C.TEXT: ("FP32", np.zeros((1, 1), np.float32))}, "http"), "FP32"),
    ("shape-[1]", lambda d: ensemble_inputs({C.TEXT: ("BYTES", np.array([b"A text."], dtype=np.object_))}), "shape"),
    (
        "shape-[1,2]",
        lambda d: ensemble_inputs({C.TEXT: ("BYTES", np.array([[b"A text.", b"Two."]], dtype=np.object_))}, "http"),
        "shape",
    ),
    (
        "shape-[2,1]-one-bad-row",
        lambda d: ensemble([GOOD[0], b"\xff bad row"]),
        "text 1 of the request is not valid UTF-8",
    ),
    ("missing-input", lambda d: ensemble_inputs({}), "expected 1 inputs but got 0"),
    (
        "unknown-extra-input",
        lambda d: ensemble_inputs(
            {C.TEXT: ("BYTES", text_rows([GOOD[0]])), "EXTRA": ("INT32", np.zeros((1, 1), np.int32))}
        ),
        "EXTRA",
    ),
    (
        "malformed-json",
        lambda d: raw_json(b'{"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", '),
        "failed to parse the request JSON buffer",
    ),
    (
        "json-data-not-matching-shape",
        lambda d: raw_json(
            json.dumps(
                {"inputs": [{"name": "TEXT", "shape": [2, 1], "datatype": "BYTES", "data": ["only one"]}]}
            ).encode()
        ),
        "TEXT",
    ),
    (
        "json-numbers-as-text",
        lambda d: raw_json(
            json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [42]}]}).encode()
        ),
        "non-string",
    ),
    (
        "nan-straight-to-postprocess",
        lambda d: to_model(
            C.POSTPROCESS, _row(d[C.POSTPROCESS][0], BERT_OUTPUT=("FP32", np.array([[np.nan]], np.float32)))
        ),
        "NaN or infinity",
    ),
    (
        "inf-straight-to-postprocess",
        lambda d: to_model(
            C.POSTPROCESS, _row(d[C.POSTPROCESS][0], FOREST_OUTPUT=("FP32", np.array([[-np.inf]], np.float32))), "http"
        ),
        "NaN or infinity",
    ),
    (
        "out-of-range-token-id-straight-to-bert",
        lambda d: to_model(
            C.BERT, _row(d[C.BERT][0], input__0=("INT64", np.full_like(d[C.BERT][0][C.INPUT_0][1][:1], 10**6)))
        ),
        "token id 1000000, outside the model's vocabulary",
    ),
    (
        "non-0/1-mask-straight-to-bert",
        lambda d: to_model(C.BERT, _row(d[C.BERT][0], input__1=("INT64", d[C.BERT][0][C.INPUT_1][1][:1] * 7)), "http"),
        "only 0 and 1",
    ),
    (  # featurize is the first step of the served (serial) wiring: it refuses alone too
        "wordless-straight-to-featurize",
        lambda d: to_model(C.FEATURIZE, {C.TEXT: ("BYTES", text_rows(["w1 w2", " ... "]))}),
        "text 1 of the request holds no words",
    ),
    (
        "wrong-shape-to-preprocess",
        lambda d: to_model(C.PREPROCESS, {C.TEXT: ("BYTES", np.array([[b"a", b"b"]], dtype=np.object_))}, "http"),
        "shape",
    ),
    (
        "wrong-shape-to-featurize",
        lambda d: to_model(C.FEATURIZE, {C.TEXT: ("BYTES", np.array([b"a"], dtype=np.object_))}),
        "shape",
    ),
    (
        "wrong-shape-to-bert",
        # any width up to max_length is a bucket's (the ids' dims are [-1]); more is refused
        lambda d: to_model(C.BERT, {C.INPUT_0: ("INT64", _long(300)), C.INPUT_1: ("INT64", _long(300))}),
        "shape",
    ),
    (
        "wrong-shape-to-forest",
        lambda d: to_model(C.FOREST, {C.INPUT_0: ("FP32", np.zeros((1, 5), np.float32))}, "http"),
        "shape",
    ),
    (
        "wrong-shape-to-postprocess",
        lambda d: to_model(
            C.POSTPROCESS,
            {
                C.BERT_OUTPUT: ("FP32", np.zeros((1, 2), np.float32)),
                C.FOREST_OUTPUT: ("FP32", np.zeros((1, 2), np.float32)),
                C.WORDS: ("FP32", np.ones((1, 2), np.float32)),
            },
        ),
        "shape",
    ),
    (
        "wrong-dtype-to-bert",
        lambda d: to_model(
            C.BERT, _row(d[C.BERT][0], input__0=("FP32", d[C.BERT][0][C.INPUT_0][1][:1].astype(np.float32)))
        ),
        "FP32",
    ),
]


def _neighbours(server, direct, model):
    """Good requests sent beside the bad one: to the ensemble over each protocol, and, for a
    case aimed at a composing model, to that model too (so that they share its batches)."""
    calls = []
    for i, text in enumerate(GOOD):
        calls.append(("ensemble", i, lambda text=text, i=i: score_texts(server, ("grpc", "http")[i % 2], [text])))
    if model is not None:
        inputs, _ = direct[model]
        for i in range(len(GOOD)):
            row = {name: (datatype, array[i : i + 1]) for name, (datatype, array) in inputs.items()}
            calls.append((model, i, lambda row=row, i=i: infer(server, ("grpc", "http")[i % 2], model, row)))
    return calls


def _model_of(case_id: str) -> str | None:
    for model in C.STEP_MODELS:
        if case_id.endswith(f"-{model}") or case_id.endswith(f"to-{model}"):
            return model
    return None


@pytest.mark.parametrize("case_id, make, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_or_odd_request_beside_good_ones(server, reference, direct, case_id, make, expected):
    bad = make(direct)
    model = _model_of(case_id)
    neighbours = _neighbours(server, direct, model)
    results = side_by_side([lambda: bad(server)] + [call for _, _, call in neighbours])
    outcome, rest = results[0], results[1:]
    if expected == "score":
        assert not isinstance(outcome, Exception), f"{case_id}: valid (if odd) text must be scored: {outcome}"
        assert outcome[C.SCORE].shape == (1, 1) and np.isfinite(outcome[C.SCORE]).all()
    else:
        assert isinstance(outcome, Failure), f"{case_id}: should be refused, got {outcome!r}"
        assert expected in outcome.message, f"{case_id}: {outcome.message}"
        assert "\n" not in outcome.message and len(outcome.message) < 600, outcome.message
        assert "Traceback" not in outcome.message
    for (target, i, _), result in zip(neighbours, rest):
        assert not isinstance(result, Exception), f"{case_id}: good request {i} to {target} failed: {result}"
        want = reference[i] if target == "ensemble" else direct[target][1]
        for name, array in result.items():
            expected_rows = want[name] if target == "ensemble" else want[name][i : i + 1]
            if target == C.PREPROCESS:  # alone, the row is cut to its own bucket: the rest was padding
                assert not expected_rows[:, array.shape[1] :].any(), f"{name}: cut before the last token"
                expected_rows = expected_rows[:, : array.shape[1]]
            if array.dtype == np.object_:
                assert array.tolist() == expected_rows.tolist()
            elif name in NEAR and target in ("ensemble", C.BERT):
                # batch composition may change BERT's float rounding in the last bits
                np.testing.assert_allclose(array, expected_rows, atol=1e-5, rtol=0, err_msg=f"{target} {name}")
            else:
                np.testing.assert_array_equal(array, expected_rows, err_msg=f"{target} {name}")


#: What BERT's float rounding moves: its score and everything blended from it.
NEAR = (C.SCORE, C.BERT_SCORE, C.SCORE_LOW, C.SCORE_HIGH, C.OUTPUT_0)


def test_nothing_was_taken_down(server, reference):
    """After every case above: the server and every stub still serve, and no stub died."""
    assert server.process.poll() is None
    for model in configs.repository_models():
        with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/ready") as reply:
            assert reply.status == 200, model
    for i, text in enumerate(GOOD):
        got = score_texts(server, "curl", [text])
        np.testing.assert_array_equal(got[C.FOREST_SCORE], reference[i][C.FOREST_SCORE])
    with open(server.log_path, encoding="utf-8", errors="replace") as handle:
        log = handle.read()
    for sign in ("not healthy", "Signal (11)", "terminate called", "error_already_set"):
        assert sign not in log, sign
