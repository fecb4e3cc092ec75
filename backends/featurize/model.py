"""`featurize`: TEXT -> FEATURES, the 207 readability features, and WORDS, each text's word
count (`FeaturizeRunner`).

Parameter MAX_TEXT_BYTES; `vocabulary.json` in the version folder, whose feature count
must be the dims of FEATURES. In the serial wiring (Triton before 26.02) it is the
ensemble's first step: REQUIRE_WORDS refuses a text without a word (from its own WORDS,
no second pass), and MAX_PENDING_REQUESTS / MAX_QUEUE_SECONDS shed load. On a GPU
instance it runs on CuPy (only the texts go there) and FEATURES leaves through DLPack; on
a CPU instance on NumPy.
"""

import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton.features.runner import FeaturizeRunner
from readability_triton.stub.runtime import PythonModel


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args)
        folder = self.model.artifacts(FeaturizeRunner.FILES)
        self.runner = self.model.build(FeaturizeRunner.from_folder, folder, self.model.device, self.model.manifest)
        self.model.expect_dims({C.FEATURES: (self.runner.n_features,)}, "vocabulary.json")
        self.model.log(self.runner.describe())

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        del self.runner
