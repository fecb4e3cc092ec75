"""The forest's Treelite checkpoint, read the way the FIL backend reads it.

Checkpoints are Treelite 4.x: the FIL backend of Triton 24.03+ (the project targets 24.10)
reads Treelite 3.9/4.x checkpoints and none reads 5.x (setup.cfg pins `treelite>=4,<5`).
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ForestError

#: The Treelite major version the FIL backend reads (see the module docstring).
TREELITE_MAJOR = 4


def treelite_module():
    import treelite

    major = int(str(treelite.__version__).split(".")[0])
    if major != TREELITE_MAJOR:
        raise ForestError(
            f"treelite {treelite.__version__} is installed, but the FIL backend of the target "
            f"Triton release reads Treelite {TREELITE_MAJOR}.x checkpoints only: "
            f"pip install 'treelite>={TREELITE_MAJOR},<{TREELITE_MAJOR + 1}'"
        )
    return treelite


def gtil_predict(checkpoint, X) -> np.ndarray:
    """Predictions of a Treelite model or checkpoint file, with Treelite's GTIL."""
    treelite = treelite_module()
    model = treelite.Model.deserialize(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else checkpoint
    out = treelite.gtil.predict(model, np.ascontiguousarray(X, dtype=np.float32))
    return np.asarray(out, dtype=np.float64).reshape(len(X), -1)[:, 0]
