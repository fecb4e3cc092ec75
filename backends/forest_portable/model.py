"""`forest` in the `portable` profile: the Treelite checkpoint `1/checkpoint.tl` run by
Treelite's GTIL inside the python backend, with the FIL backend's tensor names
(`input__0` FP32 [n_features] -> `output__0` FP32 [1]).

For servers without the FIL backend (e.g. the tritonserver of the nvidia-pytriton wheel);
the `gpu`/`hybrid`/`cpu` profiles serve the same checkpoint with Triton's FIL backend.
"""
import os

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton import serving


class TritonPythonModel:
    def initialize(self, args):
        import numpy as np
        import treelite
        import treelite.gtil

        self.np, self.gtil = np, treelite.gtil
        config = serving.model_config(args)
        folder, _ = serving.checked_artifacts(args, ["checkpoint.tl"])
        path = os.path.join(folder, "checkpoint.tl")
        self.model = treelite.Model.deserialize(path)
        self.dims = {spec["name"]: tuple(int(d) for d in spec["dims"]) for spec in config["input"]}
        if self.dims.get(C.INPUT_0) != (self.model.num_feature,):
            raise ValueError(f"{path} expects {self.model.num_feature} features, the config's input__0 "
                             f"has dims {list(self.dims.get(C.INPUT_0, ()))}")

    def execute(self, requests):
        batch = serving.read_array_requests(pb_utils, requests, (C.INPUT_0,), self.np, self.dims)
        return serving.run_batch(pb_utils, batch, self._predict, logger=pb_utils.Logger)

    def _predict(self, inputs):
        np = self.np
        features = np.ascontiguousarray(inputs[C.INPUT_0], dtype=np.float32)
        return {C.OUTPUT_0: self.gtil.predict(self.model, features).reshape(-1, 1).astype(np.float32)}
