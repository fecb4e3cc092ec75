"""`assemble`: complete repositories for every profile, and refusal of artifacts that do
not fit; the native (libtorch, FIL) artifacts load the way those backends load them."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from readability_triton import cli
from readability_triton import contracts as C
from readability_triton import layout as M
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs, profiles
from readability_triton.repository.canary import Canary
from readability_triton.repository.options import AssemblyOptions


def parse(path):
    with open(path, encoding="utf-8") as handle:
        return text_format.Parse(handle.read(), model_config_pb2.ModelConfig())


@pytest.mark.parametrize("profile", profiles.PROFILES)
def test_assembled_repository_is_complete(tiny_artifacts, tmp_path, profile):
    out = tmp_path / profile
    manifest = repository.assemble(tiny_artifacts, str(out), AssemblyOptions(profile))
    models = configs.repository_models()  # the tested release's serial wiring: no validate
    assert sorted(os.listdir(out)) == sorted(models) and C.VALIDATE not in models
    contracts = C.contracts(manifest.max_length, manifest.n_features)
    for model in models:
        config = parse(out / model / "config.pbtxt")
        assert [t.name for t in config.input] == [s.name for s in contracts[model].inputs]
        batch = () if config.max_batch_size else (-1,)  # FIL carries its batch dimension itself
        assert [tuple(t.dims) for t in config.output] == [batch + s.dims for s in contracts[model].outputs]
        version = out / model / "1"
        python = profiles.backend_file(model, profile)
        assert (version / "model.py").is_file() == (python is not None)
        if python:
            source = os.path.join(repository.backends_root(), python, "model.py")
            assert (version / "model.py").read_bytes() == open(source, "rb").read()
            assert not (version / "model.py").is_symlink()
    for model, names in M.MODEL_FILES.items():
        for name in names + (M.MANIFEST,):
            assert (out / model / "1" / name).is_file(), f"{model}/1/{name}"
    # the set holds both BERT formats: portable-gpu serves TorchScript (torch on CUDA), the
    # others ONNX (portable in ONNX Runtime, in a Python model)
    want = {"portable-gpu": ["model.pt", "model.py"], "portable": ["model.onnx", "model.py"]}.get(
        profile, ["model.onnx"]
    )
    assert sorted(p.name for p in (out / "bert" / "1").glob("model.*")) == want
    # portable-gpu: the forest's arrays for the CuPy tree walk, from the copied checkpoint
    assert (out / "forest" / "1" / "forest_arrays.npz").is_file() == (profile == "portable-gpu")
    assert (out / "preprocess" / "1" / "tokenizer.json").is_file()
    max_length = parse(out / "preprocess" / "config.pbtxt").parameters[C.MAX_LENGTH].string_value
    assert int(max_length) == manifest.max_length == 64


@pytest.mark.parametrize("bert_format", ["onnx", "torchscript"])
def test_native_artifacts_load_like_their_backends(tiny_artifacts, tmp_path, bert_format):
    """What onnxruntime, pytorch_libtorch and FIL do with the gpu/cpu repositories, done
    in-process: an ONNX Runtime session fed the config's inputs by name, or
    torch::jit::load + forward(input__0, input__1) in config order; Treelite deserialize
    (the FIL backend reads Treelite 4.x checkpoints) with the config's feature count."""
    import treelite
    import treelite.gtil

    out = tmp_path / "cpu"
    repository.assemble(tiny_artifacts, str(out), AssemblyOptions("cpu", bert_format=bert_format))
    bert = parse(out / "bert" / "config.pbtxt")
    assert [list(t.dims) for t in bert.input] == [[-1], [-1]]  # the ids come cut to their bucket
    for width in (16, 64):  # every bucket the warm-up runs is a shape the model takes
        inputs = [np.ones((3, width), dtype=np.int64) for _ in bert.input]
        _run_natively(out, bert, bert_format, inputs)

    forest = parse(out / "forest" / "config.pbtxt")
    assert forest.backend == "fil" and forest.parameters["model_type"].string_value == "treelite_checkpoint"
    model = treelite.Model.deserialize(str(out / "forest" / "1" / "checkpoint.tl"))
    assert forest.max_batch_size == 0 and forest.input[0].dims[0] == -1  # non-batching (configs.fil_io)
    assert model.num_feature == forest.input[0].dims[1] == C.N_FEATURES
    header = json.loads(model.dump_as_json(pretty_print=False))
    assert header["num_target"] == 1 and header["num_class"] == [1], "a single-output regressor"
    assert treelite.gtil.predict(model, np.zeros((2, C.N_FEATURES), np.float32)).size == 2


