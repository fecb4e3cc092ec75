"""`postprocess`: BERT_OUTPUT, FOREST_OUTPUT, WORDS -> SCORE (their weighted mean),
BERT_SCORE, FOREST_SCORE (so that every ensemble output is a leaf), SCORE_LOW and SCORE_HIGH
(the calibrated interval, `intervals`; `scoring.Blender`).

Parameters BERT_WEIGHT and FOREST_WEIGHT (0.5 each by default); NaN or infinity fails its
own request. On a GPU instance the scores arrive on the GPU (FORCE_CPU_ONLY_INPUT_TENSORS
"no") and are read and written through DLPack; on a CPU instance the same code on NumPy.
"""

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton.intervals import IntervalParameters
from readability_triton.scoring import Blender
from readability_triton.stub.runtime import PythonModel


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args, finite=True)
        weights = (self.model.float_parameter(C.BERT_WEIGHT, 0.5), self.model.float_parameter(C.FOREST_WEIGHT, 0.5))
        interval = self.model.build(IntervalParameters.from_parameters, self.model.params)
        self.runner = Blender(*weights, xp=self.model.xp, interval=interval)
        self.model.log(self.runner.describe())

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        del self.runner
