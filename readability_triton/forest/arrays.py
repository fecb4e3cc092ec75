"""The forest as flat arrays, walked with NumPy or CuPy: the `forest` step of the
`portable-gpu` profile (FIL stays the production choice on a GPU; this is for servers
with only the python backend, and it needs no Treelite where it runs).

`export_forest_arrays(checkpoint, out)` (where Treelite is installed: `assemble`) writes
`forest_arrays.npz` from a Treelite checkpoint: every node of every tree, in one array per
field (split feature, threshold, comparison, default direction, children, leaf value),
plus the SHA-256 of the checkpoint it came from. `ArrayForestRunner` walks all trees for
all rows at once, one step per level (a `where` over `(rows, trees)`), then adds the leaf
values tree after tree in float64, divides by the number of trees and adds the base
score, in the order Treelite's GTIL does, so that the float32 result equals GTIL's. On a
GPU the same walk is one kernel (`kernels/forest.cu`): a thread per (row, tree), and the
row's last thread to finish sums its leaves in tree order; two device calls a batch.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..device import Device, as_device
from ..errors import RequestError
from ..kernels.source import compiled
from ..layout import CHECKPOINT, FOREST_ARRAYS, sha256
from .checkpoint import treelite_module


def export_forest_arrays(checkpoint: str, out: str) -> dict:
    """`forest_arrays.npz` from a Treelite checkpoint of a regression forest with numerical
    splits (what `train-forest` writes). Returns a summary."""

    model = treelite_module().Model.deserialize(checkpoint)
    spec = json.loads(model.dump_as_json(pretty_print=False))
    if spec.get("task_type") != "kRegressor" or int(spec.get("num_target", 1)) != 1:
        raise ValueError(f"{checkpoint}: only a single-target regressor can be exported, not {spec.get('task_type')}")
    if spec.get("postprocessor", "identity") != "identity":
        raise ValueError(f"{checkpoint}: postprocessor {spec['postprocessor']!r} (only identity)")
    fields: dict[str, list] = {
        k: [] for k in ("feature", "threshold", "less_equal", "default_left", "left", "right", "leaf", "value")
    }
    roots, depth = [], 0
    for tree in spec["trees"]:
        if tree.get("has_categorical_split"):
            raise ValueError(f"{checkpoint}: categorical splits are not supported")
        offset = len(fields["feature"])
        roots.append(offset)
        nodes = sorted(tree["nodes"], key=lambda n: n["node_id"])
        levels = {0: 0}
        for node in nodes:
            nid = node["node_id"]
            leaf = "leaf_value" in node
            fields["leaf"].append(leaf)
            fields["value"].append(float(node["leaf_value"]) if leaf else 0.0)
            if leaf:
                for key, value in (
                    ("feature", 0),
                    ("threshold", 0.0),
                    ("less_equal", True),
                    ("default_left", True),
                    ("left", offset + nid),
                    ("right", offset + nid),
                ):
                    fields[key].append(value)
                continue
            if node["comparison_op"] not in ("<=", "<"):
                raise ValueError(f"{checkpoint}: comparison {node['comparison_op']!r} (only <= and <)")
            fields["feature"].append(int(node["split_feature_id"]))
            fields["threshold"].append(float(node["threshold"]))
            fields["less_equal"].append(node["comparison_op"] == "<=")
            fields["default_left"].append(bool(node["default_left"]))
            fields["left"].append(offset + int(node["left_child"]))
            fields["right"].append(offset + int(node["right_child"]))
            for child in (node["left_child"], node["right_child"]):
                levels[int(child)] = levels[nid] + 1
        depth = max(depth, max(levels.values()))
    base = spec.get("base_scores", [0.0])
    arrays = {
        "feature": np.asarray(fields["feature"], dtype=np.int64),
        "threshold": np.asarray(fields["threshold"], dtype=np.float64),
        "less_equal": np.asarray(fields["less_equal"], dtype=bool),
        "default_left": np.asarray(fields["default_left"], dtype=bool),
        "left": np.asarray(fields["left"], dtype=np.int64),
        "right": np.asarray(fields["right"], dtype=np.int64),
        "leaf": np.asarray(fields["leaf"], dtype=bool),
        "value": np.asarray(fields["value"], dtype=np.float64),
        "roots": np.asarray(roots, dtype=np.int64),
    }
    meta = {
        "checkpoint_sha256": sha256(checkpoint),
        "n_features": int(spec["num_feature"]),
        "n_trees": len(roots),
        "depth": int(depth),
        "average": bool(spec.get("average_tree_output", False)),
        "base_score": float(base[0] if base else 0.0),
    }
    np.savez(out, meta=np.asarray(json.dumps(meta)), **arrays)
    return meta


class ArrayForestRunner:
    """features float32 `(n, n_features)` -> scores float32 `(n, 1)`, on NumPy or CuPy
    (`device`); inputs and outputs stay on the device."""

    FILES = (FOREST_ARRAYS,)

    def __init__(self, arrays: dict, meta: dict, device: Device | str | None = None):
        self.device = as_device(device)
        self.xp = xp = self.device.array_module()
        self.meta = meta
        self.n_features = int(meta["n_features"])
        self.n_trees = int(meta["n_trees"])
        self.depth = int(meta["depth"])
        self.arrays = {name: xp.asarray(value) for name, value in arrays.items()}

    @classmethod
    def from_folder(cls, folder: str, device: Device | str | None = None) -> "ArrayForestRunner":
        """`forest_arrays.npz` in `folder`, checked against the `checkpoint.tl` beside it."""
        path = os.path.join(folder, FOREST_ARRAYS)
        if not os.path.isfile(path):
            raise ValueError(f"no {FOREST_ARRAYS} in {folder}: assemble the portable-gpu profile, which writes it")
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {name: data[name] for name in data.files if name != "meta"}
        checkpoint = os.path.join(folder, CHECKPOINT)
        if os.path.isfile(checkpoint) and sha256(checkpoint) != meta["checkpoint_sha256"]:
            raise ValueError(f"{path} was exported from another checkpoint than {checkpoint}: re-assemble")
        return cls(arrays, meta, device)

    def describe(self) -> str:
        where = "CuPy on " + str(self.device) if self.device.is_gpu else "NumPy on the CPU"
        return f"{self.n_trees} trees of depth {self.depth} on {self.n_features} features (array tree walk, {where})"

    def __call__(self, features):
        xp, a = self.xp, self.arrays
        x = xp.asarray(features)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise RequestError(f"the forest takes {self.n_features} features per text, got shape {list(x.shape)}")
        if xp is not np:
            return self._on_device(x)
        x = x.astype(xp.float32).astype(xp.float64)  # GTIL compares the float32 input in float64
        n = x.shape[0]
        rows = xp.arange(n, dtype=xp.int64)[:, None]
        node = xp.broadcast_to(a["roots"][None, :], (n, self.n_trees)).copy()
        for _ in range(self.depth):
            value = x[rows, a["feature"][node]]
            threshold = a["threshold"][node]
            test = xp.where(a["less_equal"][node], value <= threshold, value < threshold)
            go_left = xp.where(xp.isnan(value), a["default_left"][node], test)
            node = xp.where(a["leaf"][node], node, xp.where(go_left, a["left"][node], a["right"][node]))
        leaves = a["value"][node]
        total = xp.zeros(n, dtype=xp.float64)
        for tree in range(self.n_trees):  # tree after tree, as GTIL sums
            total += leaves[:, tree]
        if self.meta["average"]:
            total /= self.n_trees
        total += self.meta["base_score"]
        return total.astype(xp.float32).reshape(-1, 1)

    def _on_device(self, x):
        """The walk as one kernel: scores, the per-row counters and the leaves in one zeroed
        array, then one launch (`kernels/forest.cu`)."""
        xp, a = self.xp, self.arrays
        if x.dtype != xp.float32 or not x.flags.c_contiguous:
            x = xp.ascontiguousarray(x, dtype=xp.float32)
        n, trees = int(x.shape[0]), self.n_trees
        # float32 scores, uint32 counters, then the float64 leaves (at 8 n bytes: aligned).
        scratch = xp.zeros(2 * n + 2 * n * trees, dtype=xp.uint32)
        scores, finished = scratch[:n].view(xp.float32), scratch[n : 2 * n]
        leaves = scratch[2 * n :].view(xp.float64)
        compiled(xp, "forest.cu").launch(
            "walk_forest", n * trees, x, n, self.n_features, a["roots"], trees, self.depth, a["feature"],
            a["threshold"], a["less_equal"], a["default_left"], a["left"], a["right"], a["leaf"], a["value"],
            int(bool(self.meta["average"])), float(self.meta["base_score"]), leaves, finished, scores,
        )  # fmt: skip
        return scores.reshape(-1, 1)
