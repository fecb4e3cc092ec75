"""Integration: every request a Triton client can make gets the right answer.

On the real tritonserver (the portable profile, as assembled and fused): every output
selection (none, each output alone, pairs, all, seeded subsets: `harness.output_selections`)
over tritonclient HTTP, tritonclient gRPC and curl with KServe v2 JSON equals the
all-outputs answer; the batch limits; `score` and `evaluate --url` with a selection. Bad and
odd input is in test_bad_input.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from harness import output_selections
from served import CLIENTS, Failure, score_texts, served_weights

from readability_triton import contracts as C
from readability_triton import metrics, scoring
from readability_triton.features.formulas import Formulas

pytestmark = pytest.mark.integration

TEXTS = [
    "The cat sat on the mat. It was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor.",
    "Ünïcödé — “quotes”, 漢字とかな, emoji 😀🚀.",
]
SELECTIONS = output_selections()


@pytest.fixture(scope="module", params=["portable", "fused"])
def server(request):
    """The portable repository as assembled, and its fused form (`assemble --fused`)."""
    return request.getfixturevalue(f"{request.param}_server")


@pytest.fixture(scope="module")
def reference(server):
    """The all-outputs answer, asked for by name over HTTP."""
    return score_texts(server, "http", TEXTS, list(C.OUTPUTS))


def test_reference_is_complete(reference, server):
    assert sorted(reference) == sorted(C.OUTPUTS)
    for name, array in reference.items():
        assert array.dtype == np.float32 and array.shape == (len(TEXTS), 1) and np.isfinite(array).all(), name
    weights = served_weights(server.repository)  # the artifact set's fitted weights
    np.testing.assert_array_equal(
        reference[C.SCORE], scoring.blend(reference[C.BERT_SCORE], reference[C.FOREST_SCORE], *weights)
    )


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: "none" if s is None else "+".join(s))
def test_every_output_selection_gets_the_right_answer(server, reference, client, selection):
    got = score_texts(server, client, TEXTS, selection)
    assert sorted(got) == sorted(C.OUTPUTS if selection is None else selection)
    for name, array in got.items():
        # the same texts alone in one request: the same batch, so the same numbers
        np.testing.assert_array_equal(array.astype(np.float32).reshape(-1, 1), reference[name], err_msg=name)


#: The formulas' words and sentences (docs/formulas.md), and a text with no Latin letter:
#: its seven formulas are NaN, its scores are not.
FORMULA_TEXTS = [
    "Mr. Smith went to Washington. The U.S. economy grew 52.2% to 2,200,000 jobs.",
    "We met Amelia today. She repeated a beautiful song... then left!",
    "漢字とかな 😀🚀",
]


@pytest.mark.parametrize("client", CLIENTS)
def test_the_served_formulas_are_the_library_s(server, client):
    got = score_texts(server, client, FORMULA_TEXTS, [C.SCORE, *C.FORMULAS])
    want = Formulas.load()(FORMULA_TEXTS)
    assert np.isnan(want[2]).all() and np.isfinite(want[:2]).all()
    for i, name in enumerate(C.FORMULAS):
        np.testing.assert_array_equal(got[name].astype(np.float32).reshape(-1), want[:, i], err_msg=name)
    assert np.isfinite(got[C.SCORE]).all()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_request_of_max_batch_size_texts(server, reference, client):
    n = C.MAX_BATCH_SIZE[C.ENSEMBLE]
    texts = [TEXTS[i % len(TEXTS)] for i in range(n)]
    got = score_texts(server, client, texts, [C.SCORE, C.FOREST_SCORE])
    assert got[C.SCORE].shape == (n, 1)
    want = np.tile(reference[C.FOREST_SCORE], (n // len(TEXTS) + 1, 1))[:n]
    np.testing.assert_array_equal(got[C.FOREST_SCORE].astype(np.float32).reshape(-1, 1), want)
    # BERT's batched matrix products may round differently from a batch of 3
    want = np.tile(reference[C.SCORE], (n // len(TEXTS) + 1, 1))[:n]
    np.testing.assert_allclose(got[C.SCORE].astype(np.float32).reshape(-1, 1), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("client", CLIENTS)
def test_one_text_over_max_batch_size_is_refused_clearly(server, reference, client):
    n = C.MAX_BATCH_SIZE[C.ENSEMBLE] + 1
    with pytest.raises(Failure) as refused:
        score_texts(server, client, [TEXTS[0]] * n)
    assert f"must be <= {n - 1}" in refused.value.message, refused.value.message
    # and the server keeps serving
    np.testing.assert_array_equal(score_texts(server, client, TEXTS)[C.SCORE].reshape(-1, 1), reference[C.SCORE])


def _cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "readability_triton.cli", *args], capture_output=True, text=True, timeout=120, **kw
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_score_command_with_any_selection(server, reference, protocol, tmp_path):
    url = server.http_url if protocol == "http" else server.grpc_url
    for selection in SELECTIONS[1:]:
        out = tmp_path / "scores.csv"
        result = _cli(
            "score", *TEXTS, "--url", url, "--protocol", protocol, "--outputs", ",".join(selection), "--out", str(out)
        )
        assert result.returncode == 0, result.stderr
        header, *rows = out.read_text(encoding="utf-8").splitlines()
        chosen = [n for n in C.OUTPUTS if n in selection]  # the CSV's columns: the ensemble's order
        want_columns = ["text"] + [n.lower() for n in chosen]
        assert header.split(",") == want_columns
        values = [list(map(float, r.rsplit(",", len(want_columns) - 1)[1:])) for r in rows]
        for column, name in enumerate(chosen):
            assert [v[column] for v in values] == pytest.approx(reference[name].ravel().tolist(), abs=1e-6)
    table = _cli("score", TEXTS[0], "--url", url, "--protocol", protocol, "--outputs", "BERT_SCORE")
    assert table.returncode == 0 and table.stdout.splitlines()[0].split() == ["text", "BERT"], table.stdout
    refused = _cli("score", TEXTS[0], "--url", url, "--outputs", "SCORE,LOUDNESS")
    assert refused.returncode == 2 and "LOUDNESS" in refused.stderr and "choose one or more" in refused.stderr


def test_evaluate_through_the_server_with_any_selection(server, reference, tmp_path):
    data = tmp_path / "held.csv"
    targets = [0.5, -1.0, -2.0]
    data.write_text("excerpt,target\n" + "".join(f'"{t}",{y}\n' for t, y in zip(TEXTS, targets)), encoding="utf-8")
    scored = (C.SCORE, C.BERT_SCORE, C.FOREST_SCORE)
    for selection in SELECTIONS[1:]:
        result = _cli(
            "evaluate",
            "--url",
            server.grpc_url,
            "--protocol",
            "grpc",
            "--data",
            str(data),
            "--json",
            "--outputs",
            ",".join(selection),
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert sorted(report.get("rmse", {})) == sorted(n for n in selection if n in scored)
        for name in (n for n in selection if n in scored):
            want = float(np.sqrt(np.mean((reference[name].ravel().astype(np.float64) - targets) ** 2)))
            assert report["rmse"][name] == pytest.approx(want, abs=1e-6)
        assert sorted(report.get("formulas", {})) == sorted(n for n in selection if n in C.FORMULAS)
        for name in (n for n in selection if n in C.FORMULAS):
            want = metrics.spearman(reference[name].ravel(), targets)
            assert report["formulas"][name] == pytest.approx(want, abs=1e-9, nan_ok=True)
        # coverage where the selection has both ends of the interval
        assert ("interval" in report) == ({C.SCORE_LOW, C.SCORE_HIGH} <= set(selection))
        if "interval" in report:
            low, high = reference[C.SCORE_LOW].ravel(), reference[C.SCORE_HIGH].ravel()
            inside = np.mean([lo <= y <= hi for lo, y, hi in zip(low, targets, high)])
            assert report["interval"]["bands"][0]["band"] == "all"
            assert report["interval"]["bands"][0]["coverage"] == pytest.approx(inside)


def _counters(server) -> dict:
    import re
    import urllib.request

    with urllib.request.urlopen(server.metrics_url) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        match = re.match(
            r"(nv_inference_request_success|nv_inference_request_failure|nv_inference_count)"
            r"\{(.*?)\} (\S+)",
            line,
        )
        if match:
            model = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2))).get("model")
            out[(match.group(1), model)] = out.get((match.group(1), model), 0) + float(match.group(3))
    return out


def test_what_the_metrics_count_for_refused_requests(server):
    """Pins what docs/operations.md's metrics section says Triton 2.51 counts (an upgrade that
    changes it fails here, so the docs get updated): the ensemble counts successes
    exactly and each refused request as two failures; a Python model counts the requests
    it refuses as successes; the branches never see a refused request."""
    from served import Failure, infer, settled, text_rows

    before = _counters(server)
    for text in TEXTS[:2]:
        score_texts(server, "grpc", [text])
    for bad in (b"\xff\xfe", b"   "):
        with pytest.raises(Failure):
            score_texts(server, "grpc", [bad])
    with pytest.raises(Failure):
        infer(server, "grpc", C.FEATURIZE, {C.TEXT: ("BYTES", text_rows([b"\xff"]))})
    want = {
        ("nv_inference_request_success", C.ENSEMBLE): 2,
        ("nv_inference_request_failure", C.ENSEMBLE): 4,  # 2 refused, counted twice
        # featurize, the served wiring's first step: 2 good + 2 refused (its refusals count
        # as successes) + the one refused directly
        ("nv_inference_request_success", C.FEATURIZE): 5,
        ("nv_inference_request_failure", C.FEATURIZE): 0,
        ("nv_inference_request_success", C.PREPROCESS): 2,  # the BERT branch sees good ones only
        ("nv_inference_request_failure", C.PREPROCESS): 0,
    }

    def delta():
        after = _counters(server)
        return {key: after.get(key, 0) - before.get(key, 0) for key in want}

    got = settled(delta, lambda d: d == want)
    assert got == want
