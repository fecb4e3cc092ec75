"""BERT's ONNX graph for Triton's ragged batching: requests of any bucket batched together.

Triton's dynamic batcher joins only requests whose inputs have one shape, unless the model
takes them ragged (`allow_ragged_batch`). Then the onnxruntime backend hands the model the
batch's ids and mask as flat `[total]` tensors (each request's `[n, L]` rows, row-major, one
request after the other) and, as batch inputs of kind BATCH_ITEM_SHAPE, each row's width of
the ids and of the mask (`contracts.ROW_WIDTHS`, `contracts.MASK_WIDTHS`, int32
`[rows, 1]`). `raggedize` puts a few nodes in front of the exported graph that lay those
rows out again as `[rows, widest]` ids and mask, zero (padding, masked) after each row's
own width, and feed them to the graph. A batch of excerpts in bucket 256 and titles in
bucket 16 then runs as one execution, padded only to 256: preprocess's buckets no longer
split the batcher's batches (docs/performance.md, "Sequence-length buckets"). With
`pack`, the graph behind the front is the packed form (`bert.packed`): its token-wise layers
run on the batch's real tokens only, and only attention sees the rows padded to the widest.

A row's answer depends on its own tokens only (the mask hides the padding from every real
token), so it equals the dense graph's at its own width within float32 rounding.

`onnx` (and, to check a packed form, `onnxruntime`) is imported inside the functions that
write the graph (assemble); `is_ragged` and `ragged_feed` need only an ONNX Runtime session
and NumPy (the runners).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import contracts as C
from ..errors import AssemblyError
from .packed import PackError, pack_tokens

#: The dense graph's inputs, renamed inside the ragged graph (its own inputs take their names).
_DENSE = {C.INPUT_0: "dense__input__0", C.INPUT_1: "dense__input__1"}


class RaggedError(AssemblyError):
    """A model.onnx that cannot be put in the ragged form (says why and what to do): an
    AssemblyError, as `assemble` reports it."""


#: The ragged graph's batch inputs: each row's width of the ids, and of the mask.
RAGGED_WIDTHS = (C.ROW_WIDTHS, C.MASK_WIDTHS)


def is_ragged(session) -> bool:
    """Whether an ONNX Runtime session's model is the ragged form (`raggedize`): flat ids
    and mask, and the rows' widths."""
    inputs = {tensor.name: tensor for tensor in session.get_inputs()}
    return C.ROW_WIDTHS in inputs and len(inputs[C.INPUT_0].shape) == 1


def ragged_feed(ids, mask) -> dict[str, np.ndarray]:
    """The ragged graph's inputs for one dense batch `(n, L)` (every row of width L): what
    the onnxruntime backend hands it for requests of that shape."""
    rows, width = ids.shape
    return {
        C.INPUT_0: np.ascontiguousarray(ids, dtype=np.int64).reshape(-1),
        C.INPUT_1: np.ascontiguousarray(mask, dtype=np.int64).reshape(-1),
        C.ROW_WIDTHS: np.full((rows, 1), width, dtype=np.int32),
        C.MASK_WIDTHS: np.full((rows, 1), width, dtype=np.int32),
    }


def _onnx():
    try:
        import onnx
    except ImportError as exc:
        raise RaggedError(
            f"the ragged BERT graph is written with the onnx package ({exc}): pip install "
            "'readability-triton[native]', or assemble with --no-ragged (the dynamic batcher then joins only "
            "requests of one bucket)"
        ) from None
    return onnx


#: The oldest opset the front nodes run in (Unsqueeze takes its axes as an input from 13).
MIN_OPSET = 13


def check_raggable(dense_path: str, model=None) -> None:
    """RaggedError (saying why and what to do) unless `dense_path` is an exported dense BERT
    graph `raggedize` can rewrite: int64 `[batch, length]` inputs input__0 and input__1 with
    a dynamic length, opset MIN_OPSET or later, not already ragged."""
    onnx = _onnx()
    model = model if model is not None else onnx.load(dense_path, load_external_data=False)
    inputs = {tensor.name: tensor for tensor in model.graph.input}
    if C.ROW_WIDTHS in inputs or any(name in inputs for name in _DENSE.values()):
        raise RaggedError(f"{dense_path}: already the ragged form (it has {C.ROW_WIDTHS})")
    for name in _DENSE:
        tensor = inputs.get(name)
        dims: Any = tensor.type.tensor_type.shape.dim if tensor is not None else []
        if tensor is None or tensor.type.tensor_type.elem_type != onnx.TensorProto.INT64 or len(dims) != 2:
            raise RaggedError(f"{dense_path}: no int64 [batch, length] input {name}; re-export it with export-bert")
        if dims[1].HasField("dim_value"):
            raise RaggedError(
                f"{dense_path}: {name} takes one fixed length ({dims[1].dim_value}), so its ids cannot be cut to "
                "buckets: re-export it with export-bert (dynamic length), or assemble with "
                f"--buckets {dims[1].dim_value} (every text padded)"
            )
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise RaggedError(
            f"{dense_path}: opset {opset}; the ragged form needs {MIN_OPSET} or later: re-export it with export-bert "
            "(opset 18), or assemble with --no-ragged"
        )


