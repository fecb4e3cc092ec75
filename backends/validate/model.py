"""Triton Python model `validate`: TEXT -> VALID_TEXT, the ensemble's first step.

It refuses, request by request with INVALID_ARG, what no later step may refuse: a text
that is not valid UTF-8, one over `MAX_TEXT_BYTES`, or one without a word (empty,
spaces, punctuation or control characters only); it passes the others on unchanged.
Only the first step of the ensemble may reject a request: see the ensemble rules in
`readability_triton.contracts.ENSEMBLE_STEPS`. It always runs on the CPU (BYTES tensors
live there).
"""
import numpy as np
import triton_python_backend_utils as pb_utils

from readability_triton import contracts, serving


class TritonPythonModel:
    def initialize(self, args):
        params = serving.parameters(serving.model_config(args))
        self.max_text_bytes = serving.int_parameter(params, "MAX_TEXT_BYTES", contracts.DEFAULT_MAX_TEXT_BYTES)

    def execute(self, requests):
        batch = serving.read_text_requests(pb_utils, requests, contracts.TEXT, self.max_text_bytes,
                                           require_words=True)
        return serving.run_batch(pb_utils, batch, self._pass_on, logger=pb_utils.Logger)

    @staticmethod
    def _pass_on(texts):
        rows = np.empty((len(texts), 1), dtype=np.object_)
        rows[:, 0] = texts
        return {contracts.VALID_TEXT: rows}
