"""Integration: the ONNX route end to end on the real tritonserver.

A Hugging Face BERT regression checkpoint (tiny, built here) -> `export-bert --format
onnx` -> `train-forest` into the same folder -> `assemble --profile portable` (bert as a
Python model running ONNX Runtime) or `--profile cpu` (the seeds' route: bert on Triton's
own onnxruntime backend, `platform: "onnxruntime_onnx"`, and the forest on FIL, built by
`make native-backends`)
-> the server -> tritonclient over HTTP and gRPC: BERT_SCORE equals eager PyTorch on
Hugging Face's own tokens within 1e-4, and SCORE is the 0.5/0.5 blend of the two branch
scores.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from harness import hf_encode, write_csv
from served import score_texts, start_server

from readability_triton import contracts as C
from readability_triton import scoring
from readability_triton.cli import main
from readability_triton.corpus import generate_corpus
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.repository.options import AssemblyOptions
from readability_triton.training.bert_checkpoint import write_tokenizer
from readability_triton.training.demo import minilm_directory

pytestmark = pytest.mark.integration

MAX_LENGTH = 64
TEXTS = [
    "The cat sat on the mat. It was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor.",
    "Ünïcödé — “quotes”, and emoji 😀 in a sentence.",
    "Tom ran home! Then he slept.",
]


@pytest.fixture(scope="module", params=["portable", "cpu"])
def chain(request, tmp_path_factory):
    import torch

    from readability_triton.server.installation import native_backends

    native = native_backends()
    if request.param == "cpu" and (native is None or not os.path.isdir(os.path.join(native, "backends", "fil"))):
        pytest.skip("Triton's ONNX Runtime and FIL backends are not built (make native-backends)")
    from transformers import BertConfig, BertForSequenceClassification

    root = tmp_path_factory.mktemp("onnx-chain")
    torch.manual_seed(3)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
        problem_type="regression",
        initializer_range=0.1,
    )  # a wider initialisation: the [CLS] state depends on the text
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(20.0)  # scores that differ visibly between texts
    checkpoint = root / "checkpoint"
    model.save_pretrained(str(checkpoint))
    write_tokenizer(minilm_directory(), str(checkpoint), MAX_LENGTH)
    artifacts = root / "artifacts"
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                str(checkpoint),
                "--format",
                "onnx",
                "--out",
                str(artifacts / "model.onnx"),
                "--max-length",
                str(MAX_LENGTH),
            ]
        )
        == 0
    )
    texts, targets = generate_corpus(120, seed=5)
    data = write_csv(root / "train.csv", [(i, t, y) for i, (t, y) in enumerate(zip(texts, targets))])
    assert (
        main(
            [
                "train-forest",
                "--data",
                data,
                "--out",
                str(artifacts),
                "--n-estimators",
                "8",
                "--max-depth",
                "6",
                "--folds",
                "0",
            ]
        )
        == 0
    )
    assert sorted(n for n in os.listdir(artifacts) if n.startswith("model")) == ["model.onnx"]
    repo = root / "repository"
    repository.assemble(str(artifacts), str(repo), AssemblyOptions(request.param))
    assert (repo / "bert" / "1" / "model.onnx").is_file() and not (repo / "bert" / "1" / "model.pt").exists()
    if request.param == "cpu":
        assert configs.read_config(str(repo / "bert" / "config.pbtxt")).platform == "onnxruntime_onnx"
        server = start_server(str(repo), str(root / "server.log"), native=native)
    else:
        server = start_server(str(repo), str(root / "server.log"), str(root / "backends"))
    yield server, model, artifacts
    assert server.stop() == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bert_score_through_the_server_equals_eager_pytorch(chain, protocol):
    import torch

    server, model, artifacts = chain
    got = score_texts(server, protocol, TEXTS)
    ids, mask = hf_encode(str(artifacts), TEXTS, MAX_LENGTH)  # Hugging Face's BertTokenizerFast
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    np.testing.assert_allclose(got[C.BERT_SCORE], want, rtol=0, atol=1e-4)
    assert float(np.std(want)) > 1e-3  # the texts get different scores
    blended = scoring.blend(got[C.BERT_SCORE], got[C.FOREST_SCORE])
    np.testing.assert_array_equal(got[C.SCORE], blended)
