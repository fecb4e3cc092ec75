"""`forest` in the `portable` profiles: `checkpoint.tl` run by Treelite's GTIL on the CPU
(`portable`), or its arrays walked with CuPy on the GPU (`portable-gpu`,
`forest_arrays.npz`), in the python backend, with the FIL backend's tensors (`input__0`
FP32 [n_features] -> `output__0` FP32 [1]). For servers without the FIL backend; the
gpu/hybrid/cpu profiles serve the same checkpoint with it.
"""

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton.forest.runner import GTILRunner, forest_runner
from readability_triton.stub.runtime import PythonModel


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args)
        folder = self.model.artifacts(GTILRunner.FILES)
        self.runner = self.model.build(forest_runner, folder, self.model.device, threads=self.model.threads)
        self.model.expect_dims({C.INPUT_0: (self.runner.n_features,)}, "checkpoint.tl")
        self.model.log(self.runner.describe())

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        del self.runner
