"""`postprocess`: SCORE = weighted mean of BERT_SCORE and FOREST_SCORE.

Weights from the parameters BERT_WEIGHT and FOREST_WEIGHT (default 0.5 each). On a GPU
instance the scores arrive on the GPU (FORCE_CPU_ONLY_INPUT_TENSORS "no"), are read
through DLPack into CuPy and SCORE leaves through DLPack: no host round trip. On a CPU
instance the same code runs on NumPy. All requests of an `execute` call are one pass.
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
        batch, scores = serving.read_array_requests(
            pb_utils, requests, (C.BERT_SCORE, C.FOREST_SCORE), self.xp, self.dims)
        if len(batch.errors) == batch.n_requests:
            return serving.responses(pb_utils, batch, {})
        score = serving.blend(scores[C.BERT_SCORE], scores[C.FOREST_SCORE], *self.weights, xp=self.xp)
        return serving.responses(pb_utils, batch, {C.SCORE: score})
