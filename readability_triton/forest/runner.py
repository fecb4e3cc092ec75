"""`GTILRunner`: an artifact set's forest, run by Treelite's GTIL (what FIL computes)."""

from __future__ import annotations

import os

import numpy as np

from ..device import Device, as_device
from ..errors import RequestError
from ..layout import CHECKPOINT, FOREST_ARRAYS
from .arrays import ArrayForestRunner
from .checkpoint import treelite_module


class GTILRunner:
    """features float32 `(n, n_features)` -> scores float32 `(n, 1)`, on the CPU."""

    FILES = (CHECKPOINT,)

    def __init__(self, model, device: Device | str | None = None, path: str = CHECKPOINT, threads: int = 0):
        if as_device(device).is_gpu:
            raise ValueError(
                "the Treelite (GTIL) forest runs on the CPU; GPU deployments serve the checkpoint "
                "with Triton's FIL backend (the gpu and hybrid profiles)"
            )
        self.model = model
        self.path = path
        self.threads = threads  # GTIL's OpenMP threads (0: all cores)
        self._gtil = treelite_module().gtil

    @classmethod
    def from_folder(cls, folder: str, device: Device | str | None = None, threads: int = 0) -> "GTILRunner":
        path = os.path.join(folder, CHECKPOINT)
        return cls(treelite_module().Model.deserialize(path), device, path, threads)

    @property
    def n_features(self) -> int:
        return int(self.model.num_feature)

    def describe(self) -> str:
        return f"{self.model.num_tree} trees on {self.n_features} features (Treelite GTIL, CPU)"

    def __call__(self, features):
        features = np.ascontiguousarray(features, dtype=np.float32)
        if features.ndim != 2 or features.shape[1] != self.n_features:
            raise RequestError(
                f"the forest takes {self.n_features} features per text, got shape {list(features.shape)}"
            )
        out = self._gtil.predict(self.model, features, nthread=self.threads if self.threads > 0 else -1)
        return out.reshape(-1, 1).astype(np.float32)


def forest_runner(folder: str, device: Device | str | None = None, threads: int = 0):
    """The forest of `folder`: the array tree walk where the repository holds
    `forest_arrays.npz` (the portable-gpu profile; NumPy or CuPy by `device`), else GTIL
    (with `threads` OpenMP threads; 0: all cores)."""

    if os.path.isfile(os.path.join(folder, FOREST_ARRAYS)):
        return ArrayForestRunner.from_folder(folder, device)
    return GTILRunner.from_folder(folder, device, threads)
