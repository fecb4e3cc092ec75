"""The ragged BERT graph (`bert.ragged`): rows of several widths, flat as the onnxruntime
backend hands a ragged batch, score what each scores alone in the exported dense graph;
`OnnxRunner` feeds the ragged form as that backend does; and what cannot be made ragged is
refused, saying why."""

from __future__ import annotations

import os

import numpy as np
import pytest

from readability_triton import contracts as C
from readability_triton.bert.ragged import RaggedError, is_ragged, ragged_feed, raggedize
from readability_triton.bert.runner import OnnxRunner
from readability_triton.buckets import bucket_widths, real_lengths
from readability_triton.tokenizer.runner import TokenizerRunner

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

TEXTS = [
    "Tom ran.",
    "The dog barked at the mailman again this morning.",
    "Photosynthesis converts light energy into chemical energy stored in glucose, which the plant "
    "uses to grow; the oxygen it releases is what most animals breathe.",
    "Yes.",
    "A river, winding slowly through the valley, carried the fallen leaves of autumn towards a sea "
    "that none of them would ever reach, past farms, mills and the quiet churches of the villages.",
]


@pytest.fixture(scope="module")
def ragged_model(tiny_artifacts, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ragged") / "model.onnx")
    done = raggedize(os.path.join(tiny_artifacts, "model.onnx"), path)
    assert done["inputs"] == [C.INPUT_0, C.INPUT_1, C.ROW_WIDTHS, C.MASK_WIDTHS]
    return path


def test_a_ragged_batch_scores_each_row_as_the_dense_graph_does_alone(tiny_artifacts, ragged_model):
    tokenizer = TokenizerRunner.from_folder(tiny_artifacts, 64)
    ids, mask = tokenizer([t.encode() for t in TEXTS])
    dense = OnnxRunner.from_folder(tiny_artifacts)
    ragged = OnnxRunner(ragged_model)
    assert ragged.ragged and not dense.ragged and ragged.dynamic and "ragged form" in ragged.describe()
    widths = bucket_widths(real_lengths(mask), (16, 32, 48, 64))
    assert len(set(widths.tolist())) >= 3  # several buckets in one batch
    # what the onnxruntime backend hands the graph: each request's rows at its width, flat
    feed = {
        C.INPUT_0: np.concatenate([ids[r, :w] for r, w in enumerate(widths)]),
        C.INPUT_1: np.concatenate([mask[r, :w] for r, w in enumerate(widths)]),
        C.ROW_WIDTHS: widths.astype(np.int32).reshape(-1, 1),
        C.MASK_WIDTHS: widths.astype(np.int32).reshape(-1, 1),
    }
    got = ragged.session.run(None, feed)[0]
    alone = np.concatenate([dense(ids[r : r + 1, :w], mask[r : r + 1, :w]) for r, w in enumerate(widths)])
    assert np.ptp(alone) > 1e-3  # the texts score apart: a row laid out wrong would show
    np.testing.assert_allclose(got, alone, atol=1e-5)
    np.testing.assert_allclose(got, dense(ids, mask), atol=1e-5)  # and as the batch padded to 64
    # the runner feeds the ragged form a dense batch (every row one width), by bucket
    np.testing.assert_allclose(OnnxRunner(ragged_model, buckets=(16, 32, 48, 64))(ids, mask), alone, atol=1e-5)
    one_wide = ragged_feed(ids[:2, :16], mask[:2, :16])
    assert one_wide[C.INPUT_0].shape == (32,) and one_wide[C.ROW_WIDTHS].tolist() == [[16], [16]]
    assert one_wide[C.MASK_WIDTHS].tolist() == [[16], [16]]


def test_a_request_whose_mask_and_ids_differ_in_width_spoils_only_its_own_rows(tiny_artifacts, ragged_model):
    """A client calling bert directly may send a mask wider or narrower than its ids: the
    rows after it must still read their own tokens (each input laid out by its own widths)."""
    tokenizer = TokenizerRunner.from_folder(tiny_artifacts, 64)
    ids, mask = tokenizer([t.encode() for t in TEXTS[:3]])
    ragged = OnnxRunner(ragged_model)
    alone = np.concatenate([ragged(ids[r : r + 1, :32], mask[r : r + 1, :32]) for r in range(3)])
    for bad_width in (48, 16):  # row 0's mask wider, then narrower, than its 32 ids
        feed = {
            C.INPUT_0: ids[:, :32].reshape(-1),
            C.INPUT_1: np.concatenate([mask[0, :bad_width], mask[1, :32], mask[2, :32]]),
            C.ROW_WIDTHS: np.full((3, 1), 32, dtype=np.int32),
            C.MASK_WIDTHS: np.array([[bad_width], [32], [32]], dtype=np.int32),
        }
        got = ragged.session.run(None, feed)[0]
        np.testing.assert_allclose(got[1:], alone[1:], atol=1e-5, err_msg=f"mask {bad_width} wide")
        assert np.isfinite(got[0]).all()
    # a batch whose every request sent an empty mask: answered (each row all padding), not an error
    empty = {
        C.INPUT_0: ids[:2, :8].reshape(-1),
        C.INPUT_1: np.zeros(0, dtype=np.int64),
        C.ROW_WIDTHS: np.full((2, 1), 8, dtype=np.int32),
        C.MASK_WIDTHS: np.zeros((2, 1), dtype=np.int32),
    }
    assert ragged.session.run(None, empty)[0].shape == (2, 1)


def test_what_cannot_be_made_ragged_is_refused(tiny_artifacts, ragged_model, tmp_path):
    import onnx

    with pytest.raises(RaggedError, match="already the ragged form"):
        raggedize(ragged_model, str(tmp_path / "again.onnx"))
    fixed = onnx.load(os.path.join(tiny_artifacts, "model.onnx"))
    for tensor in fixed.graph.input:
        tensor.type.tensor_type.shape.dim[1].dim_value = 64
    onnx.save(fixed, str(tmp_path / "fixed.onnx"))
    with pytest.raises(RaggedError, match="one fixed length .64.*--buckets 64"):
        raggedize(str(tmp_path / "fixed.onnx"), str(tmp_path / "out.onnx"))
    assert not (tmp_path / "out.onnx").exists()


def test_is_ragged_reads_the_inputs(tiny_artifacts, ragged_model):
    import onnxruntime

    assert is_ragged(onnxruntime.InferenceSession(ragged_model, providers=["CPUExecutionProvider"]))
    dense = os.path.join(tiny_artifacts, "model.onnx")
    assert not is_ragged(onnxruntime.InferenceSession(dense, providers=["CPUExecutionProvider"]))
