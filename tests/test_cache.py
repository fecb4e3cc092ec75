"""Integration: Triton's response cache (`assemble --response-cache`, `serve --cache-size`).

It keeps bert's answers, so a request of texts seen before skips BERT: the statistics and
metrics show the hits, every output selection answers exactly what it answers without the
cache, refusals are never cached, and the cache stays within its size (it evicts). Not the
ensemble's answers: a cached ensemble answer is keyed by the inputs alone and comes back
with the outputs the first request asked for, whatever the next one asks; the last test
shows it on Triton 2.51 with the ensemble cached.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request

import numpy as np
import pytest
from harness import output_selections
from served import Failure, portable_in_process, score_texts, start_server

from readability_triton import contracts as C
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.repository.options import AssemblyOptions

pytestmark = pytest.mark.integration
TEXTS = [
    "The cat sat on the mat. It was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor.",
]
SELECTIONS = output_selections()
CACHE_BYTES = 64 << 10


@pytest.fixture(scope="module")
def cached(tiny_artifacts, tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    repo = str(root / "repository")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions("portable", response_cache=True))
    server = start_server(repo, str(root / "server.log"), cache_size=CACHE_BYTES)
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def expected(tiny_artifacts, tmp_path_factory):
    return portable_in_process(tiny_artifacts, str(tmp_path_factory.mktemp("no-cache")), TEXTS)


def _bert_stats(server) -> dict:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{C.BERT}/stats") as reply:
        stats = json.loads(reply.read())["model_stats"][0]
    return {
        "hits": stats["inference_stats"]["cache_hit"]["count"],
        "misses": stats["inference_stats"]["cache_miss"]["count"],
        "executions": stats["execution_count"],
    }


def _metric(server, name: str) -> float:
    with urllib.request.urlopen(server.metrics_url) as reply:
        text = reply.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, flags=re.M))


def test_a_repeated_text_skips_bert(cached):
    text = ["A text this test sends twice, to see the second answer come from the cache."]
    before = _bert_stats(cached)
    first = score_texts(cached, "grpc", text)
    middle = _bert_stats(cached)
    second = score_texts(cached, "grpc", text)
    after = _bert_stats(cached)
    assert middle["misses"] == before["misses"] + 1 and middle["executions"] == before["executions"] + 1
    assert after["hits"] == middle["hits"] + 1 and after["executions"] == middle["executions"]  # BERT did not run
    for name in C.OUTPUTS:
        np.testing.assert_array_equal(first[name], second[name])
    assert _metric(cached, "nv_cache_num_hits_per_model") >= 1


@pytest.mark.parametrize("client", ["http", "grpc", "curl"])
@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: "none" if s is None else "+".join(s))
def test_every_output_selection_answers_as_without_the_cache(cached, expected, client, selection):
    for _ in range(2):  # a miss (or an earlier test's hit), then surely a hit
        got = score_texts(cached, client, TEXTS, selection)
        assert sorted(got) == sorted(C.OUTPUTS if selection is None else selection)
        for name, array in got.items():
            np.testing.assert_allclose(np.asarray(array, np.float32).reshape(-1), expected[name], atol=1e-5)


def test_refusals_are_never_cached(cached, expected):
    for _ in range(2):
        with pytest.raises(Failure, match="not valid UTF-8"):
            score_texts(cached, "grpc", [b"bad \xff\xfe utf-8"], [C.SCORE])
    got = score_texts(cached, "grpc", [TEXTS[0]], [C.SCORE])
    np.testing.assert_allclose(got[C.SCORE][0, 0], expected[C.SCORE][0], atol=1e-5)


def test_the_cache_stays_within_its_size(cached):
    for i in range(400):  # distinct requests: far more answers than 64 KiB holds
        score_texts(cached, "grpc", [f"Distinct text number {i}, with a few words to score."], [C.SCORE])
    util = _metric(cached, "nv_cache_util")
    assert 0 < util <= 1.0, util
    assert _metric(cached, "nv_cache_num_evictions") > 0 or util < 0.99


def test_an_ensemble_cached_whole_answers_with_the_first_selection(tiny_artifacts, tmp_path):
    """Why the ensemble itself is not cached: Triton 2.51 keys a cached answer by the inputs
    only, so the answer to SCORE alone comes back to a request for all outputs (and the other
    way round)."""
    repo = str(tmp_path / "repository")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions("portable"))
    configs.edit_config(
        os.path.join(repo, C.ENSEMBLE, "config.pbtxt"), lambda config: setattr(config.response_cache, "enable", True)
    )
    server = start_server(repo, str(tmp_path / "server.log"), cache_size=CACHE_BYTES)
    try:
        first = score_texts(server, "grpc", TEXTS, [C.SCORE])
        second = score_texts(server, "http", TEXTS, None)  # asks for all three
        assert sorted(first) == [C.SCORE]
        assert sorted(second) == [C.SCORE], "the ensemble's cache now keys by the outputs asked for"
    finally:
        server.stop()
