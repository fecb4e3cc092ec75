"""`validate`: TEXT -> VALID_TEXT, the ensemble's first step (always on the CPU).

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
