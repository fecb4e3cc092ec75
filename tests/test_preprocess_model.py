"""The `preprocess` Triton Python model, run in-process with the pb_utils stub."""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from harness import (
    CupyLikeRules,
    hf_encode,
    load_model,
    make_model_dir,
    output,
    text_request,
)

from readability_triton import contracts
from readability_triton import layout as M
from readability_triton.device import Device
from readability_triton.repository import configs

#: The default buckets of max_length 64 in the cpu profile, where bert joins every bucket.
BUCKETS_64 = contracts.default_buckets(64, joined=True)


def cut(want, buckets=BUCKETS_64):
    """Hugging Face's padded ids and mask cut to the bucket of the request's longest text, as
    preprocess sends them (BUCKETS_64: 8, 16, ..., 64)."""
    ids, mask = want
    longest = int(mask.sum(axis=1).max())
    width = min(b for b in buckets if b >= longest)
    return ids[:, :width], mask[:, :width]


def tokenizer_files(vocab_dir):
    return {name: os.path.join(vocab_dir, name) for name in ("vocab.txt", "tokenizer.json")}


@pytest.fixture(scope="module")
def model_64(vocab_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    model_dir = make_model_dir(
        str(root),
        contracts.PREPROCESS,
        profile="cpu",
        files=tokenizer_files(vocab_dir),
        max_length=64,
        max_text_bytes=2000,
    )
    return load_model(model_dir)


def test_batches_across_requests(model_64, vocab_dir, commonlit):
    groups = [commonlit.texts[:1], ["", "héllo wörld", "中文 😀"], commonlit.texts[1:3], ["[SEP] x" * 3]]
    responses = model_64.execute([text_request(g) for g in groups])
    assert len(responses) == len(groups)
    for group, response in zip(groups, responses):
        ids = output(response, contracts.INPUT_IDS)
        mask = output(response, contracts.ATTENTION_MASK)
        assert ids.dtype == np.int64 and mask.dtype == np.int64
        want_ids, want_mask = cut(hf_encode(vocab_dir, group, 64))
        assert ids.shape == want_ids.shape and (ids == want_ids).all() and (mask == want_mask).all()
    widths = [output(r, contracts.INPUT_IDS).shape[1] for r in responses]
    assert widths[0] == 64 and widths[1] == 8  # each request its own bucket


def test_one_tokenizer_pass_per_execute(model_64, monkeypatch):
    calls = []
    original = model_64.runner.tokenizer.encode

    def counting(texts, **kw):
        calls.append(len(texts))
        return original(texts, **kw)

    monkeypatch.setattr(model_64.runner.tokenizer, "encode", counting)
    model_64.execute([text_request(["a", "b"]), text_request(["c"]), text_request(["d", "e", "f"])])
    assert calls == [6]


def test_bad_requests_fail_alone(model_64, vocab_dir):
    requests = [
        text_request(["good one"]),
        text_request([b"bad \xff utf-8"]),
        text_request(["fine", "x" * 2001]),  # over MAX_TEXT_BYTES
        text_request(["also good", "twice"]),
    ]
    responses = model_64.execute(requests)
    assert not responses[0].has_error() and not responses[3].has_error()
    for bad, pattern in ((1, "not valid UTF-8"), (2, "over the limit of 2000")):
        assert responses[bad].has_error()
        assert responses[bad].error().code() == pb_utils.TritonError.INVALID_ARG
        assert re.search(pattern, responses[bad].error().message())
    assert (output(responses[0], contracts.INPUT_IDS) == cut(hf_encode(vocab_dir, ["good one"], 64))[0]).all()
    assert output(responses[3], contracts.ATTENTION_MASK).shape == (2, 8)  # 4 tokens: bucket 8


def test_max_length_and_buckets_must_match_output_dims(vocab_dir, tmp_path):
    model_dir = make_model_dir(
        str(tmp_path),
        contracts.PREPROCESS,
        profile="cpu",
        files=tokenizer_files(vocab_dir),
        max_length=32,
        buckets=[32],
    )

    def lengthen(config) -> None:
        assert config.parameters[contracts.MAX_LENGTH].string_value == "32"
        assert config.parameters[contracts.BUCKETS].string_value == "32"
        config.parameters[contracts.MAX_LENGTH].string_value = "48"

    configs.edit_config(os.path.join(model_dir, "config.pbtxt"), lengthen)
    with pytest.raises(ValueError, match=r"INPUT_IDS has dims \[32\] but the length setting .* gives \[-1\]"):
        load_model(model_dir)

    def padded(config) -> None:
        config.parameters[contracts.BUCKETS].string_value = "48"

    configs.edit_config(os.path.join(model_dir, "config.pbtxt"), padded)
    with pytest.raises(ValueError, match=r"INPUT_IDS has dims \[32\] but the length setting .* gives \[48\]"):
        load_model(model_dir)

    def bad(config) -> None:
        config.parameters[contracts.BUCKETS].string_value = "16,99"

    configs.edit_config(os.path.join(model_dir, "config.pbtxt"), bad)
    with pytest.raises(ValueError, match=r"preprocess: parameter BUCKETS 99: each must be a whole number from 2 to"):
        load_model(model_dir)


def test_default_max_length_is_256(vocab_dir, tmp_path):
    model_dir = make_model_dir(str(tmp_path), contracts.PREPROCESS, profile="cpu", files=tokenizer_files(vocab_dir))

    def unset(config) -> None:  # a config without MAX_LENGTH and BUCKETS: padded to 256
        config.parameters.pop(contracts.MAX_LENGTH)
        config.parameters.pop(contracts.BUCKETS)
        for tensor in config.output:
            tensor.dims[:] = [256]

    configs.edit_config(os.path.join(model_dir, "config.pbtxt"), unset)
    model = load_model(model_dir)
    assert model.runner.max_length == contracts.DEFAULT_MAX_LENGTH == 256
    ids = output(model.execute([text_request(["hello"])])[0], contracts.INPUT_IDS)
    assert ids.shape == (1, 256)


def test_manifest_is_checked(vocab_dir, tmp_path):
    model_dir = make_model_dir(
        str(tmp_path), contracts.PREPROCESS, profile="cpu", files=tokenizer_files(vocab_dir), max_length=16
    )
    version = os.path.join(model_dir, "1")
    M.write_manifest(version, max_length=16)
    assert load_model(model_dir).runner.max_length == 16
    M.write_manifest(version, max_length=128)
    with pytest.raises(ValueError, match="built for max_length 128"):
        load_model(model_dir)
    M.write_manifest(version, max_length=16)
    with open(os.path.join(version, "vocab.txt"), "a", encoding="utf-8") as handle:
        handle.write("tampered\n")
    with pytest.raises(M.ManifestError, match="checksum"):
        load_model(model_dir)


def test_missing_tokenizer_files(tmp_path):
    model_dir = make_model_dir(str(tmp_path), contracts.PREPROCESS, profile="cpu", max_length=16)
    with pytest.raises(ValueError, match="preprocess: cannot load the tokenizer: .*no vocab.txt"):
        load_model(model_dir)


def test_gpu_instance_without_cudf_logs_once_and_uploads_the_cpu_ids(vocab_dir, tmp_path, monkeypatch, commonlit):
    """A KIND_GPU instance where cuDF cannot be used: one warning at load that says why, and
    the CPU path's ids (equal to Hugging Face's), uploaded with the device's array module:
    here a NumPy stand-in that enforces CuPy's limits (no CUDA on this machine)."""
    if importlib.util.find_spec("cudf") is not None:
        pytest.skip("cuDF is installed here")
    uploads = []

    class DeviceModule(CupyLikeRules):
        def asarray(self, array, *args, **kwargs):
            uploads.append(array.shape)
            return np.asarray(array, *args, **kwargs)

    device_module = DeviceModule()
    monkeypatch.setattr(Device, "array_module", lambda self: device_module if self.is_gpu else np)
    model_dir = make_model_dir(
        str(tmp_path), contracts.PREPROCESS, profile="gpu", files=tokenizer_files(vocab_dir), max_length=16
    )
    before = len(pb_utils.Logger.records)
    model = load_model(model_dir, kind="GPU")
    lines = [m for level, m in pb_utils.Logger.records[before:] if level == "WARNING"]
    assert len(lines) == 1 and "GPU 0 tokenizes on the CPU (tokenizers) and uploads the ids" in lines[0]
    assert "cuDF" in lines[0] or "CuPy" in lines[0]
    groups = [commonlit.texts[:3], ["héllo wörld", "[SEP] x"]]
    responses = model.execute([text_request(g) for g in groups])
    for group, response in zip(groups, responses):
        want_ids, want_mask = hf_encode(vocab_dir, group, 16)
        assert (output(response, contracts.INPUT_IDS) == want_ids).all()
        assert (output(response, contracts.ATTENTION_MASK) == want_mask).all()
    assert uploads == [(5, 16), (5, 16)]  # ids and mask, once each for the whole batch
    assert len([m for level, m in pb_utils.Logger.records[before:] if level == "WARNING"]) == 1


@pytest.mark.gpu
def test_gpu_instance_outputs_stay_on_the_gpu(vocab_dir, tmp_path, commonlit):
    import cupy

    model_dir = make_model_dir(
        str(tmp_path), contracts.PREPROCESS, profile="gpu", files=tokenizer_files(vocab_dir), max_length=256
    )
    model = load_model(model_dir, kind="GPU")
    groups = [commonlit.texts[:100], ["", "[SEP]", "é" * 200], commonlit.texts[100:101]]
    responses = model.execute([text_request(g) for g in groups])
    for group, response in zip(groups, responses):
        assert not response.has_error()
        tensors = {t.name(): t for t in response.output_tensors()}
        for name in (contracts.INPUT_IDS, contracts.ATTENTION_MASK):
            assert not tensors[name].is_cpu()  # handed over through DLPack, no host copy
        ids = cupy.asnumpy(cupy.from_dlpack(tensors[contracts.INPUT_IDS]))
        mask = cupy.asnumpy(cupy.from_dlpack(tensors[contracts.ATTENTION_MASK]))
        want_ids, want_mask = cut(hf_encode(vocab_dir, group, 256), contracts.default_buckets(256))
        assert ids.shape == want_ids.shape and (ids == want_ids).all() and (mask == want_mask).all()