def raggedize(dense_path: str, out_path: str, pack: bool = False) -> dict:
    """Write the ragged form of the exported `dense_path` (`check_raggable`: export-bert's
    graph) to `out_path`, checked with `onnx.checker`. Returns what it did. The ids and the
    mask are laid out each by its own widths (`ROW_WIDTHS`, `MASK_WIDTHS`): a request whose
    mask is not as wide as its ids (a client calling bert directly) spoils only its own rows,
    the mask past its width counting as padding. RaggedError where the model does not have
    that form, or `onnx` is missing.

    `pack`: the token-wise layers run on the batch's real tokens only (`bert.packed`), where
    the rewrite knows the graph and the packed form answers as the plain one does on a
    ragged batch of padded rows (`check_packed`, with ONNX Runtime). Where either fails, the
    plain ragged form is written, and the result says why (`packed`: False, `unpacked_why`)."""
    onnx = _onnx()

    model = onnx.load(dense_path)
    check_raggable(dense_path, model)
    plain = with_ragged_front(model)
    added = len(plain.graph.node) - len(model.graph.node)
    done: dict = {"ragged": True, "inputs": [C.INPUT_0, C.INPUT_1, *RAGGED_WIDTHS], "nodes_added": added}
    if pack:
        try:
            packed, stats = pack_tokens(model)
            packed = with_ragged_front(packed)
            onnx.checker.check_model(packed, full_check=True)
            done["largest_difference"] = check_packed(plain, packed)
        except PackError as err:
            done.update(packed=False, unpacked_why=str(err))
        except Exception as exc:  # noqa: BLE001 - packing is optional: any failure leaves the plain form
            done.update(packed=False, unpacked_why=f"the rewrite failed ({type(exc).__name__}: {_first_line(exc)})")
        else:
            done.update(packed=True, **stats)
            entry = packed.metadata_props.add()
            entry.key, entry.value = "packed", "token-wise layers on the real tokens only (bert.packed)"
            plain = packed
    _save_checked(plain, dense_path, out_path, checked=bool(done.get("packed")))  # the packed form was, above
    return done


#: How far the packed graph's outputs may be from the plain one's on `check_packed`'s batch
#: (float32 rounding: about 1e-6 on MiniLM).
PACKED_TOLERANCE = 1e-4


