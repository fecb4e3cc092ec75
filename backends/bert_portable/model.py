"""`bert` in the `portable` profile: the TorchScript regressor `1/model.pt` run by torch.jit
inside the python backend, with the pytorch_libtorch backend's tensor names
(`input__0` token ids, `input__1` attention mask, INT64 -> `output__0` FP32 [1]).

For servers without the pytorch_libtorch backend (e.g. the tritonserver of the
nvidia-pytriton wheel). It runs on the CPU; GPU deployments use the `gpu`/`hybrid`
profiles, where Triton's own libtorch backend serves the same `model.pt`. A request whose
token ids fall outside the model's vocabulary, or whose mask is not 0/1, fails alone
(INVALID_ARG, one line).
"""
import os

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton import serving


class TritonPythonModel:
    def initialize(self, args):
        import numpy as np
        import torch

        self.np, self.torch = np, torch
        if serving.instance_device(args).is_gpu:
            raise ValueError("the portable bert model runs on the CPU (KIND_CPU); on a GPU use the "
                             "gpu or hybrid profile, where the pytorch_libtorch backend serves model.pt")
        config = serving.model_config(args)
        folder, _ = serving.checked_artifacts(args, ["model.pt"])
        path = os.path.join(folder, "model.pt")
        self.module = torch.jit.load(path, map_location="cpu").eval()
        self.vocab_size = serving.embedding_rows(self.module)
        self.dims = {spec["name"]: tuple(int(d) for d in spec["dims"]) for spec in config["input"]}
        for name in (C.INPUT_0, C.INPUT_1):
            if name not in self.dims:
                raise ValueError(f"the bert config must have the input {name}")

    def execute(self, requests):
        batch = serving.read_array_requests(pb_utils, requests, (C.INPUT_0, C.INPUT_1), self.np, self.dims)
        return serving.run_batch(pb_utils, batch, self._score, logger=pb_utils.Logger)

    def _score(self, inputs):
        np, torch = self.np, self.torch
        ids, mask = inputs[C.INPUT_0], inputs[C.INPUT_1]
        serving.check_token_ids(ids, mask, self.vocab_size)
        with torch.inference_mode():
            scores = self.module(torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)),
                                 torch.from_numpy(np.ascontiguousarray(mask, dtype=np.int64)))
        return {C.OUTPUT_0: scores.reshape(-1, 1).to(torch.float32).numpy()}
