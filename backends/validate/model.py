"""`validate`: TEXT -> VALID_TEXT, the first step of the parallel wiring (Triton 26.02+;
always on the CPU). The serial wiring has no validate: featurize checks the text there.

It refuses, request by request with INVALID_ARG, what no later step may refuse (invalid
UTF-8, a text over MAX_TEXT_BYTES, a text without a word) and passes the others on
unchanged: see the ensemble rules at `readability_triton.contracts.PARALLEL_STEPS`.
"""

import triton_python_backend_utils as pb_utils

from readability_triton.stub.runtime import PythonModel
from readability_triton.texts import TextRows


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args, require_words=True)
        self.runner = TextRows()

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        del self.runner
