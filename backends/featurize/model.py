"""Triton Python model `featurize`: TEXT -> FEATURES (the 207 readability features).

A thin adapter over `readability_triton.features.featurize`:

- parameter `MAX_TEXT_BYTES` (default 100000): a longer text fails its own request;
- artifact `vocabulary.json` in the version folder (checked against `manifest.json`
  there when it is present); its feature count must equal the dims of `FEATURES`;
- one `featurize` pass over the texts of all requests of an `execute` call, split back
  per request. On a GPU instance it runs on CuPy on the instance's GPU (only the texts go
  there) and `FEATURES` leaves through DLPack; on a CPU instance it runs on NumPy. A
  request with invalid UTF-8 or an over-long text gets its own INVALID_ARG error.
"""
from __future__ import annotations

import os

import triton_python_backend_utils as pb_utils

from readability_triton import contracts, serving
from readability_triton.features import Vocabulary, VocabularyError, featurize

VOCABULARY_FILE = "vocabulary.json"


class TritonPythonModel:
    def initialize(self, args):
        config = serving.model_config(args)
        params = serving.parameters(config)
        name = args.get("model_name", contracts.FEATURIZE)
        self.max_text_bytes = serving.int_parameter(params, "MAX_TEXT_BYTES", contracts.DEFAULT_MAX_TEXT_BYTES)

        directory, found = serving.checked_artifacts(args, [VOCABULARY_FILE])
        path = os.path.join(directory, VOCABULARY_FILE)
        try:
            self.vocabulary = Vocabulary.load(path)
        except VocabularyError as err:
            raise ValueError(f"{name}: {err}") from None
        dims = serving.output_dims(config, contracts.FEATURES)
        if dims != (self.vocabulary.n_features,):
            raise ValueError(f"{name}: output {contracts.FEATURES} has dims {list(dims)} but {path} gives "
                             f"{self.vocabulary.n_features} features (n={self.vocabulary.n}); the forest "
                             "and the vocabulary must come from the same training run")
        if found is not None and int(found["n_features"]) != self.vocabulary.n_features:
            raise ValueError(f"{name}: manifest.json in {directory} says {found['n_features']} "
                             f"features but {VOCABULARY_FILE} gives {self.vocabulary.n_features}")

        self.device = serving.instance_device(args)
        self.xp = self.device.array_module()
        # Build the vocabulary's tables on the device now, not on the first request.
        featurize(["warm up"], self.vocabulary, xp=self.xp)
        where = f"GPU {self.device.device_id} (CuPy)" if self.device.is_gpu else "CPU (NumPy)"
        pb_utils.Logger.log_info(f"{name}: {self.vocabulary.n_features} features on {where}")

    def execute(self, requests):
        batch = serving.read_text_requests(pb_utils, requests, contracts.TEXT, self.max_text_bytes)
        return serving.run_batch(pb_utils, batch, self._featurize, logger=pb_utils.Logger)

    def _featurize(self, texts):
        return {contracts.FEATURES: featurize(texts, self.vocabulary, xp=self.xp)}

    def finalize(self):
        self.vocabulary = None
