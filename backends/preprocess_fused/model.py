"""`preprocess` in the fused repository (`assemble --fused`, the portable profiles): TEXT ->
BERT_OUTPUT, the tokenizer and then BERT in this one Python model (`branches.BertBranch`),
so that the token ids never leave the stub.

Parameters MAX_LENGTH, BUCKETS (BERT runs rows by bucket: `buckets`) and MAX_TEXT_BYTES; in
the version folder the tokenizer files and
`model.onnx` or `model.pt`, run as the separate `bert` model runs them (ONNX Runtime on a CPU
instance, torch on a GPU one). In the serial wiring its AFTER input (the forest's score)
only orders the steps.
"""

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton.bert.runner import bert_runner
from readability_triton.branches import BertBranch
from readability_triton.layout import BERT_FORMATS
from readability_triton.stub.runtime import PythonModel
from readability_triton.tokenizer.runner import TokenizerRunner


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args)
        length = self.model.int_parameter(C.MAX_LENGTH, C.DEFAULT_MAX_LENGTH, minimum=2)
        folder = self.model.artifacts((), optional=(*TokenizerRunner.FILES, *BERT_FORMATS.values()))
        tokenizer = self.model.build(
            TokenizerRunner.from_folder, folder, length, self.model.device, self.model.manifest
        )
        bert = self.model.build(
            bert_runner, folder, self.model.device, threads=self.model.threads, buckets=self.model.buckets(length)
        )
        self.runner = BertBranch(tokenizer, bert)
        self.model.log(self.runner.describe(), warn=self.model.device.is_gpu and not tokenizer.on_gpu)

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        del self.runner
