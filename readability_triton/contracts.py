"""Tensor contracts of the pipeline: every name, dtype and shape, defined once.

The model configurations (`config.pbtxt`), the Python backends, the client and the tests
all take tensor names, Triton data types and dims from here; a test checks every
`config.pbtxt` of every profile against these contracts.

Dims exclude the batch dimension (every model here batches, `max_batch_size > 0`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Number of frequency words per list in the vocabulary (the spec's N).
VOCABULARY_SIZE = 100
#: Number of readability features: 7 counts and ratios + 2 * N word frequencies.
N_FEATURES = 7 + 2 * VOCABULARY_SIZE
#: Default sequence length of the BERT branch.
DEFAULT_MAX_LENGTH = 256
#: Default limit on the UTF-8 size of one text accepted by the Python steps.
DEFAULT_MAX_TEXT_BYTES = 100_000

ENSEMBLE = "readability"
PREPROCESS = "preprocess"
BERT = "bert"
FEATURIZE = "featurize"
FOREST = "forest"
POSTPROCESS = "postprocess"
STEP_MODELS = (PREPROCESS, BERT, FEATURIZE, FOREST, POSTPROCESS)
ALL_MODELS = STEP_MODELS + (ENSEMBLE,)
#: Models that are Python-backend models in every profile.
PYTHON_MODELS = (PREPROCESS, FEATURIZE, POSTPROCESS)

# Tensor names.
TEXT = "TEXT"
INPUT_IDS = "INPUT_IDS"
ATTENTION_MASK = "ATTENTION_MASK"
FEATURES = "FEATURES"
BERT_SCORE = "BERT_SCORE"
FOREST_SCORE = "FOREST_SCORE"
SCORE = "SCORE"
# The pytorch_libtorch and FIL backends name their tensors by position.
INPUT_0 = "input__0"
INPUT_1 = "input__1"
OUTPUT_0 = "output__0"

#: Triton data type -> NumPy dtype (TYPE_STRING is an object array of bytes).
NUMPY_DTYPES = {
    "TYPE_STRING": np.object_,
    "TYPE_FP32": np.float32,
    "TYPE_INT64": np.int64,
}
#: Triton data type -> the datatype string of the KServe v2 protocol (clients).
WIRE_DTYPES = {"TYPE_STRING": "BYTES", "TYPE_FP32": "FP32", "TYPE_INT64": "INT64"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    data_type: str  # Triton's enum name, e.g. "TYPE_FP32"
    dims: tuple[int, ...]

    @property
    def numpy_dtype(self):
        return NUMPY_DTYPES[self.data_type]

    @property
    def wire_dtype(self) -> str:
        return WIRE_DTYPES[self.data_type]


@dataclass(frozen=True)
class ModelContract:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec:
        return _by_name(self.inputs, name, self.name, "input")

    def output(self, name: str) -> TensorSpec:
        return _by_name(self.outputs, name, self.name, "output")


def _by_name(specs, name, model, kind):
    for spec in specs:
        if spec.name == name:
            return spec
    raise KeyError(f"model {model!r} has no {kind} {name!r}")


def contracts(max_length: int = DEFAULT_MAX_LENGTH, n_features: int = N_FEATURES) -> dict[str, ModelContract]:
    """The contract of every model, for one sequence length and feature count."""
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2 ([CLS] and [SEP]), got {max_length}")
    text = TensorSpec(TEXT, "TYPE_STRING", (1,))
    score = lambda name: TensorSpec(name, "TYPE_FP32", (1,))  # noqa: E731
    ids = lambda name: TensorSpec(name, "TYPE_INT64", (max_length,))  # noqa: E731
    return {
        ENSEMBLE: ModelContract(ENSEMBLE, (text,), (score(SCORE), score(BERT_SCORE), score(FOREST_SCORE))),
        PREPROCESS: ModelContract(PREPROCESS, (text,), (ids(INPUT_IDS), ids(ATTENTION_MASK))),
        BERT: ModelContract(BERT, (ids(INPUT_0), ids(INPUT_1)), (score(OUTPUT_0),)),
        FEATURIZE: ModelContract(FEATURIZE, (text,), (TensorSpec(FEATURES, "TYPE_FP32", (n_features,)),)),
        FOREST: ModelContract(FOREST, (TensorSpec(INPUT_0, "TYPE_FP32", (n_features,)),), (score(OUTPUT_0),)),
        POSTPROCESS: ModelContract(POSTPROCESS, (score(BERT_SCORE), score(FOREST_SCORE)), (score(SCORE),)),
    }


#: The ensemble's wiring: (step model, {step input: ensemble tensor}, {step output: ensemble tensor}).
ENSEMBLE_STEPS = (
    (PREPROCESS, {TEXT: TEXT}, {INPUT_IDS: INPUT_IDS, ATTENTION_MASK: ATTENTION_MASK}),
    (BERT, {INPUT_0: INPUT_IDS, INPUT_1: ATTENTION_MASK}, {OUTPUT_0: BERT_SCORE}),
    (FEATURIZE, {TEXT: TEXT}, {FEATURES: FEATURES}),
    (FOREST, {INPUT_0: FEATURES}, {OUTPUT_0: FOREST_SCORE}),
    (POSTPROCESS, {BERT_SCORE: BERT_SCORE, FOREST_SCORE: FOREST_SCORE}, {SCORE: SCORE}),
)

#: Largest batch each model accepts. The ensemble's must not exceed any step's.
MAX_BATCH_SIZE = {
    PREPROCESS: 256,
    FEATURIZE: 256,
    BERT: 64,
    FOREST: 256,
    POSTPROCESS: 256,
    ENSEMBLE: 64,
}