def check_packed(plain, packed) -> float:
    """The largest difference between the outputs of the ragged forms `plain` and `packed`
    on one ragged batch of three rows (widths 24, 16, 8; real tokens 24, 5, 8; random ids),
    run by ONNX Runtime; PackError where it is over PACKED_TOLERANCE, or ONNX Runtime is
    missing."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise PackError("onnxruntime is not installed here, to check the packed graph against the plain one") from None
    widths, real = np.array([24, 16, 8]), np.array([24, 5, 8])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, _vocabulary(plain), int(widths.sum()))
    mask = np.concatenate([np.arange(w) < n for w, n in zip(widths, real)]).astype(np.int64)
    feed = {
        C.INPUT_0: ids.astype(np.int64),
        C.INPUT_1: mask,
        C.ROW_WIDTHS: widths.astype(np.int32).reshape(-1, 1),
        C.MASK_WIDTHS: widths.astype(np.int32).reshape(-1, 1),
    }
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    answers = []
    for name, model in (("plain", plain), ("packed", packed)):
        try:
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            answers.append(session.run(None, feed))
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's own errors, said in one line
            why = _first_line(exc)
            raise PackError(f"ONNX Runtime could not run the {name} form to compare them ({why})") from None
    for name, a, b in zip([o.name for o in plain.graph.output], *answers):
        if a.shape != b.shape:
            raise PackError(f"the packed graph's {name} is {list(b.shape)}, the plain one's {list(a.shape)}")
    largest = max((float(np.max(np.abs(a - b))) for a, b in zip(*answers) if a.size), default=0.0)
    if not largest <= PACKED_TOLERANCE:  # NaN too
        raise PackError(f"the packed graph answers {largest:.3g} away from the plain one (allowed {PACKED_TOLERANCE})")
    return largest


def _vocabulary(model) -> int:
    """The rows of the embedding table the ids index (what ids `check_packed` may draw)."""
    sizes = {init.name: init.dims[0] for init in model.graph.initializer if init.dims}
    for node in model.graph.node:
        if node.op_type == "Gather" and node.input[1] == _DENSE[C.INPUT_0] and node.input[0] in sizes:
            return int(sizes[node.input[0]])
    return 100


def with_ragged_front(dense):
    """A copy of the dense graph `dense` with the nodes that lay the flat ragged inputs out
    as `[rows, widest]` ids and mask in front."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.ModelProto()
    model.CopyFrom(dense)
    graph = model.graph
    inputs = {tensor.name: tensor for tensor in graph.input}

    def rename(nodes) -> None:  # every use of the dense inputs, subgraphs included
        for node in nodes:
            node.input[:] = [_DENSE.get(name, name) for name in node.input]
            for attribute in node.attribute:
                if attribute.g.node:
                    rename(attribute.g.node)
                for sub in attribute.graphs:
                    rename(sub.node)

    rename(graph.node)
    ids, mask = _DENSE[C.INPUT_0], _DENSE[C.INPUT_1]
    const = lambda name, value: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [], [value])
    )
    front = [
        const("ragged__zero", 0),
        const("ragged__one", 1),
        helper.make_node("Constant", [], ["ragged__flat"], value=helper.make_tensor("f", TensorProto.INT64, [1], [-1])),
        helper.make_node("Constant", [], ["ragged__axis"], value=helper.make_tensor("a", TensorProto.INT64, [1], [1])),
        helper.make_node("Constant", [], ["ragged__zero1"], value=helper.make_tensor("z", TensorProto.INT64, [1], [0])),
        helper.make_node("Cast", [C.ROW_WIDTHS], ["ragged__w2"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["ragged__w2", "ragged__flat"], ["ragged__widths"]),  # [rows]
        helper.make_node("CumSum", ["ragged__widths", "ragged__zero"], ["ragged__starts"], exclusive=1),
        helper.make_node("ReduceMax", ["ragged__widths"], ["ragged__widest"], keepdims=0),
        helper.make_node("Range", ["ragged__zero", "ragged__widest", "ragged__one"], ["ragged__cols"]),  # [W]
        helper.make_node("Unsqueeze", ["ragged__starts", "ragged__axis"], ["ragged__starts2"]),  # [rows, 1]
        helper.make_node("Add", ["ragged__starts2", "ragged__cols"], ["ragged__index"]),  # [rows, W]
        helper.make_node("Less", ["ragged__cols", "ragged__w2"], ["ragged__inside"]),  # [rows, W]
        helper.make_node("Where", ["ragged__inside", "ragged__index", "ragged__zero"], ["ragged__at"]),
        helper.make_node("Gather", [C.INPUT_0, "ragged__at"], ["ragged__ids"], axis=0),
        helper.make_node("Where", ["ragged__inside", "ragged__ids", "ragged__zero"], [ids]),
        # the mask by its own widths: past a row's mask width, or its ids' width, padding
        helper.make_node("Cast", [C.MASK_WIDTHS], ["ragged__m2"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["ragged__m2", "ragged__flat"], ["ragged__mwidths"]),
        helper.make_node("CumSum", ["ragged__mwidths", "ragged__zero"], ["ragged__mstarts"], exclusive=1),
        helper.make_node("Unsqueeze", ["ragged__mstarts", "ragged__axis"], ["ragged__mstarts2"]),
        helper.make_node("Add", ["ragged__mstarts2", "ragged__cols"], ["ragged__mindex"]),
        helper.make_node("Less", ["ragged__cols", "ragged__m2"], ["ragged__minside"]),
        helper.make_node("And", ["ragged__inside", "ragged__minside"], ["ragged__both"]),
        # read from the mask after a leading 0: index 0 (outside a row) exists even where every
        # request of the batch sent an empty mask
        helper.make_node("Concat", ["ragged__zero1", C.INPUT_1], ["ragged__mpad"], axis=0),
        helper.make_node("Add", ["ragged__mindex", "ragged__one"], ["ragged__mindex1"]),
        helper.make_node("Where", ["ragged__both", "ragged__mindex1", "ragged__zero"], ["ragged__mat"]),
        helper.make_node("Gather", ["ragged__mpad", "ragged__mat"], ["ragged__mask"], axis=0),
        helper.make_node("Where", ["ragged__both", "ragged__mask", "ragged__zero"], [mask]),
    ]
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(front + nodes)
    del graph.input[:]
    graph.input.extend(
        [
            helper.make_tensor_value_info(C.INPUT_0, TensorProto.INT64, ["total"]),
            helper.make_tensor_value_info(C.INPUT_1, TensorProto.INT64, ["total"]),
            helper.make_tensor_value_info(C.ROW_WIDTHS, TensorProto.INT32, ["rows", 1]),
            helper.make_tensor_value_info(C.MASK_WIDTHS, TensorProto.INT32, ["rows", 1]),
            *(i for name, i in inputs.items() if name not in _DENSE),
        ]
    )
    entry = model.metadata_props.add()
    entry.key, entry.value = "ragged", f"{C.INPUT_0},{C.INPUT_1} flat; {C.ROW_WIDTHS}, {C.MASK_WIDTHS}: each row's"
    return model


def _first_line(exc: BaseException) -> str:
    """What an exception says, in one line of at most 300 characters."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _save_checked(model, dense_path: str, out_path: str, checked: bool = False) -> None:
    """Write `model` to `out_path` whole or not at all, checked with onnx's full checker
    (from the file: a model over protobuf's 2 GB holds) unless `checked` already."""
    import onnx

    temporary = f"{out_path}.tmp-{os.getpid()}"
    try:
        onnx.save(model, temporary)
        try:
            if not checked:
                onnx.checker.check_model(temporary, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            raise RaggedError(
                f"{dense_path}: its ragged form does not check ({_first_line(exc)}); assemble with --no-ragged"
            ) from None
        os.replace(temporary, out_path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
