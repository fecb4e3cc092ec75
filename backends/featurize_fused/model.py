"""`featurize` in the fused repository (`assemble --fused`, the portable profiles): TEXT ->
FOREST_OUTPUT, WORDS and the seven formulas, the 207 features and then the forest in this
one Python model (`branches.ForestBranch`), so that FEATURES never leave the stub.

Parameters as the separate `featurize`'s (MAX_TEXT_BYTES; as the serial wiring's first step
REQUIRE_WORDS, MAX_PENDING_REQUESTS, MAX_QUEUE_SECONDS); in the version folder
`vocabulary.json` and `checkpoint.tl` (Treelite's GTIL on a CPU instance; on a GPU one the
CuPy tree walk of `forest_arrays.npz`), run as the separate `forest` model runs them.
"""

import triton_python_backend_utils as pb_utils

from readability_triton.branches import ForestBranch
from readability_triton.features.runner import FeaturizeRunner
from readability_triton.forest.runner import GTILRunner, forest_runner
from readability_triton.stub.runtime import PythonModel


class TritonPythonModel:
    def initialize(self, args):
        self.model = PythonModel(pb_utils, args)
        folder = self.model.artifacts((*FeaturizeRunner.FILES, *GTILRunner.FILES))
        features = self.model.build(FeaturizeRunner.from_folder, folder, self.model.device, self.model.manifest)
        forest = self.model.build(forest_runner, folder, self.model.device, threads=self.model.threads)
        self.runner = self.model.build(ForestBranch, features, forest)
        self.model.log(self.runner.describe())

    def execute(self, requests):
        return self.model.execute(requests, self.runner)

    def finalize(self):
        del self.runner