def _run_natively(out, bert, bert_format, inputs):
    import torch

    if bert_format == "onnx":
        import onnxruntime

        assert bert.platform == "onnxruntime_onnx"
        session = onnxruntime.InferenceSession(
            str(out / "bert" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        # the model's inputs: the config's, then its batch inputs (the ragged graph: each row's width)
        batch_inputs = [name for b in bert.batch_input for name in b.target_name]
        assert [i.name for i in session.get_inputs()] == [t.name for t in bert.input] + batch_inputs
        assert [o.name for o in session.get_outputs()] == [t.name for t in bert.output]
        # fed as the backend feeds it: a ragged input flat, BATCH_ITEM_SHAPE [rows, 1] int32
        feed = {t.name: a.reshape(-1) if t.allow_ragged_batch else a for t, a in zip(bert.input, inputs)}
        widths = {t.name: a.shape[1] for t, a in zip(bert.input, inputs)}
        for b in bert.batch_input:
            assert model_config_pb2.BatchInput.Kind.Name(b.kind) == "BATCH_ITEM_SHAPE"
            feed[b.target_name[0]] = np.full((len(inputs[0]), 1), widths[b.source_input[0]], dtype=np.int32)
        (result,) = session.run(None, feed)
        assert result.dtype == np.float32 and result.shape == (3, *bert.output[0].dims)
    else:
        assert bert.platform == "pytorch_libtorch"
        module = torch.jit.load(str(out / "bert" / "1" / "model.pt"), map_location="cpu")
        result = module(*[torch.from_numpy(a) for a in inputs])
        assert result.dtype == torch.float32 and tuple(result.shape) == (3, *bert.output[0].dims)


def _copy(src, tmp_path):
    dst = tmp_path / "artifacts"
    shutil.copytree(src, dst)
    return dst


def test_refuses_missing_and_changed_files(tiny_artifacts, tmp_path):
    art = _copy(tiny_artifacts, tmp_path)
    (art / "checkpoint.tl").write_bytes(b"not a checkpoint")
    with pytest.raises(repository.AssemblyError, match="checksum differs"):
        repository.assemble(str(art), str(tmp_path / "r1"), AssemblyOptions("portable"))
    (art / "checkpoint.tl").unlink()
    with pytest.raises(repository.AssemblyError, match="missing checkpoint.tl"):
        repository.assemble(str(art), str(tmp_path / "r2"), AssemblyOptions("portable"))
    with pytest.raises(repository.AssemblyError, match="no such artifact folder"):
        repository.assemble(str(tmp_path / "nowhere"), str(tmp_path / "r3"), AssemblyOptions("portable"))


def test_refuses_artifacts_that_break_the_contracts(tiny_artifacts, tmp_path):
    art = _copy(tiny_artifacts, tmp_path)
    manifest = json.loads((art / "manifest.json").read_text())
    (art / "manifest.json").write_text(json.dumps({**manifest, "n_features": 100}))
    with pytest.raises(repository.AssemblyError, match="trained on 100 features"):
        repository.assemble(str(art), str(tmp_path / "r"), AssemblyOptions("gpu"))
    (art / "manifest.json").unlink()
    with pytest.raises(repository.AssemblyError, match="no manifest.json"):
        repository.assemble(str(art), str(tmp_path / "r"), AssemblyOptions("gpu"))


def test_refuses_to_overwrite_and_bad_options(tiny_artifacts, tmp_path):
    out = tmp_path / "repo"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(repository.AssemblyError, match="--force"):
        repository.assemble(tiny_artifacts, str(out), AssemblyOptions("cpu"))
    repository.assemble(tiny_artifacts, str(out), AssemblyOptions("cpu"), force=True)
    assert not (out / "keep.txt").exists()
    with pytest.raises(repository.AssemblyError, match="unknown profile"):
        repository.assemble(tiny_artifacts, str(tmp_path / "x"), AssemblyOptions("tpu"))
    with pytest.raises(repository.AssemblyError, match="non-negative"):
        repository.assemble(
            tiny_artifacts, str(tmp_path / "x"), AssemblyOptions("cpu", bert_weight=-1, forest_weight=1)
        )
    with pytest.raises(repository.AssemblyError, match="both --bert-weight and --forest-weight"):
        repository.assemble(tiny_artifacts, str(tmp_path / "x"), AssemblyOptions("cpu", bert_weight=0.3))


def test_assemble_cli(tiny_artifacts, tmp_path, capsys):
    out = tmp_path / "repo"
    assert (
        cli.main(
            [
                "assemble",
                "--profile",
                "hybrid",
                "--artifacts",
                tiny_artifacts,
                "--out",
                str(out),
                "--bert-weight",
                "0.25",
                "--forest-weight",
                "0.75",
            ]
        )
        == 0
    )
    post = parse(out / "postprocess" / "config.pbtxt")
    assert float(post.parameters[C.BERT_WEIGHT].string_value) == 0.25
    assert "assembled profile 'hybrid'" in capsys.readouterr().out
    assert (
        cli.main(["assemble", "--profile", "cpu", "--artifacts", str(tmp_path / "none"), "--out", str(tmp_path / "r")])
        == 2
    )
    assert "no such artifact folder" in capsys.readouterr().err


def test_assemble_packs_the_ragged_graph_on_the_cpu_and_says_so(tiny_artifacts, tmp_path, capsys):
    """cpu: the ragged graph packed (bert.packed), recorded in bert's manifest with its
    source's checksum, and named by assemble's line and served_bert; --no-packed: plain."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    for flag, packed in (([], True), (["--no-packed"], False)):
        out = tmp_path / f"repo{int(packed)}"
        args = ["assemble", "--profile", "cpu", "--artifacts", tiny_artifacts, "--out", str(out), *flag]
        assert cli.main(args) == 0
        line = capsys.readouterr().out
        assert (", ragged, packed;" in line) == packed and ", ragged" in line, line
        info = M.load_manifest(str(out / "bert" / "1")).info["ragged"]
        assert info["packed"] is packed and info["from_sha256"] == M.load_manifest(tiny_artifacts).files["model.onnx"]
        assert repository.packed_graph(str(out)) is packed
        described = repository.served_bert(str(out))
        assert ("token-wise layers on the real tokens only" in described) == packed, described
        assert ("a batch padded to its widest" in described) != packed, described
    assert cli.main(["assemble", "--profile", "cpu", "--artifacts", tiny_artifacts, "--out", str(tmp_path / "x"),
                     "--no-ragged", "--packed"]) == 2  # fmt: skip
    assert "--packed needs bert's ragged graph" in capsys.readouterr().err


def test_a_checkout_on_pythonpath_writes_its_own_adapters(tmp_path):
    """`backends_root` is the source tree's backends/ beside the package: a checkout of
    another commit put on PYTHONPATH (bench_overhead --baseline-code) assembles with its own
    model.py files, not with those of the installed package."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    other = tmp_path / "other"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(os.path.join(root, "readability_triton"), other / "readability_triton", ignore=ignore)
    shutil.copytree(os.path.join(root, "backends"), other / "backends", ignore=ignore)
    code = "from readability_triton.repository.assemble import backends_root; print(backends_root())"
    env = dict(os.environ, PYTHONPATH=str(other))
    found = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == str(other / "backends")
    assert repository.backends_root() == os.path.join(root, "backends")


@pytest.mark.parametrize("profile", profiles.PORTABLE_PROFILES)
def test_a_fused_repository_holds_each_branch_in_one_model(tiny_artifacts, tmp_path, profile):
    """`assemble --fused`: no bert and no forest; preprocess holds the tokenizer and the BERT
    model, featurize the vocabulary and the checkpoint (and on portable-gpu the forest's
    arrays), each with its fused adapter; the in-process pipeline of the fused repository,
    and so its canary, equal the separate repository's."""
    fused, separate = tmp_path / "fused", tmp_path / "separate"
    repository.assemble(tiny_artifacts, str(fused), AssemblyOptions(profile, fused=True))
    repository.assemble(tiny_artifacts, str(separate), AssemblyOptions(profile))
    assert sorted(os.listdir(fused)) == sorted(configs.repository_models(fused=True))
    assert configs.is_fused(str(fused)) and not configs.is_fused(str(separate))
    assert configs.home(str(fused), C.BERT) == C.PREPROCESS and configs.home(str(separate), C.BERT) == C.BERT
    bert_file = "model.pt" if profile == "portable-gpu" else "model.onnx"
    pre, feat = fused / "preprocess" / "1", fused / "featurize" / "1"
    for name in (*M.MODEL_FILES[C.PREPROCESS], bert_file, M.MANIFEST):
        assert (pre / name).is_file(), name
    for name in (*M.MODEL_FILES[C.FEATURIZE], *M.MODEL_FILES[C.FOREST], M.MANIFEST):
        assert (feat / name).is_file(), name
    assert (feat / "forest_arrays.npz").is_file() == (profile == "portable-gpu")
    for model, folder in ((C.PREPROCESS, "preprocess_fused"), (C.FEATURIZE, "featurize_fused")):
        source = os.path.join(repository.backends_root(), folder, "model.py")
        assert (fused / model / "1" / "model.py").read_bytes() == open(source, "rb").read()
    assert "inside preprocess" in repository.served_bert(str(fused))
    texts = ["The cat sat on the mat. It was happy.", "Notwithstanding the stipulations, the lessee shall pay."]
    got = repository.repository_pipeline(str(fused))(texts)
    want = repository.repository_pipeline(str(separate))(texts)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    canary = lambda repo: json.loads((repo / "readability" / "1" / "canary.json").read_text())  # noqa: E731
    assert canary(fused) == canary(separate)


def test_assemble_cli_fused(tiny_artifacts, tmp_path, capsys):
    out = tmp_path / "repo"
    code = cli.main(["assemble", "--profile", "portable", "--fused", "--artifacts", tiny_artifacts, "--out", str(out)])
    assert code == 0 and "fused (bert in preprocess, the forest in featurize)" in capsys.readouterr().out
    assert not (out / C.BERT).exists() and not (out / C.FOREST).exists()
    code = cli.main(
        ["assemble", "--profile", "cpu", "--fused", "--artifacts", tiny_artifacts, "--out", str(tmp_path / "x")]
    )
    assert code == 2 and "only the portable profiles" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("keys", ["outputs", "before the one vocabulary"])
def test_the_canary_comes_from_the_recorded_branch_scores_where_the_models_cannot_run(
    tiny_artifacts, tmp_path, monkeypatch, caplog, keys
):
    """In an image whose Python has no runtime for the models (a native profile's), assemble
    blends the branch scores the artifact set recorded at build time: the same canary as the
    one the models compute, within float noise. A set built before the outputs had one
    vocabulary recorded them as "bert" and "forest"; a set without them gets no canary, and
    a warning that says why."""
    import dataclasses

    repo = str(tmp_path / "repo")
    manifest = repository.assemble(tiny_artifacts, repo, AssemblyOptions("portable"))
    computed = Canary.load(repo)
    assert computed is not None
    recorded = dict(manifest.info["canary"])
    assert {C.BERT_SCORE, C.FOREST_SCORE} <= set(recorded)  # what build-demo records now
    if keys != "outputs":
        recorded["bert"], recorded["forest"] = recorded.pop(C.BERT_SCORE), recorded.pop(C.FOREST_SCORE)

    def no_runtime(_repo):
        raise ImportError("no module named 'onnxruntime'")

    monkeypatch.setattr(repository, "repository_pipeline", no_runtime)
    weights = manifest.blend_weights or (0.5, 0.5)
    interval = repository.for_blend(manifest.info.get("interval"), weights, AssemblyOptions("portable").interval_level)
    with_scores = dataclasses.replace(manifest, info={**manifest.info, "canary": recorded})
    canary = repository.record_canary(repo, 1e-3, with_scores, weights, interval)
    assert canary is not None and set(canary.expected) == set(C.OUTPUTS)
    for name in C.OUTPUTS:
        assert canary.expected[name] == pytest.approx(computed.expected[name], abs=1e-5, nan_ok=True), name
    without = dataclasses.replace(manifest, info={**manifest.info, "canary": {"text": recorded["text"]}})
    assert repository.record_canary(repo, 1e-3, without, weights, interval) is None
    assert "no canary recorded" in caplog.text and "onnxruntime" in caplog.text
