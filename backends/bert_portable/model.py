"""`bert` in the `portable` profile: `model.pt` run by torch.jit in the python backend
(`TorchScriptRunner`), with the libtorch backend's tensors (`input__0` ids, `input__1`
mask, INT64 -> `output__0` FP32 [1]). For servers without the pytorch_libtorch backend;
the gpu/hybrid/cpu profiles serve the same file with it. On the CPU.
"""
import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton.bert.runner import TorchScriptRunner
from readability_triton.triton.runtime import PythonModel


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args)
        self.model.expect_inputs((C.INPUT_0, C.INPUT_1))
        folder = self.model.artifacts(TorchScriptRunner.FILES)
        self.runner = self.model.build(TorchScriptRunner.from_folder, folder, self.model.device)
        self.model.log(self.runner.describe())

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        self.runner = None
