"""BERT's token-wise layers on the batch's real tokens only: the packed form of its graph.

In a batch the ragged graph (`bert.ragged`) pads every row to the widest: two excerpts of
190 and 240 tokens run as 2 x 240. Most of BERT's work at these lengths is token-wise (the
Q/K/V projections, attention's output dense layer, the feed-forward, the LayerNorms and
residual adds): each token's row is computed from that token's row alone, so a padding
position's work is thrown away. `pack_tokens` rewrites the exported graph so that those
nodes run on the real tokens only, laid out `[1, T, H]` (T: the mask's non-zero positions,
row after row), and only attention, which mixes the tokens of one row, sees the padded
`[rows, widest, H]` layout.

Built once from the attention mask `[rows, width]` (the graph input `contracts.INPUT_1`):

- `idx = NonZero(flatten(mask))`, `[T]`: each real token's flat position;
- `map = Where(mask, CumSum(mask) - 1, T)`, `[rows * width]`: each position's packed row
  (T: a row of zeros appended at the end).

Packing a padded `[rows, width, X]` tensor is `Gather(reshape(t, [1, -1, X]), idx)`;
unpacking is `Reshape(Gather(Concat(p, zeros[1, 1, X]), map), [rows, width, X])`, with zeros
at the padding.

The nodes that run packed are found from the graph's structure, starting at the first
LayerNormalization over a `[batch, length, X]` tensor (the embeddings' LayerNorm) and going
forward in topological order. A node runs packed when a packed tensor is among its data
inputs and it is token-wise:

- MatMul by a constant rank-2 weight;
- elementwise Add, Sub, Mul, Div, Pow, ... whose other inputs are constants that broadcast
  along the last axis only, or other `[batch, length, X]` tensors (the residual add, whose
  padded input is then packed as far upstream as its single-consumer token-wise producers
  go: through attention's output dense layer to the Reshape that merges its heads);
- LayerNormalization over the last axis with constant scale and bias;
- unary elementwise ops (Erf, Tanh, Cast, ...).

Every other consumer of a packed tensor reads its padded form, under the tensor's own name.
A ReduceSum over the length axis of a packed tensor (masked mean pooling: sum(h * mask))
becomes a segment sum, `MatMul(onehot[rows, T], packed[T, X])`.

A padding position of an unpacked tensor is exactly 0 where the dense graph has values
the mask hides; a BERT whose padding only enters masked attention and masked pooling
answers the same, within float32 rounding (`ragged.raggedize` checks it on every graph it
packs). The `[1, T, H]` layout (not `[T, H]`) keeps ONNX Runtime's SkipLayerNormalization
and FusedMatMul fusions.

Measured served on MiniLM (`bench_profiles`, 2 vCPUs; docs/performance.md, "Sequence-length
buckets"): 1.05x the plain ragged graph on CommonLit excerpts at 4 clients (two rows a
batch), 1.14x on short texts, 0.99x at one client (a single row: nothing to unpad but its
bucket's last tokens).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from .. import contracts as C
from ..errors import AssemblyError


class PackError(AssemblyError):
    """A graph `pack_tokens` cannot rewrite, and why."""


#: Elementwise ops of one data input (the others, where any, constants) that run packed.
UNARY = frozenset(
    {
        "Erf", "Tanh", "Sigmoid", "Relu", "Sqrt", "Neg", "Exp", "Log", "Abs", "Reciprocal", "Cast",
        "Identity", "Gelu", "Softplus", "LeakyRelu", "Elu", "Selu", "Celu", "Mish", "HardSigmoid",
        "HardSwish", "Floor", "Ceil", "Round", "Sign", "Not",
    }
)  # fmt: skip
#: Elementwise ops of several inputs that run packed where each input is packed, token-aligned
#: or a constant broadcast along the last axis.
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "Greater", "And", "Or", "Where"})
#: The symbolic length of the packed token axis.
TOKENS = "packed_tokens"


class _Packer:
    """One rewrite: `decide` which nodes run packed, then `build` the new graph."""

    def __init__(self, model, mask: str) -> None:
        import onnx

        if not model.graph.value_info:
            model = onnx.shape_inference.infer_shapes(model)
        self.model = model
        graph = model.graph
        self.shape: dict[str, list[Any]] = {}
        self.dtype: dict[str, int] = {}
        for value in [*graph.input, *graph.output, *graph.value_info]:
            tensor = value.type.tensor_type
            if tensor.HasField("shape"):
                self.shape[value.name] = [
                    d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else None)
                    for d in tensor.shape.dim
                ]
            self.dtype[value.name] = tensor.elem_type
        self.constants: dict[str, list[int]] = {}  # name -> shape
        for init in graph.initializer:
            self.constants[init.name] = list(init.dims)
            self.dtype[init.name] = init.data_type
        for node in graph.node:
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        self.constants[node.output[0]] = list(attribute.t.dims)
                        self.dtype[node.output[0]] = attribute.t.data_type
                    elif attribute.name in ("value_float", "value_int"):
                        self.constants[node.output[0]] = []
        self.names = {name for node in graph.node for name in (*node.output, node.name)}
        self.names.update(init.name for init in graph.initializer)
        self.names.update(value.name for value in graph.input)
        self.uid = 0
        self.packed_names: dict[str, str] = {}
        self.producer = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list] = collections.defaultdict(list)
        for node in graph.node:
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        self.outputs = {value.name for value in graph.output}

        if mask not in {value.name for value in graph.input}:
            raise PackError(f"no attention mask input {mask}")
        dims = self.shape.get(mask)
        if not dims or len(dims) != 2 or not all(isinstance(d, str) for d in dims):
            raise PackError(f"the mask {mask} is not a [batch, length] input of symbolic size (it is {dims})")
        self.mask = mask
        self.batch, self.length = dims
        self.seed = next(
            (n.output[0] for n in graph.node if n.op_type == "LayerNormalization" and self.aligned(n.output[0])),
            None,
        )
        if self.seed is None:
            raise PackError("no LayerNormalization over a [batch, length, hidden] tensor to start packing at")

    # ---- what a tensor is ---------------------------------------------------------------------
    def packed_name(self, name: str) -> str:
        """The name of `name`'s packed form: its own, not taken by any other tensor."""
        if name not in self.packed_names:
            self.packed_names[name] = self.fresh(f"{name}__packed")
        return self.packed_names[name]

    def fresh(self, base: str) -> str:
        name = base
        while name in self.names:
            self.uid += 1
            name = f"{base}_{self.uid}"
        self.names.add(name)
        return name

    def aligned(self, name: str) -> bool:
        """`[batch, length, X]`: one row per token."""
        dims = self.shape.get(name)
        return dims is not None and len(dims) == 3 and dims[0] == self.batch and dims[1] == self.length

    def width(self, name: str) -> int | None:
        dims = self.shape.get(name)
        return dims[-1] if dims and isinstance(dims[-1], int) and dims[-1] > 0 else None

    def along_last_axis(self, name: str) -> bool:
        dims = self.constants[name]
        return len(dims) <= 1 or (len(dims) <= 3 and all(d == 1 for d in dims[:-1]))

    def constant(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        for init in self.model.graph.initializer:
            if init.name == name:
                return numpy_helper.to_array(init)
        for attribute in self.producer[name].attribute:
            if attribute.name == "value":
                return numpy_helper.to_array(attribute.t)
        raise KeyError(name)

    def data_inputs(self, node) -> list[int] | None:
        """The positions of `node`'s inputs that are packed where it runs token-wise; None
        where it cannot."""
        op = node.op_type
        if node.domain not in ("", "ai.onnx") or any(o and self.consumers.get(o) for o in node.output[1:]):
            return None
        if node.output[0] in self.shape and not self.aligned(node.output[0]):
            return None
        if op == "MatMul":
            weight = node.input[1]
            return [0] if weight in self.constants and len(self.constants[weight]) == 2 else None
        if op == "LayerNormalization":
            axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
            ok = axis in (-1, 2) and all(x in self.constants for x in node.input[1:] if x)
            return [0] if ok else None
        if op in UNARY:
            return [0] if all(x in self.constants for x in node.input[1:] if x) else None
        if op in BINARY:
            positions = []
            for i, name in enumerate(node.input):
                if name in self.constants:
                    if not self.along_last_axis(name):
                        return None
                elif name in self.packed or self.aligned(name):
                    positions.append(i)
                else:
                    return None
            return positions
        return None

    def segment_sum(self, node) -> bool:
        """A ReduceSum over the length axis of a tensor that runs packed (its padded form
        would be the zero-padded unpack)."""
        if node.op_type != "ReduceSum" or node.input[0] not in self.packed_outputs or len(node.input) < 2:
            return False
        if node.input[1] not in self.constants:
            return False
        return self.constant(node.input[1]).reshape(-1).tolist() in ([1], [-2])

    # ---- pass 1: which nodes run packed ---------------------------------------------------------
    def decide(self) -> None:
        self.packed = {self.seed}
        self.pack_points = {self.seed}  # padded tensors packed by a Gather at idx
        self.flipped: set[int] = set()  # nodes (by id) that run packed
        self.packed_outputs: set[str] = set()  # their outputs' (dense) names

        def upstream(name: str) -> None:
            if name in self.packed:
                return
            node = self.producer.get(name)
            if (
                node is not None
                and node.op_type != "Constant"
                and len(self.consumers[name]) == 1
                and name not in self.outputs
            ):
                positions = self.data_inputs(node)
                if positions and all(node.input[i] in self.packed or self.aligned(node.input[i]) for i in positions):
                    for i in positions:
                        upstream(node.input[i])
                    self.flipped.add(id(node))
                    self.packed_outputs.add(name)
                    self.packed.add(name)
                    return
            self.pack_points.add(name)
            self.packed.add(name)

        for node in self.model.graph.node:
            if id(node) in self.flipped:
                continue
            positions = self.data_inputs(node)
            if not positions or not any(node.input[i] in self.packed for i in positions):
                continue
            for i in positions:
                upstream(node.input[i])
            self.flipped.add(id(node))
            self.packed_outputs.add(node.output[0])
            self.packed.add(node.output[0])

    # ---- pass 2: the new graph ---------------------------------------------------------------
    def build(self):
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        self.decide()
        if not self.packed_outputs:
            raise PackError("no token-wise node after the embeddings' LayerNorm")
        nodes: list = []
        initializers: list = []
        value_info: list = []
        packed_done: set[str] = set()
        padded_done: set[str] = set()
        cache: dict = {}

        def add(op: str, inputs: list[str], output: str | None = None, **attributes) -> str:
            out = output or self.fresh(f"pack_{op}")
            nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(f"pack_{op}"), **attributes))
            return out

        def const(name: str, value) -> str:
            value = np.asarray(value)
            key = (value.dtype.str, value.shape, value.tobytes())
            if key not in cache:
                cache[key] = self.fresh(name)
                initializers.append(numpy_helper.from_array(value, cache[key]))
            return cache[key]

        minus1, zero1, one1, two1 = (const(f"pack_{v}", np.array([v], np.int64)) for v in (-1, 0, 1, 2))
        one = const("pack_one", np.array(1, np.int64))
        flat_mask = add("Reshape", [self.mask, minus1], self.fresh("pack_mask_flat"))
        real = add("Cast", [flat_mask], self.fresh("pack_real"), to=TensorProto.BOOL)
        idx = add("Reshape", [add("NonZero", [real]), minus1], self.fresh("pack_idx"))  # [T]
        value_info.append(helper.make_tensor_value_info(idx, TensorProto.INT64, [TOKENS]))
        count = add("Shape", [idx], self.fresh("pack_T"))  # [1]
        ranks = add("CumSum", [add("Cast", [real], to=TensorProto.INT64), const("pack_zero", np.array(0, np.int64))])
        where = add("Where", [real, add("Sub", [ranks, one]), count], self.fresh("pack_map"))  # [rows * width]
        mask_shape = add("Shape", [self.mask], self.fresh("pack_mask_shape"))  # (rows, width)
        padded_shape = add("Concat", [mask_shape, minus1], self.fresh("pack_padded_shape"), axis=0)
        onehots: dict[int, str] = {}
        row_match: list[str] = []

        def onehot(elem: int) -> str:  # [rows, T]: which row each packed token is of
            if elem not in onehots:
                if not row_match:
                    rows = add("Slice", [mask_shape, zero1, one1])
                    width = add("Slice", [mask_shape, one1, two1])
                    row_of_token = add("Unsqueeze", [add("Div", [idx, width]), zero1])  # [1, T]
                    every_row = add(
                        "Range", [const("pack_zero", np.array(0, np.int64)), add("Squeeze", [rows, zero1]), one]
                    )
                    row_match.append(add("Equal", [add("Unsqueeze", [every_row, one1]), row_of_token]))
                onehots[elem] = add("Cast", [row_match[0]], self.fresh("pack_onehot"), to=elem)
            return onehots[elem]

        def pack(name: str) -> str:
            if name not in packed_done:
                flat = add("Reshape", [name, const("pack_flat3", np.array([1, -1, 0], np.int64))])
                add("Gather", [flat, idx], self.packed_name(name), axis=1)
                packed_done.add(name)
            return self.packed_name(name)

        def unpack(name: str) -> None:  # the padded form, under the dense graph's name
            if name in padded_done:
                return
            elem = self.dtype.get(name, TensorProto.FLOAT)
            width = self.width(name)
            if width is not None:
                zeros = const(f"pack_zeros{width}", np.zeros((1, 1, width), helper.tensor_dtype_to_np_dtype(elem)))
            else:
                last = add("Shape", [self.packed_name(name)], start=-1)
                shape = add("Concat", [const("pack_ones2", np.array([1, 1], np.int64)), last], axis=0)
                zeros = add("ConstantOfShape", [shape], value=helper.make_tensor("zero", elem, [1], [0]))
            rows = add("Gather", [add("Concat", [self.packed_name(name), zeros], axis=1), where], axis=1)
            add("Reshape", [rows, padded_shape], name)
            padded_done.add(name)

        segment_sums = 0
        for node in self.model.graph.node:
            if id(node) in self.flipped:
                rewritten = onnx.NodeProto()
                rewritten.CopyFrom(node)
                for i, name in enumerate(node.input):
                    if name in self.packed:
                        rewritten.input[i] = pack(name) if name in self.pack_points else self.packed_name(name)
                rewritten.output[0] = self.packed_name(node.output[0])
                for attribute in rewritten.attribute:
                    if node.op_type == "LayerNormalization" and attribute.name == "axis":
                        attribute.i = -1
                nodes.append(rewritten)
                if node.output[0] in self.dtype:
                    dims: list[str | int | None] = [1, TOKENS, self.width(node.output[0])]
                    elem = self.dtype[node.output[0]]
                    value_info.append(helper.make_tensor_value_info(rewritten.output[0], elem, dims))
                continue
            if self.segment_sum(node):
                segment_sums += 1
                name = node.input[0]
                packed2d = add("Squeeze", [self.packed_name(name), zero1])  # [T, X]
                matrix = onehot(self.dtype.get(name, TensorProto.FLOAT))
                keep = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
                if keep:
                    add("Unsqueeze", [add("MatMul", [matrix, packed2d]), one1], node.output[0])
                else:
                    add("MatMul", [matrix, packed2d], node.output[0])
                continue
            for name in node.input:
                if name in self.packed_outputs:
                    unpack(name)
            nodes.append(node)
        for value in self.model.graph.output:
            if value.name in self.packed_outputs:
                unpack(value.name)

        out = onnx.ModelProto()
        out.CopyFrom(self.model)
        del out.graph.node[:]
        out.graph.node.extend(nodes)
        out.graph.initializer.extend(initializers)
        out.graph.value_info.extend(value_info)
        _prune(out.graph)
        stats = {
            "packed_nodes": len(self.flipped),
            "packed_at": len(self.pack_points),
            "unpacked": len(padded_done),
            "segment_sums": segment_sums,
        }
        return out, stats


def _prune(graph) -> None:
    """Drop the nodes, initializers and value infos nothing reads any more."""
    needed = {value.name for value in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    initializers = [init for init in graph.initializer if init.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    produced = {out for node in kept for out in node.output}
    value_info = [value for value in graph.value_info if value.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(value_info)


def pack_tokens(model, mask: str = C.INPUT_1):
    """The packed form of the dense BERT graph `model` (an `onnx.ModelProto`, left as it
    is), and what was rewritten (`packed_nodes`, ...). PackError where its structure is not
    one this rewrite knows (no embeddings' LayerNorm, no token-wise node after it, a mask
    that is not `[batch, length]`)."""
    return _Packer(model, mask).build()
