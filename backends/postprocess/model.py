"""`postprocess`: SCORE = weighted mean of the two branch scores; it also emits each
branch's score, so that every ensemble output is a leaf (see
`readability_triton.contracts.ENSEMBLE_STEPS`).

Inputs BERT_OUTPUT and FOREST_OUTPUT (the bert and forest steps' outputs), outputs SCORE,
BERT_SCORE, FOREST_SCORE. Weights from the parameters BERT_WEIGHT and FOREST_WEIGHT
(default 0.5 each). A request holding NaN or infinity fails alone (INVALID_ARG). On a GPU
instance the scores arrive on the GPU (FORCE_CPU_ONLY_INPUT_TENSORS "no"), are read
through DLPack into CuPy and leave through DLPack: no host round trip. On a CPU instance
the same code runs on NumPy. All requests of an `execute` call are one pass.
"""
import triton_python_backend_utils as pb_utils

from readability_triton import contracts as C
from readability_triton import serving


class TritonPythonModel:
    def initialize(self, args):
        config = serving.model_config(args)
        params = serving.parameters(config)
        bert = serving.float_parameter(params, "BERT_WEIGHT", 0.5)
        forest = serving.float_parameter(params, "FOREST_WEIGHT", 0.5)
        serving.blend_weights(bert, forest)  # refuse bad weights at load time
        self.weights = (bert, forest)
        self.xp = serving.instance_device(args).array_module()
        contract = C.contracts()[C.POSTPROCESS]
        self.dims = {spec.name: spec.dims for spec in contract.inputs}

    def execute(self, requests):
        batch = serving.read_array_requests(pb_utils, requests, (C.BERT_OUTPUT, C.FOREST_OUTPUT), self.xp,
                                            self.dims, finite=True)
        return serving.run_batch(pb_utils, batch, self._blend, logger=pb_utils.Logger)

    def _blend(self, scores):
        bert, forest = scores[C.BERT_OUTPUT], scores[C.FOREST_OUTPUT]
        return {C.SCORE: serving.blend(bert, forest, *self.weights, xp=self.xp),
                C.BERT_SCORE: bert.astype(self.xp.float32), C.FOREST_SCORE: forest.astype(self.xp.float32)}
