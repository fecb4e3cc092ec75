"""`train-bert`, `export-bert` and `readability_triton.bert`: tiny BERT checkpoints (seconds),
TorchScript round trips against eager PyTorch, the contract, and the refusals."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from harness import save_bert_checkpoint, tiny_bert_config, write_csv

from readability_triton.cli import main
from readability_triton.corpus import generate_corpus
from readability_triton.layout import load_manifest
from readability_triton.tokenizer import WordPieceTokenizer
from readability_triton.training.demo import minilm_directory

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
B = pytest.importorskip("readability_triton.training.bert_export")
BT = pytest.importorskip("readability_triton.training.bert")
V = pytest.importorskip("readability_triton.training.bert_verify")

pytestmark = pytest.mark.slow  # trains and exports models (make check leaves it out)

MAX_LENGTH = 32
TEXTS = [
    "The cat sat on the mat.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor against any "
    "liability, howsoever arising, consequent upon the lessee's failure to observe covenants.",
    "Tom ran home.",
    "Photosynthesis converts light energy into chemical energy.",
    "",
]


tiny_config = tiny_bert_config


def save_checkpoint(directory, model):
    return save_bert_checkpoint(directory, model, MAX_LENGTH)


@pytest.fixture(scope="module")
def regression_checkpoint(tmp_path_factory):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(num_labels=1, problem_type="regression"))
    with torch.no_grad():  # a head that is not near zero, so differences would show
        model.classifier.weight.mul_(20.0)
    return save_checkpoint(tmp_path_factory.mktemp("regressor"), model)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, regression_checkpoint):
    out = tmp_path_factory.mktemp("exported") / "model.pt"
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                regression_checkpoint,
                "--out",
                str(out),
                "--max-length",
                str(MAX_LENGTH),
                "--format",
                "torchscript",
            ]
        )
        == 0
    )
    return out


@pytest.fixture(scope="module")
def exported_onnx(exported, regression_checkpoint):
    """The same checkpoint exported to ONNX, into the same artifact folder (both formats)."""
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                regression_checkpoint,
                "--out",
                str(exported.parent),
                "--max-length",
                str(MAX_LENGTH),
            ]
        )
        == 0
    )  # a folder: named after the default format, onnx
    return exported.parent / "model.onnx"


def eager_model(checkpoint):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()


# ------------------------------------------------------------------- export


def test_export_writes_model_and_tokenizer_files(exported):
    directory = exported.parent
    names = set(os.listdir(directory))
    assert {
        "model.pt",
        "vocab.txt",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "manifest.json",
    } <= names
    manifest = load_manifest(str(directory))
    assert manifest.max_length == MAX_LENGTH
    assert manifest.info["bert"]["export_torchscript"]["max_abs_diff"] <= V.FP32_TOLERANCE
    assert manifest.info["bert"]["export_torchscript"]["format"] == "torchscript"
    assert {"model.pt", "vocab.txt"} <= set(manifest.files)


def test_onnx_export_is_verified_and_recorded(exported_onnx):
    import onnx

    manifest = load_manifest(str(exported_onnx.parent))
    record = manifest.info["bert"]["export_onnx"]
    assert record["format"] == "onnx" and record["opset"] == 18 and record["dtype"] == "float32"
    assert record["max_abs_diff"] <= 1e-4 and "passed" in record["checker"]
    assert set(record["per_batch_size"]) == {"1", "2", "5", "8", "4 real texts", "4 real texts, trimmed"}
    assert record["dynamic_length"] is True
    assert record["ir_version"] <= 10  # what ONNX Runtime 1.19.2 (Triton 24.10) loads
    assert {"model.onnx", "model.pt"} <= set(manifest.files)  # both formats, one set
    assert "export_torchscript" in manifest.info["bert"]
    model = onnx.load(str(exported_onnx))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input__0", "input__1"]
    assert [o.name for o in model.graph.output] == ["output__0"]
    for tensor in model.graph.input:  # dynamic batch and length dimensions
        assert all(d.dim_param and not d.dim_value for d in tensor.type.tensor_type.shape.dim)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_onnx_model_equals_eager_on_real_texts(exported_onnx, regression_checkpoint):
    """ONNX Runtime on the serving tokenizer's output == the Hugging Face model in eager
    PyTorch on the unpadded tokens, text by text (<= 1e-4); and == the TorchScript export."""
    from readability_triton.bert.runner import OnnxRunner, TorchScriptRunner

    runner = OnnxRunner.from_folder(str(exported_onnx.parent))
    assert runner.vocab_size == 30522
    model = eager_model(regression_checkpoint)
    tokenizer = WordPieceTokenizer.from_directory(str(exported_onnx.parent), MAX_LENGTH)
    texts = [t for t in TEXTS if t]
    ids, mask = tokenizer.encode(texts)
    scores = runner(ids, mask)
    assert scores.dtype == np.float32 and scores.shape == (len(texts), 1)
    with torch.no_grad():
        for row in range(len(texts)):
            n = int(mask[row].sum())
            alone = model(
                input_ids=torch.as_tensor(ids[row : row + 1, :n]),
                attention_mask=torch.as_tensor(mask[row : row + 1, :n]),
            ).logits
            assert abs(float(scores[row, 0]) - float(alone[0, 0])) <= 1e-4
    np.testing.assert_allclose(scores, TorchScriptRunner.from_folder(str(exported_onnx.parent))(ids, mask), atol=1e-5)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        runner(ids + 30522, mask)


def test_onnx_runner_runs_rows_by_bucket_and_scores_the_same(exported_onnx, tmp_path):
    """The runner feeds ONNX Runtime each row cut to its bucket, one run per bucket (the scores
    equal the padded batch's within float rounding); a model with a fixed length (an older
    export) gets the padded batch, says so, and a repository of buckets refuses it."""
    import onnx

    from readability_triton.bert.runner import OnnxRunner

    tokenizer = WordPieceTokenizer.from_directory(str(exported_onnx.parent), MAX_LENGTH)
    ids, mask = tokenizer.encode(["Tom ran home.", "The cat sat on the mat, and the dog sat on the rug."])
    lengths = sorted(int(n) for n in mask.sum(axis=1))
    assert lengths[0] <= 8 < 16 < lengths[1] < MAX_LENGTH
    runner = OnnxRunner.from_folder(str(exported_onnx.parent), buckets=(8, 16, MAX_LENGTH))
    assert runner.dynamic and "rows by bucket of 8, 16, 32 tokens" in runner.describe()
    seen = []
    run = runner.session.run
    runner.session.run = lambda names, feed: seen.append(feed["input__1"].shape) or run(names, feed)
    bucketed_scores = runner(ids, mask)
    padded_scores = OnnxRunner.from_folder(str(exported_onnx.parent))(ids, mask)
    assert seen == [(1, 8), (1, MAX_LENGTH)]  # two buckets: one run each, at its bucket's length
    np.testing.assert_allclose(bucketed_scores, padded_scores, atol=1e-5)

    model = onnx.load(str(exported_onnx))
    for tensor in model.graph.input:
        tensor.type.tensor_type.shape.dim[1].dim_value = MAX_LENGTH
    fixed = tmp_path / "model.onnx"
    onnx.save(model, str(fixed))
    old = OnnxRunner(str(fixed), buckets=(8, 16, MAX_LENGTH))
    assert not old.dynamic and old.buckets is None and "rows as they come" in old.describe()
    np.testing.assert_allclose(old(ids, mask), padded_scores, atol=1e-6)


def test_onnx_export_refuses_a_model_that_does_not_match_eager(tmp_path):
    class Noisy(torch.nn.Module):
        """Adds fresh noise on every call: no export can reproduce it."""

        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(1))

        def forward(self, input_ids, attention_mask):
            lengths = attention_mask.sum(1, keepdim=True).float()
            return lengths * self.scale + torch.rand_like(lengths)

    out = tmp_path / "model.onnx"
    with pytest.raises(B.ExportError, match=r"ONNX Runtime's output differs from eager PyTorch by \d"):
        B.export_onnx(
            Noisy(),
            str(out),
            max_length=MAX_LENGTH,
            vocab_size=30522,
            ids={"cls_token": 101, "sep_token": 102, "pad_token": 0},
        )
    assert not out.exists() and os.listdir(tmp_path) == []


def test_export_formats_and_file_names(tmp_path, regression_checkpoint, capsys):
    assert main(["export-bert", "--checkpoint", regression_checkpoint, "--out", str(tmp_path / "model.pt")]) == 2
    assert "an artifact set names the onnx model model.onnx" in capsys.readouterr().err
    assert (
        main(["export-bert", "--checkpoint", regression_checkpoint, "--out", str(tmp_path / "model.onnx"), "--half"])
        == 2
    )
    assert "--half exports float16 TorchScript" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_exported_module_equals_eager_on_real_texts(exported, regression_checkpoint):
    """torch.jit.load(model.pt) on the serving tokenizer's output == the Hugging Face model
    in eager PyTorch on the unpadded tokens, text by text (<= 1e-4)."""
    traced = torch.jit.load(str(exported))
    model = eager_model(regression_checkpoint)
    tokenizer = WordPieceTokenizer.from_directory(str(exported.parent), MAX_LENGTH)
    ids, mask = (torch.as_tensor(a) for a in tokenizer.encode(TEXTS))
    assert ids.dtype == torch.int64 and ids.shape == (len(TEXTS), MAX_LENGTH)
    with torch.no_grad():
        scores = traced(ids, mask)
        assert scores.dtype == torch.float32 and scores.shape == (len(TEXTS), 1)
        for row in range(len(TEXTS)):
            n = int(mask[row].sum())
            alone = model(input_ids=ids[row : row + 1, :n], attention_mask=mask[row : row + 1, :n]).logits
            assert abs(float(scores[row, 0]) - float(alone[0, 0])) <= 1e-4
    assert float(scores.std()) > 1e-3  # the texts get different scores


def test_padding_is_masked_and_batch_size_free(exported):
    traced = torch.jit.load(str(exported))
    generator = torch.Generator().manual_seed(5)
    ids, mask = V.verification_inputs(
        6, MAX_LENGTH, 30522, {"cls_token": 101, "sep_token": 102, "pad_token": 0}, generator
    )
    noisy = torch.where(mask.bool(), ids, torch.randint(1000, 30000, ids.shape, generator=generator))
    with torch.no_grad():
        full = traced(ids, mask)
        assert torch.allclose(traced(noisy, mask), full, atol=1e-5)  # ids under mask 0 do not matter
        for size in (1, 3):
            assert torch.allclose(traced(ids[:size], mask[:size]), full[:size], atol=1e-5)


def test_traced_graph_pins_no_device(exported):
    """A module traced on the CPU must also run on a GPU instance (pytorch_libtorch KIND_GPU)."""
    assert V.device_constants(torch.jit.load(str(exported))) == []


def test_export_half(tmp_path, regression_checkpoint):
    out = tmp_path / "model.pt"
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                regression_checkpoint,
                "--out",
                str(out),
                "--max-length",
                str(MAX_LENGTH),
                "--half",
                "--format",
                "torchscript",
            ]
        )
        == 0
    )
    traced = torch.jit.load(str(out))
    assert next(traced.parameters()).dtype == torch.float16
    info = load_manifest(str(tmp_path)).info["bert"]["export_torchscript"]
    assert info["dtype"] == "float16" and info["max_abs_diff_vs_float32"] < 0.05
    ids, mask = V.verification_inputs(
        2, MAX_LENGTH, 30522, {"cls_token": 101, "sep_token": 102, "pad_token": 0}, torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        assert traced(ids, mask).dtype == torch.float32


def test_export_refuses_a_module_that_does_not_match_eager(tmp_path):
    class DataDependent(torch.nn.Module):
        """Branches on the data: a trace freezes one branch, so it differs at other inputs."""

        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(1))

        def forward(self, input_ids, attention_mask):
            lengths = attention_mask.sum(1, keepdim=True).float()
            if bool((lengths > 20).all()):
                return lengths * self.scale
            return -lengths * self.scale

    out = tmp_path / "model.pt"
    with pytest.raises(B.ExportError, match="differs from eager PyTorch"):
        B.export_torchscript(
            DataDependent(),
            str(out),
            max_length=MAX_LENGTH,
            vocab_size=30522,
            ids={"cls_token": 101, "sep_token": 102, "pad_token": 0},
        )
    assert not out.exists() and os.listdir(tmp_path) == []


def test_export_refuses_a_multi_output_checkpoint(tmp_path, capsys):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    checkpoint = save_checkpoint(tmp_path / "classifier", BertForSequenceClassification(tiny_config(num_labels=3)))
    out = tmp_path / "out" / "model.onnx"
    assert main(["export-bert", "--checkpoint", checkpoint, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "multi-output checkpoint" in err and "num_labels=3" in err and "train-bert" in err
    assert not out.exists()


def test_export_refuses_a_bare_encoder_and_missing_folders(tmp_path, capsys):
    from transformers import BertModel

    torch.manual_seed(0)
    encoder = save_checkpoint(tmp_path / "encoder", BertModel(tiny_config()))
    assert main(["export-bert", "--checkpoint", encoder, "--out", str(tmp_path / "model.onnx")]) == 2
    assert "no trained regression head" in capsys.readouterr().err
    assert main(["export-bert", "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "model.onnx")]) == 2
    assert "no such folder; the checkpoint must be a Hugging Face model folder" in capsys.readouterr().err
    assert main(["export-bert", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "model.onnx")]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_export_refuses_a_checkpoint_without_tokenizer(tmp_path, capsys):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(num_labels=1, problem_type="regression"))
    model.save_pretrained(str(tmp_path / "ck"))
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                str(tmp_path / "ck"),
                "--out",
                str(tmp_path / "model.onnx"),
                "--max-length",
                "16",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "vocab.txt" in err and "--tokenizer" in err
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                str(tmp_path / "ck"),
                "--out",
                str(tmp_path / "o" / "model.onnx"),
                "--tokenizer",
                minilm_directory(),
                "--max-length",
                "16",
            ]
        )
        == 0
    )


def test_export_refuses_max_length_beyond_positions(tmp_path, capsys, regression_checkpoint):
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                regression_checkpoint,
                "--out",
                str(tmp_path / "model.onnx"),
                "--max-length",
                "512",
            ]
        )
        == 2
    )
    assert "position embeddings for 128 tokens" in capsys.readouterr().err


# ------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def training_csv(tmp_path_factory):
    texts, targets = generate_corpus(24, seed=1)
    path = tmp_path_factory.mktemp("bertdata") / "train.csv"
    return write_csv(path, [(i, t, y) for i, (t, y) in enumerate(zip(texts, targets))])


def test_train_bert_then_export(tmp_path, training_csv, regression_checkpoint, capsys):
    """Fine-tune (2-fold CV, then all data), save a checkpoint, export it, and the export
    reproduces the fine-tuned model."""
    from transformers import BertModel

    torch.manual_seed(0)
    base = save_checkpoint(tmp_path / "base", BertModel(tiny_config()))
    out = tmp_path / "tuned"
    assert (
        main(
            [
                "train-bert",
                "--data",
                training_csv,
                "--base",
                base,
                "--out",
                str(out),
                "--epochs",
                "2",
                "--batch-size",
                "8",
                "--max-length",
                str(MAX_LENGTH),
                "--folds",
                "2",
                "--lr",
                "1e-3",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "2-fold CV RMSE" in printed
    record = json.loads((out / BT.TRAINING_RECORD).read_text())
    assert len(record["fold_rmse"]) == 2 and np.isfinite(record["cv_rmse"])
    assert record["settings"]["weight_decay"] == 0.01 and len(record["history"]) == 2
    config = transformers.AutoConfig.from_pretrained(str(out))
    assert config.num_labels == 1 and config.problem_type == "regression"
    assert (out / "vocab.txt").is_file()

    exported = tmp_path / "artifacts" / "model.pt"
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                str(out),
                "--out",
                str(exported),
                "--max-length",
                str(MAX_LENGTH),
                "--format",
                "torchscript",
            ]
        )
        == 0
    )
    tokenizer = WordPieceTokenizer.from_directory(str(exported.parent), MAX_LENGTH)
    ids, mask = (torch.as_tensor(a) for a in tokenizer.encode(TEXTS))
    with torch.no_grad():
        want = eager_model(str(out))(input_ids=ids, attention_mask=mask).logits
        got = torch.jit.load(str(exported))(ids, mask)
    assert float((got - want).abs().max()) <= 1e-4


def test_training_learns(tmp_path):
    """Two kinds of texts, two targets: four short epochs fit them (the loop, the loss, the
    optimizer and the head work). A wide initialisation makes the random encoder's [CLS]
    depend on the text from the start."""
    from transformers import BertModel

    texts = ["The cat sat on the mat."] * 8 + ["Notwithstanding the unprecedented ramification."] * 8
    targets = [1.0] * 8 + [-1.0] * 8
    torch.manual_seed(0)
    base = save_checkpoint(tmp_path / "base", BertModel(tiny_config(initializer_range=0.2)))
    record = BT.train_bert(
        texts,
        targets,
        base,
        str(tmp_path / "out"),
        epochs=4,
        lr=1e-2,
        batch_size=8,
        max_length=16,
        device="cpu",
        progress=_quiet,
    )
    assert record["history"][-1]["train_mse"] < record["history"][0]["train_mse"]
    assert record["train_rmse"] < 0.5  # the mean predictor's RMSE is 1.0


def _quiet(iterable=None, **kwargs):
    from tqdm import tqdm

    return tqdm(iterable, disable=True, **{k: v for k, v in kwargs.items() if k != "disable"})


@pytest.mark.parametrize(
    "rows, header, message",
    [
        ([], None, "the file is empty"),
        ([(1, "A text.", 0.5)], ("id", "text", "target"), "no column 'excerpt'"),
        ([(1, "A text.", "hard")], ("id", "excerpt", "target"), "is not a number"),
    ],
)
def test_train_bert_refuses_bad_csv(tmp_path, capsys, regression_checkpoint, rows, header, message):
    path = write_csv(tmp_path / "bad.csv", rows, header)
    assert main(["train-bert", "--data", path, "--base", regression_checkpoint, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "train-bert: error:" in err and message in err
    assert not (tmp_path / "o").exists()


def test_train_bert_refuses_bad_base(tmp_path, capsys, training_csv):
    assert (
        main(["train-bert", "--data", training_csv, "--base", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
        == 2
    )
    assert "no such folder; --base must be a Hugging Face model folder" in capsys.readouterr().err


def test_train_forest_and_export_bert_make_a_checked_set(tmp_path, regression_checkpoint):
    """The two training commands writing into one folder give a set `assemble` accepts."""
    from readability_triton.layout import check_artifacts

    texts, targets = generate_corpus(60, seed=4)
    path = write_csv(tmp_path / "train.csv", [(i, t, y) for i, (t, y) in enumerate(zip(texts, targets))])
    out = tmp_path / "set"
    assert main(["train-forest", "--data", path, "--out", str(out), "--n-estimators", "5", "--folds", "0"]) == 0
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                regression_checkpoint,
                "--out",
                str(out / "model.onnx"),
                "--max-length",
                str(MAX_LENGTH),
            ]
        )
        == 0
    )
    manifest = check_artifacts(str(out), max_length=MAX_LENGTH)
    assert {"forest", "bert"} <= set(manifest.info)
    # retraining the forest keeps the BERT's max_length and info
    assert main(["train-forest", "--data", path, "--out", str(out), "--n-estimators", "6", "--folds", "0"]) == 0
    manifest = check_artifacts(str(out), max_length=MAX_LENGTH)
    assert manifest.info["forest"]["n_estimators"] == 6 and "bert" in manifest.info
