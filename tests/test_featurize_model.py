"""The `featurize` Triton Python model, run in-process with the pb_utils stub."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from harness import CupyLikeRules, load_model, make_model_dir, output, text_request

from readability_triton import contracts, validation
from readability_triton import layout as artifact_manifest
from readability_triton.device import Device
from readability_triton.features import Vocabulary, build_vocabulary, featurize
from readability_triton.features.formulas import Formulas

FEATURES = contracts.FEATURES


@pytest.fixture(scope="module")
def vocabulary():
    words = [f"w{i}" for i in range(300)]
    texts = [" ".join(words[: i + 1]) for i in range(0, 300, 3)] + ["The cat sat on the mat. Did it? Yes!"]
    return build_vocabulary(texts, stopwords=["the", "on", "it"])


@pytest.fixture
def vocab_file(tmp_path, vocabulary):
    path = tmp_path / "vocabulary.json"
    vocabulary.save(str(path))
    return str(path)


def model_dir(tmp_path, vocab_file, profile="cpu", **render_kw):
    """featurize as a feature step (the parallel wiring's, 26.02+): it scores a text without
    words too. As the serial wiring's first step it refuses one (`first_step_dir`)."""
    render_kw.setdefault("triton_version", "26.02")
    return make_model_dir(
        str(tmp_path / "repo"),
        contracts.FEATURIZE,
        profile=profile,
        files={"vocabulary.json": vocab_file} if vocab_file else None,
        **render_kw,
    )


def test_batches_all_requests_in_one_featurize_call(tmp_path, vocab_file, vocabulary, monkeypatch):
    model = load_model(model_dir(tmp_path, vocab_file))
    calls = []
    real = model.runner

    def counting(texts):
        calls.append(len(texts))
        return real(texts)

    model.runner = counting
    requests = [
        text_request(["The cat sat on the mat.", "w1 w2 w3"]),
        text_request(["Ça va? Oui\u2026 très bien!"]),
        text_request(["", "w5 w5 w5. w7", "don\u2019t stop"]),
    ]
    responses = model.execute(requests)
    assert calls == [6]
    assert len(responses) == 3
    for request_texts, response in zip(
        [
            ["The cat sat on the mat.", "w1 w2 w3"],
            ["Ça va? Oui\u2026 très bien!"],
            ["", "w5 w5 w5. w7", "don\u2019t stop"],
        ],
        responses,
    ):
        got = output(response, FEATURES)
        assert got.dtype == np.float32 and got.shape == (len(request_texts), contracts.N_FEATURES)
        np.testing.assert_array_equal(got, featurize(request_texts, vocabulary))
        np.testing.assert_array_equal(output(response, contracts.WORDS)[:, 0], got[:, 0])  # word_count
        want = Formulas.load()(request_texts)
        for i, name in enumerate(contracts.FORMULAS):
            column = output(response, name)
            assert column.dtype == np.float32 and column.shape == (len(request_texts), 1)
            np.testing.assert_array_equal(column[:, 0], want[:, i])  # NaN for the text without words


def first_step_dir(tmp_path, vocab_file, **render_kw):
    """featurize as the serial wiring's first step (Triton before 26.02, the tested one)."""
    return model_dir(tmp_path, vocab_file, triton_version="24.10", **render_kw)


def test_as_the_first_step_it_refuses_a_request_with_a_text_without_words(tmp_path, vocab_file, vocabulary):
    """From the word counts of its one pass: the request that holds a wordless text gets the
    answer validate gives in the parallel wiring, the others their features."""
    model = load_model(first_step_dir(tmp_path, vocab_file))
    calls = []
    real = model.runner
    model.runner = lambda texts: calls.append(len(texts)) or real(texts)
    groups = [["The cat sat.", "w1 w2"], ["fine", " ... \u2026 ", "w3"], ["w4"], [""], ["w5 w6", "w7"]]
    responses = model.execute([text_request(g) for g in groups])
    assert calls == [9]  # one pass, no second word count, no retry
    for index in (0, 2, 4):
        np.testing.assert_array_equal(output(responses[index], FEATURES), featurize(groups[index], vocabulary))
        np.testing.assert_array_equal(
            output(responses[index], contracts.WORDS)[:, 0], featurize(groups[index], vocabulary)[:, 0]
        )
    validate = load_model(make_model_dir(str(tmp_path / "v"), contracts.VALIDATE, "cpu", triton_version="26.02"))
    for index, row in ((1, 1), (3, 0)):
        error = responses[index].error()
        assert error is not None and error.code() == pb_utils.TritonError.INVALID_ARG
        assert error.message() == validation.NO_WORDS_AT.format(row=row)
        (same,) = validate.execute([text_request(groups[index])])
        assert same.error().message() == error.message()
    # a request alone, and a batch of bad requests only
    (alone,) = model.execute([text_request(["   "])])
    assert alone.error().code() == pb_utils.TritonError.INVALID_ARG
    assert all(r.has_error() for r in model.execute([text_request([""]), text_request([".", "w1"])]))


def test_as_the_first_step_it_still_makes_the_other_checks(tmp_path, vocab_file, vocabulary):
    model = load_model(first_step_dir(tmp_path, vocab_file, max_text_bytes=40))
    responses = model.execute(
        [text_request(["w1"]), text_request(["y" * 41]), text_request([b"\xc3\x28 w"]), text_request(["", "w2"])]
    )
    np.testing.assert_array_equal(output(responses[0], FEATURES), featurize(["w1"], vocabulary))
    for index, expected in ((1, "MAX_TEXT_BYTES"), (2, "not valid UTF-8"), (3, "text 0 of the request holds no words")):
        assert expected in responses[index].error().message()


def test_bad_requests_fail_alone(tmp_path, vocab_file, vocabulary):
    model = load_model(model_dir(tmp_path, vocab_file, max_text_bytes=40))
    ok = ["w1 w2", "x" * 40]  # exactly at the limit
    requests = [
        text_request(ok),
        text_request(["fine", b"\xc3\x28 not UTF-8"]),
        text_request(["y" * 41]),  # over MAX_TEXT_BYTES
        pb_utils.InferenceRequest(inputs=[]),  # no TEXT
        text_request(["w3"]),
    ]
    responses = model.execute(requests)
    assert len(responses) == 5
    np.testing.assert_array_equal(output(responses[0], FEATURES), featurize(ok, vocabulary))
    np.testing.assert_array_equal(output(responses[4], FEATURES), featurize(["w3"], vocabulary))
    for index, expected in ((1, "not valid UTF-8"), (2, "MAX_TEXT_BYTES"), (3, "missing input TEXT")):
        error = responses[index].error()
        assert error is not None and error.code() == pb_utils.TritonError.INVALID_ARG
        assert expected in error.message()


def test_large_batches(tmp_path, vocab_file, vocabulary):
    model = load_model(model_dir(tmp_path, vocab_file))
    rng = np.random.default_rng(1)
    texts = ["".join(rng.choice(list("ab w1w2.'\u2019 \u2026é😀"), size=rng.integers(0, 80))) for _ in range(256)]
    responses = model.execute([text_request(texts[i : i + 32]) for i in range(0, 256, 32)])
    got = np.concatenate([output(r, FEATURES) for r in responses])
    np.testing.assert_array_equal(got, featurize(texts, vocabulary))


def test_missing_or_mismatched_vocabulary(tmp_path, vocab_file):
    with pytest.raises(FileNotFoundError, match="no vocabulary.json"):
        load_model(model_dir(tmp_path / "a", None))
    small = tmp_path / "small.json"
    Vocabulary(["a", "b"], ["c", "d"], []).save(str(small))
    with pytest.raises(ValueError, match=r"FEATURES has dims \[207\] but vocabulary.json gives \[11\]"):
        load_model(model_dir(tmp_path / "b", str(small)))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"top": ["A"], "bottom": ["b"], "stopwords": []}), encoding="utf-8")
    with pytest.raises(ValueError, match="not a word in normal form"):
        load_model(model_dir(tmp_path / "c", str(broken)))


