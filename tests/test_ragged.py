"""The ragged BERT graph (`bert.ragged`), plain and packed (`bert.packed`): rows of several
widths, flat as the onnxruntime backend hands a ragged batch, score what each scores alone
in the exported dense graph; `OnnxRunner` feeds the ragged form as that backend does; what
cannot be made ragged is refused, saying why; and a graph that cannot be packed, or whose
packed form would answer otherwise, is written plain, saying why."""

from __future__ import annotations

import os

import numpy as np
import pytest

from readability_triton import contracts as C
from readability_triton.bert.packed import PackError, pack_tokens
from readability_triton.bert.ragged import (
    PACKED_TOLERANCE,
    RaggedError,
    check_packed,
    is_ragged,
    ragged_feed,
    raggedize,
    with_ragged_front,
)
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


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "packed"])
def ragged_model(tiny_artifacts, tmp_path_factory, request):
    """The ragged form of the tiny set's model.onnx: every test below runs on both."""
    path = str(tmp_path_factory.mktemp("ragged") / "model.onnx")
    done = raggedize(os.path.join(tiny_artifacts, "model.onnx"), path, pack=request.param)
    assert done["inputs"] == [C.INPUT_0, C.INPUT_1, C.ROW_WIDTHS, C.MASK_WIDTHS]
    assert done.get("packed", False) is request.param, done
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


def test_the_packed_graph_runs_the_token_wise_layers_on_the_real_tokens(tiny_artifacts, tmp_path):
    """What `pack_tokens` rewrites in the tiny BERT (2 layers): the projections, the
    feed-forward and the LayerNorms packed, attention padded, the mean pooling a segment sum;
    and `raggedize` says so, with the packed form's distance from the plain one."""
    import onnx

    dense = onnx.load(os.path.join(tiny_artifacts, "model.onnx"))
    packed, stats = pack_tokens(dense)
    ops = [node.op_type for node in packed.graph.node]
    assert "NonZero" in ops and stats["packed_nodes"] > 10 and stats["segment_sums"] >= 1, stats
    done = raggedize(os.path.join(tiny_artifacts, "model.onnx"), str(tmp_path / "p.onnx"), pack=True)
    assert done["packed"] and 0 <= done["largest_difference"] <= 1e-5, done
    meta = {e.key: e.value for e in onnx.load(str(tmp_path / "p.onnx"), load_external_data=False).metadata_props}
    assert "packed" in meta and "ragged" in meta


def test_a_graph_the_rewrite_does_not_know_is_written_plain_saying_why(tmp_path):
    """No LayerNorm over the tokens (a bag of embeddings): nothing to pack from; raggedize
    writes the plain ragged form and says why, and that form answers."""
    import onnxruntime

    model, path = _bag(tmp_path, layer_norm=False)
    with pytest.raises(PackError, match="no LayerNormalization"):
        pack_tokens(model)
    done = raggedize(path, str(tmp_path / "out.onnx"), pack=True)
    assert done["packed"] is False and "no LayerNormalization" in done["unpacked_why"], done
    session = onnxruntime.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([[3, 4, 5, 0]], dtype=np.int64)
    assert session.run(None, ragged_feed(ids, np.array([[1, 1, 1, 0]])))[0].shape == (1, 1)


def test_a_packed_form_that_answers_otherwise_is_refused(tiny_artifacts):
    """`check_packed` runs both forms on one ragged batch: a graph whose answers moved
    (here a weight changed) is a PackError, not a silently different score."""
    import onnx
    from onnx import numpy_helper

    dense = onnx.load(os.path.join(tiny_artifacts, "model.onnx"))
    plain = with_ragged_front(dense)
    packed, _ = pack_tokens(dense)
    assert check_packed(plain, with_ragged_front(packed)) <= PACKED_TOLERANCE
    moved = onnx.ModelProto()
    moved.CopyFrom(packed)
    weight = next(init for init in moved.graph.initializer if len(init.dims) == 2 and init.dims[0] > 8)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    with pytest.raises(PackError, match="answers .* away from the plain one"):
        check_packed(plain, with_ragged_front(moved))


def _bag(tmp_path, layer_norm: bool):
    """A small dense graph: embeddings, optionally a LayerNorm and a projection, then a sum
    over every position (the mask unused: padding counts) and a head."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    arrays = {
        "table": rng.normal(size=(50, 4)),
        "weight": rng.normal(size=(4, 1)),
        "project": rng.normal(size=(4, 4)),
        "scale": np.ones(4),
        "bias": np.zeros(4),
    }
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis"))
    nodes = [helper.make_node("Gather", ["table", C.INPUT_0], ["embedded"])]
    last = "embedded"
    if layer_norm:
        nodes += [
            helper.make_node("LayerNormalization", ["embedded", "scale", "bias"], ["normed"], axis=-1),
            helper.make_node("MatMul", ["normed", "project"], ["projected"]),
        ]
        last = "projected"
    nodes += [
        helper.make_node("ReduceSum", [last, "axis"], ["pooled"], keepdims=0),
        helper.make_node("MatMul", ["pooled", "weight"], [C.OUTPUT_0]),
    ]
    graph = helper.make_graph(
        nodes,
        "bag",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "length"]) for n in (C.INPUT_0, C.INPUT_1)],
        [helper.make_tensor_value_info(C.OUTPUT_0, TensorProto.FLOAT, ["batch", 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = str(tmp_path / f"bag{int(layer_norm)}.onnx")
    onnx.save(model, path)
    return model, path


def test_a_rewrite_that_would_change_the_answers_is_caught_and_written_plain(tmp_path):
    """A sum over every position, padding included: the segment sum over the real tokens
    would answer otherwise, `check_packed` sees it, and the plain form is written."""
    import onnx
    import onnxruntime

    model, path = _bag(tmp_path, layer_norm=True)
    _, stats = pack_tokens(model)
    assert stats["segment_sums"] == 1  # the rewrite itself does not know the sum is unmasked
    done = raggedize(path, str(tmp_path / "out.onnx"), pack=True)
    assert done["packed"] is False and "away from the plain one" in done["unpacked_why"], done
    session = onnxruntime.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    assert not any(node.op_type == "NonZero" for node in onnx.load(str(tmp_path / "out.onnx")).graph.node)
    ids = np.array([[3, 4, 5, 0]], dtype=np.int64)
    assert session.run(None, ragged_feed(ids, np.array([[1, 1, 1, 0]])))[0].shape == (1, 1)


def test_rows_of_padding_only_answer_as_in_the_plain_form(tiny_artifacts, tmp_path):
    """A row whose mask is all padding (a client calling bert directly), beside a real one,
    and a batch with no real token at all (T = 0): the packed form answers what the plain
    one does."""
    import onnxruntime

    forms = {}
    for pack in (False, True):
        path = str(tmp_path / f"m{int(pack)}.onnx")
        assert raggedize(os.path.join(tiny_artifacts, "model.onnx"), path, pack=pack).get("packed", False) is pack
        forms[pack] = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    tokenizer = TokenizerRunner.from_folder(tiny_artifacts, 64)
    ids, mask = tokenizer([t.encode() for t in TEXTS[:2]])
    for row_mask in (mask[:2, :16].copy(), np.zeros((2, 16), dtype=np.int64)):
        row_mask[0] = 0  # row 0 all padding
        feed = ragged_feed(ids[:2, :16], row_mask)
        plain, packed = (forms[p].run(None, feed)[0] for p in (False, True))
        assert np.isfinite(packed).all()
        np.testing.assert_allclose(packed, plain, atol=1e-5)
