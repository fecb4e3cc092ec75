"""`bert` in the `portable` profile: `model.onnx` (ONNX Runtime) or `model.pt` (torch.jit),
whichever the version folder holds, run in the python backend (`bert.runner`), with the
onnxruntime/libtorch backends' tensors (`input__0` ids, `input__1` mask, INT64 ->
`output__0` FP32 [1]), rows by bucket (parameters MAX_LENGTH and BUCKETS, as preprocess's:
`buckets`). For servers without those backends; the gpu/hybrid/cpu profiles
serve the same file with them. ONNX Runtime on a CPU instance (`portable`); TorchScript on a
GPU instance (`portable-gpu`: torch on CUDA, DLPack in and out).
"""

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton.bert.runner import bert_runner, request_check
from readability_triton.layout import BERT_FORMATS
from readability_triton.stub.runtime import PythonModel


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args)
        self.model.expect_inputs((C.INPUT_0, C.INPUT_1))
        folder = self.model.artifacts((), optional=BERT_FORMATS.values())
        length = self.model.int_parameter(C.MAX_LENGTH, C.DEFAULT_MAX_LENGTH, minimum=2)
        self.runner = self.model.build(
            bert_runner, folder, self.model.device, threads=self.model.threads, buckets=self.model.buckets(length)
        )
        self.model.check_requests(request_check(self.runner))  # each request's own width, before they join
        self.model.log(self.runner.describe())

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        del self.runner