def test_manifest_is_checked_when_present(tmp_path, vocab_file):
    directory = model_dir(tmp_path, vocab_file)
    version = os.path.join(directory, "1")
    artifact_manifest.write_manifest(version, max_length=contracts.DEFAULT_MAX_LENGTH)
    load_model(directory)  # matching checksum
    with open(os.path.join(version, "vocabulary.json"), "a", encoding="utf-8") as handle:
        handle.write(" ")
    with pytest.raises(artifact_manifest.ManifestError, match="checksum"):
        load_model(directory)


def test_manifest_feature_count_must_match(tmp_path, vocab_file):
    directory = model_dir(tmp_path, vocab_file)
    version = os.path.join(directory, "1")
    artifact_manifest.write_manifest(version, max_length=contracts.DEFAULT_MAX_LENGTH, n_features=11)
    with pytest.raises(ValueError, match="manifest.json.*11 features"):
        load_model(directory)


def test_gpu_instance_runs_the_featurizer_on_the_device_module(tmp_path, vocab_file, vocabulary, monkeypatch):
    """A KIND_GPU instance builds its runner on the instance's device and computes with that
    device's array module: here a NumPy stand-in that enforces CuPy's limits (no CUDA on
    this machine; the `gpu` tests run real CuPy). Handing device outputs over through
    DLPack is tested in test_runtime.py."""
    device_module = CupyLikeRules()
    monkeypatch.setattr(Device, "array_module", lambda self: device_module if self.is_gpu else np)
    # as the serial wiring's first step: the word check reads the device's word counts
    model = load_model(first_step_dir(tmp_path, vocab_file, profile="gpu"), kind="GPU", device_id=0)
    assert model.runner.device == Device("gpu", 0) and model.runner.xp is device_module
    texts = [["w1 w2"], ["bad \xff".encode("latin-1")], ["w3", "w4 w4. Don\u2019t!"], ["w5", "?"]]
    responses = model.execute([text_request(t) for t in texts])
    assert responses[1].has_error() and "not valid UTF-8" in responses[1].error().message()
    assert responses[3].error().message() == validation.NO_WORDS_AT.format(row=1)
    for response, group in ((responses[0], texts[0]), (responses[2], texts[2])):
        np.testing.assert_array_equal(output(response, FEATURES), featurize(group, vocabulary))
    assert any("on GPU 0 (cupy_like, CUDA kernels)" in text for _, text in pb_utils.Logger.records)


