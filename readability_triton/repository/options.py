"""`AssemblyOptions`: every choice that shapes a model repository, as one frozen value.

The CLI (`assemble`, `demo`) builds it once from its flags and passes it whole:
`assemble(artifacts, out, options)` completes it from the artifact set (its sequence length
and feature count, the BERT format it holds, the set's fitted weights and calibrated
interval, the bucket set checked against the sequence length) and hands the completed value
on to `write_configs`, `render_config` and `model_config`. A field nobody
set keeps its default; nothing travels as a list of keywords.

The space it spans: 5 profiles × fused or not × the Triton release (whose wiring is parallel
or serial) × the BERT format × TensorRT, and the served parameters (weights, interval, text
limit, load shedding, buckets).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import contracts as C
from ..intervals import DEFAULT_LEVEL, IntervalParameters
from . import releases
from .profiles import (
    DEFAULT_BERT_FORMAT,
    DEFAULT_MAX_PENDING_REQUESTS,
    DEFAULT_MAX_QUEUE_SECONDS,
    DEFAULT_TENSORRT_CACHE,
)


@dataclass(frozen=True)
class AssemblyOptions:
    """What a repository is assembled for. `profile` is one of `profiles.PROFILES`; the rest
    default to what `assemble` does without flags."""

    profile: str
    #: "onnx" or "torchscript"; None: the set's better one for the profile (`pick_bert_format`).
    bert_format: str | None = None
    #: SCORE's weights, both or neither; None: the set's fitted weights, else 0.5 each.
    bert_weight: float | None = None
    forest_weight: float | None = None
    #: The longest text (UTF-8 bytes) the first step accepts.
    max_text_bytes: int = C.DEFAULT_MAX_TEXT_BYTES
    #: The onnxruntime backend builds a TensorRT FP16 engine for BERT (gpu, hybrid; ONNX).
    tensorrt: bool = False
    tensorrt_cache: str = DEFAULT_TENSORRT_CACHE
    #: The Triton release whose configs and wiring the repository is for (`releases`).
    triton_version: str = releases.TESTED
    #: Triton's response cache on `profiles.CACHED_STEPS`.
    response_cache: bool = False
    #: SCORE_LOW..SCORE_HIGH's level, from the set's calibration (`intervals`).
    interval_level: float = DEFAULT_LEVEL
    #: BERT inside preprocess and the forest inside featurize (`contracts.FUSED_INTO`).
    fused: bool = False
    #: BERT's sequence-length buckets: a tuple, "16,32,..." or None (`contracts.check_buckets`).
    buckets: tuple[int, ...] | str | None = None
    #: bert takes its ids ragged, every bucket in one batch (`configs.ragged_bert`); None: where
    #: the onnxruntime backend serves it on the CPU.
    ragged: bool | None = None
    #: The ragged graph runs BERT's token-wise layers on the batch's real tokens only
    #: (`configs.packed_bert`); None: where it serves on the CPU.
    packed: bool | None = None
    #: The first step's load shedding (`profiles.DEFAULT_MAX_PENDING_REQUESTS`, ...).
    max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS
    max_queue_seconds: float = DEFAULT_MAX_QUEUE_SECONDS
    # What `assemble` reads from the artifact set; the defaults render the canonical
    # `model_repository/`.
    max_length: int = C.DEFAULT_MAX_LENGTH
    n_features: int = C.N_FEATURES
    #: The calibrated interval for these weights at `interval_level`; None: the uncalibrated range.
    interval: IntervalParameters | None = None

    def __post_init__(self) -> None:
        # a frozen value holds no list: buckets given as one become a tuple
        if isinstance(self.buckets, list):
            object.__setattr__(self, "buckets", tuple(self.buckets))

    @property
    def chosen_bert_format(self) -> str:
        return self.bert_format or DEFAULT_BERT_FORMAT

    @property
    def weights(self) -> tuple[float, float]:
        """SCORE's (BERT, forest) weights as the configs write them: 0.5 for one not set
        (`assemble` has set both by then, and checked them)."""
        return (
            0.5 if self.bert_weight is None else float(self.bert_weight),
            0.5 if self.forest_weight is None else float(self.forest_weight),
        )
