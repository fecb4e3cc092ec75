"""`preprocess`: TEXT -> INPUT_IDS, ATTENTION_MASK (BERT WordPiece; `TokenizerRunner`).

Parameters MAX_LENGTH, BUCKETS (each request's ids cut to the smallest bucket that holds
its longest text: `buckets`; one bucket, MAX_LENGTH, pads every text to it, and the outputs'
dims are then [MAX_LENGTH], else [-1]) and MAX_TEXT_BYTES; the tokenizer files in the
version folder. On a GPU instance the ids are built there (cuDF + CuPy, or CuPy
array code where cuDF is missing; texts neither can match exactly go through the CPU path)
and leave through DLPack; on a CPU instance the tokenizers library builds them.
"""

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton.buckets import describe_buckets, request_cutter
from readability_triton.stub.runtime import PythonModel
from readability_triton.tokenizer.runner import TokenizerRunner


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args)
        length = self.model.int_parameter(C.MAX_LENGTH, C.DEFAULT_MAX_LENGTH, minimum=2)
        buckets = self.model.buckets(length)
        width = (-1,) if len(buckets) > 1 else (length,)
        self.model.expect_dims(
            {C.INPUT_IDS: width, C.ATTENTION_MASK: width},
            "the length setting (parameters MAX_LENGTH and BUCKETS; -1: cut to buckets)",
        )
        self.cut = request_cutter(buckets, xp=self.model.xp) if len(buckets) > 1 else None
        folder = self.model.artifacts((), optional=TokenizerRunner.FILES)
        self.runner = self.model.build(
            TokenizerRunner.from_folder, folder, length, self.model.device, self.model.manifest
        )
        self.model.log(
            f"{self.runner.describe()}; ids {describe_buckets(buckets)}",
            warn=self.model.device.is_gpu and not self.runner.on_gpu,
        )

    def execute(self, requests):
        return self.model.execute(requests, self.runner, self.cut)

    def finalize(self):
        del self.runner