@pytest.mark.gpu
def test_gpu_instance_with_cupy(tmp_path, vocab_file, vocabulary):
    import cupy

    model = load_model(first_step_dir(tmp_path, vocab_file, profile="gpu"), kind="GPU")
    texts = ["The cat sat on the mat.", "w1 w2 w2. w3?"]
    *responses, wordless = model.execute([text_request(texts[:1]), text_request(texts[1:]), text_request(["..."])])
    assert wordless.error().message() == validation.NO_WORDS_AT.format(row=0)
    got: dict = {}
    for response in responses:
        for name in (FEATURES, contracts.WORDS, *contracts.FORMULAS):
            tensor = pb_utils.get_output_tensor_by_name(response, name)
            assert not tensor.is_cpu()
            got.setdefault(name, []).append(cupy.asnumpy(cupy.from_dlpack(tensor)))
    np.testing.assert_array_equal(np.concatenate(got[FEATURES]), featurize(texts, vocabulary))
    want = Formulas.load()(texts)  # the CPU's values, bit for bit
    for i, name in enumerate(contracts.FORMULAS):
        np.testing.assert_array_equal(np.concatenate(got[name])[:, 0], want[:, i])


def test_gpu_instance_without_cupy_says_so(tmp_path, vocab_file):
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="CuPy is not importable"):
        load_model(model_dir(tmp_path, vocab_file, profile="gpu"), kind="GPU")
