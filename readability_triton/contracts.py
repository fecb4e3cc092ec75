"""Tensor contracts of the pipeline: every name, dtype and shape, defined once.

The model configurations (`config.pbtxt`), the Python backends, the client and the tests
all take tensor names, Triton data types and dims from here; a test checks every
`config.pbtxt` of every profile against these contracts.

Dims exclude the batch dimension (every model here batches, `max_batch_size > 0`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

#: Number of frequency words per list in the vocabulary (the spec's N).
VOCABULARY_SIZE = 100
#: Number of readability features: 7 counts and ratios + 2 * N word frequencies.
N_FEATURES = 7 + 2 * VOCABULARY_SIZE
#: Default sequence length of the BERT branch.
DEFAULT_MAX_LENGTH = 256
#: The default buckets of the BERT branch are this many tokens apart where bert's batcher
#: joins only requests of one shape (`default_buckets`), up to 8 steps.
BUCKET_STEP = 16
#: ... and this many apart, all the way, where it joins requests of every bucket.
JOINED_BUCKET_STEP = 8
#: Default limit on the UTF-8 size of one text accepted by the Python steps.
DEFAULT_MAX_TEXT_BYTES = 100_000

ENSEMBLE = "readability"
VALIDATE = "validate"
PREPROCESS = "preprocess"
BERT = "bert"
FEATURIZE = "featurize"
FOREST = "forest"
POSTPROCESS = "postprocess"
STEP_MODELS = (VALIDATE, PREPROCESS, BERT, FEATURIZE, FOREST, POSTPROCESS)
ALL_MODELS = STEP_MODELS + (ENSEMBLE,)
#: Models that are Python-backend models in every profile.
PYTHON_MODELS = (VALIDATE, PREPROCESS, FEATURIZE, POSTPROCESS)

# Tensor names.
TEXT = "TEXT"
VALID_TEXT = "VALID_TEXT"
INPUT_IDS = "INPUT_IDS"
ATTENTION_MASK = "ATTENTION_MASK"
FEATURES = "FEATURES"
BERT_SCORE = "BERT_SCORE"
FOREST_SCORE = "FOREST_SCORE"
SCORE = "SCORE"
#: The prediction interval around SCORE (`intervals`).
SCORE_LOW = "SCORE_LOW"
SCORE_HIGH = "SCORE_HIGH"
#: The branch scores inside the ensemble (postprocess's inputs; see PARALLEL_STEPS).
BERT_OUTPUT = "BERT_OUTPUT"
FOREST_OUTPUT = "FOREST_OUTPUT"
#: Each text's word count, featurize -> postprocess (the interval's length band).
WORDS = "WORDS"
#: preprocess's optional ordering input: in the serial wiring (SERIAL_STEPS) the forest's
#: score is wired here so that the BERT branch starts when the forest branch has ended.
#: preprocess ignores its value.
AFTER = "AFTER"
#: What postprocess answers: the score, the branch scores and the interval.
SCORE_OUTPUTS = (SCORE, BERT_SCORE, FOREST_SCORE, SCORE_LOW, SCORE_HIGH)
#: The classic readability formulas featurize answers beside FEATURES (docs/formulas.md).
FORMULAS = (
    "FLESCH_READING_EASE",
    "FLESCH_KINCAID_GRADE",
    "GUNNING_FOG",
    "SMOG",
    "COLEMAN_LIAU",
    "ARI",
    "DALE_CHALL",
)
#: The ensemble's outputs, in the order the ensemble declares them. These names are the one
#: vocabulary of the outputs: the served tensors, the in-process `Pipeline`'s keys, the
#: client's values, the canary's record and the CLI's options (`score --outputs`); a CSV
#: column is the name in lower case.
OUTPUTS = SCORE_OUTPUTS + FORMULAS
#: Each output's short heading in the CLI's tables (`score`, `evaluate`), in the tables' order:
#: the branch scores, the score and its interval, then the formulas. Adding an output takes
#: its name above, its heading here, the step that computes it (`_contracts`,
#: `ensemble_steps`) and its row in docs/architecture.md's tensor table: docs/development.md,
#: "Adding an output"; tests/test_outputs.py checks each place.
HEADING = {
    BERT_SCORE: "BERT",
    FOREST_SCORE: "forest",
    SCORE: "score",
    SCORE_LOW: "low",
    SCORE_HIGH: "high",
    "FLESCH_READING_EASE": "FRE",
    "FLESCH_KINCAID_GRADE": "FKGL",
    "GUNNING_FOG": "Fog",
    "SMOG": "SMOG",
    "COLEMAN_LIAU": "CLI",
    "ARI": "ARI",
    "DALE_CHALL": "DaleCh",
}
# The pytorch_libtorch and FIL backends name their tensors by position.
INPUT_0 = "input__0"
INPUT_1 = "input__1"
OUTPUT_0 = "output__0"
#: The ragged BERT graph's batch inputs (`bert.ragged`): each row's width of the ids and of
#: the mask, int32 [rows, 1], which the onnxruntime backend fills (BATCH_ITEM_SHAPE of
#: input__0 and of input__1).
ROW_WIDTHS = "row_widths"
MASK_WIDTHS = "mask_widths"

#: The health check's canary text (plain English, well inside every limit): `assemble`
#: records what the repository's own models answer it, `serve` compares.
CANARY_TEXT = "The cat sat on the mat. It was a warm day, and the cat was happy."

# Config parameters the Python models read.
MAX_TEXT_BYTES = "MAX_TEXT_BYTES"
MAX_LENGTH = "MAX_LENGTH"
#: The sequence-length buckets ("16,32,...,256"; `buckets`): preprocess cuts each request's
#: ids to the smallest that holds its longest text, and a Python bert runs rows by bucket.
#: Absent, or the sequence length alone: padded to MAX_LENGTH.
BUCKETS = "BUCKETS"
BERT_WEIGHT = "BERT_WEIGHT"
FOREST_WEIGHT = "FOREST_WEIGHT"
#: postprocess's interval (`intervals.IntervalParameters`); absent: the uncalibrated range.
INTERVAL_LEVEL = "INTERVAL_LEVEL"
INTERVAL_SIGMA = "INTERVAL_SIGMA"  # "a,b"
INTERVAL_EDGES = "INTERVAL_EDGES"  # the word counts between the length bands
INTERVAL_QUANTILES = "INTERVAL_QUANTILES"  # one per band
INTERVAL_MIN_WORDS = "INTERVAL_MIN_WORDS"
#: The threads of an instance's runtimes (`threads`: 0 = the instance's share of the cores).
THREADS = "THREADS"
#: The entrance's load shedding (validate, or featurize in the serial wiring): refuse new
#: requests while this many wait in the later steps' queues, or while requests have lately
#: waited this many seconds in one of them.
MAX_PENDING_REQUESTS = "MAX_PENDING_REQUESTS"
MAX_QUEUE_SECONDS = "MAX_QUEUE_SECONDS"
#: Where the entrance reads the pending-request gauge (default: $READABILITY_TRITON_METRICS_URL).
METRICS_URL = "METRICS_URL"
#: "true": refuse a text without a word (featurize as the serial wiring's first step, from
#: the word counts it computes; `validate` always does).
REQUIRE_WORDS = "REQUIRE_WORDS"

#: Triton data type -> the datatype string of the KServe v2 protocol (clients).
WIRE_DTYPES = {"TYPE_STRING": "BYTES", "TYPE_FP32": "FP32", "TYPE_INT64": "INT64"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    data_type: str  # Triton's enum name, e.g. "TYPE_FP32"
    dims: tuple[int, ...]
    optional: bool = False  # an input a request may leave out

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


def check_max_length(max_length, what: str = "max_length", error: type[Exception] = ValueError) -> int:
    """`max_length` as an int, or `error` unless it is an integer of at least 2 (room for
    [CLS] and [SEP]); `what` names it in the message (e.g. "--max-length")."""
    if isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral) or max_length < 2:
        raise error(f"{what} {max_length!r}: must be an integer of at least 2 ([CLS] and [SEP])")
    return int(max_length)


def default_buckets(max_length: int = DEFAULT_MAX_LENGTH, joined: bool = False) -> tuple[int, ...]:
    """The default sequence-length buckets, below `max_length`, and `max_length`.

    `joined` (bert's batcher joins requests of every bucket: the ragged graph on the
    onnxruntime backend, or a Python bert on the CPU): JOINED_BUCKET_STEP tokens apart all the way, so
    that a text is padded by less than JOINED_BUCKET_STEP tokens (a row costs its own width
    there). Otherwise (the batcher
    joins only requests of one shape: libtorch, a GPU or TensorRT without `--ragged`):
    BUCKET_STEP apart up to 8 steps (16, ..., 128), then each twice the one before (256,
    512, ...), so that long texts share few shapes and still batch under load (finer
    buckets served the CommonLit excerpts 0.79x the padded rate at four clients on 2 vCPUs
    there: docs/performance.md, "Sequence-length buckets")."""
    check_max_length(max_length)
    step = JOINED_BUCKET_STEP if joined else BUCKET_STEP
    out, length = [], step
    while length < max_length:
        out.append(length)
        length = length + step if joined or length < 8 * step else 2 * length
    return (*out, max_length)


def check_buckets(
    buckets,
    max_length: int = DEFAULT_MAX_LENGTH,
    what: str = "buckets",
    error: type[Exception] = ValueError,
    joined: bool = False,
) -> tuple[int, ...]:
    """`buckets` (integers, or a string of comma-separated ones; None: `default_buckets`,
    `joined` or not) as an increasing tuple that ends at `max_length` (added where missing),
    or `error` naming `what` unless each is an integer from 2 to `max_length`."""
    check_max_length(max_length)
    if buckets is None:
        return default_buckets(max_length, joined)
    if isinstance(buckets, str):
        try:
            buckets = [int(b) for b in buckets.split(",") if b.strip()]
        except ValueError:
            raise error(
                f"{what} {buckets!r}: give comma-separated whole numbers, e.g. 32,64,128,{max_length}"
            ) from None
    values = list(buckets)
    if not values:
        raise error(f"{what}: give at least one length (e.g. {max_length}: every text padded to it)")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 2 <= int(value) <= max_length:
            raise error(f"{what} {value!r}: each must be a whole number from 2 to the sequence length {max_length}")
    return tuple(sorted({int(v) for v in values} | {max_length}))


def buckets_parameter(raw: str, max_length: int, what: str, error: type[Exception] = ValueError) -> tuple[int, ...]:
    """A config's BUCKETS parameter (`check_buckets`); unset or empty: `max_length` alone,
    padded (a config from before buckets)."""
    return check_buckets(raw.strip() or (max_length,), max_length, what, error)


def variable_length(buckets, max_length: int = DEFAULT_MAX_LENGTH) -> bool:
    """Whether the ids between preprocess and bert vary in length (more than one bucket):
    their dims are then [-1], else [max_length]."""
    return check_buckets(buckets, max_length) != (max_length,)


def contracts(
    max_length: int = DEFAULT_MAX_LENGTH, n_features: int = N_FEATURES, fused: bool = False, buckets=None
) -> dict[str, ModelContract]:
    """The contract of every model, for one sequence length, feature count and bucket set
    (None: `default_buckets`; with one bucket the ids are [max_length], else [-1]); `fused`:
    of the fused repository (FUSED_INTO), whose preprocess answers BERT_OUTPUT and featurize
    FOREST_OUTPUT, and which has no bert and no forest."""
    check_max_length(max_length)
    text = TensorSpec(TEXT, "TYPE_STRING", (1,))
    score = lambda name: TensorSpec(name, "TYPE_FP32", (1,))  # noqa: E731
    width = -1 if variable_length(buckets, max_length) else max_length
    ids = lambda name: TensorSpec(name, "TYPE_INT64", (width,))  # noqa: E731
    separate = _contracts(text, score, ids, n_features)
    if not fused:
        return separate
    fused_ones = {
        PREPROCESS: ModelContract(PREPROCESS, separate[PREPROCESS].inputs, (score(BERT_OUTPUT),)),
        FEATURIZE: ModelContract(FEATURIZE, (text,), (score(FOREST_OUTPUT), *separate[FEATURIZE].outputs[1:])),
    }
    return {name: fused_ones.get(name, c) for name, c in separate.items() if name not in FUSED_INTO}


def _contracts(text, score, ids, n_features) -> dict[str, ModelContract]:
    return {
        ENSEMBLE: ModelContract(ENSEMBLE, (text,), tuple(score(name) for name in OUTPUTS)),
        VALIDATE: ModelContract(VALIDATE, (text,), (TensorSpec(VALID_TEXT, "TYPE_STRING", (1,)),)),
        PREPROCESS: ModelContract(
            PREPROCESS,
            (text, TensorSpec(AFTER, "TYPE_FP32", (1,), optional=True)),
            (ids(INPUT_IDS), ids(ATTENTION_MASK)),
        ),
        BERT: ModelContract(BERT, (ids(INPUT_0), ids(INPUT_1)), (score(OUTPUT_0),)),
        FEATURIZE: ModelContract(
            FEATURIZE,
            (text,),
            (TensorSpec(FEATURES, "TYPE_FP32", (n_features,)), score(WORDS), *(score(name) for name in FORMULAS)),
        ),
        FOREST: ModelContract(FOREST, (TensorSpec(INPUT_0, "TYPE_FP32", (n_features,)),), (score(OUTPUT_0),)),
        POSTPROCESS: ModelContract(
            POSTPROCESS,
            (score(BERT_OUTPUT), score(FOREST_OUTPUT), score(WORDS)),
            tuple(score(name) for name in SCORE_OUTPUTS),
        ),
    }


#: The ensemble's wiring: (step model, {step input: ensemble tensor}, {step output: ensemble tensor}).
#:
#: Three rules of Triton's ensemble scheduler shape it (docs/architecture.md, "Three rules of
#: Triton's ensemble scheduler", and the scheduler in triton-inference-server/core,
#: src/ensemble_scheduler/ensemble_scheduler.cc):
#:
#: 1. Every ensemble output is a leaf: produced by a step that nothing consumes. When a
#:    client asks for some outputs only, the scheduler prunes the others backwards and does
#:    not check whether a kept step still consumes a pruned tensor (server#7482). So the
#:    branch scores travel as the internal BERT_OUTPUT / FOREST_OUTPUT, and postprocess
#:    emits SCORE, BERT_SCORE and FOREST_SCORE, which nothing reads. (Every release up
#:    to 26.06.)
#: 2. Up to core 26.01 (core#466 makes 26.02+ wait for the other steps), a step that fails
#:    while another step of the same request is in flight breaks the request: once the
#:    request's status is an error, the steps that finish later skip the bookkeeping that
#:    releases it (PrepareSteps), so it stays "in flight" until shutdown, which then ends
#:    at the exit timeout with status 1; a step refused synchronously (its queue is full)
#:    is never answered at all; and an error sent early lets the frontend free the
#:    request's input buffers under the steps still reading them. A step fails not only
#:    when it refuses bad input but also when its dynamic batcher rejects a request (queue
#:    full, queue timeout) or drops a cancelled one: the scheduler marks every step it
#:    schedules after a gRPC client gave up as cancelled, and the batcher answers those
#:    with CANCELLED (scheduler_utils.cc, ApplyPolicy). Reproduced here: 8 gRPC clients
#:    with 50 ms deadlines against the parallel wiring left 7 of 800 requests in flight
#:    for good (tests/test_ensemble_rules.py reproduces it with trivial models).
#:    So on those releases the steps run one after another (SERIAL_STEPS): with one step
#:    in flight at a time, any step may refuse, shed load or drop a cancelled request,
#:    and the request is answered and released. The forest branch goes first (it is the
#:    cheap one) and the BERT branch follows; preprocess's AFTER input carries the
#:    ordering. From 26.02 the branches run in parallel (PARALLEL_STEPS).
#: 3. Only the first step checks the text, and sheds load. No later step refuses what it
#:    accepted: preprocess and featurize make the same checks with the same MAX_TEXT_BYTES.
#:    In the serial wiring the first step is `featurize` itself (parameter REQUIRE_WORDS):
#:    it refuses invalid UTF-8, a text over MAX_TEXT_BYTES and, from the word counts it
#:    computes anyway, a text without a word; preprocess reads the ensemble's TEXT once the
#:    forest has answered, with no other step of the request in flight. One Python hop
#:    less per text (bench_overhead). In the parallel wiring a separate `validate` comes
#:    first, and both branches read its output VALID_TEXT (a buffer the ensemble owns and
#:    reference-counts): rule 2 requires it there, and merging it into one branch would
#:    hold the other back (16 % of throughput with the MiniLM set, docs/architecture.md).
PARALLEL_STEPS = (
    (VALIDATE, {TEXT: TEXT}, {VALID_TEXT: VALID_TEXT}),
    (PREPROCESS, {TEXT: VALID_TEXT}, {INPUT_IDS: INPUT_IDS, ATTENTION_MASK: ATTENTION_MASK}),
    (BERT, {INPUT_0: INPUT_IDS, INPUT_1: ATTENTION_MASK}, {OUTPUT_0: BERT_OUTPUT}),
    (FEATURIZE, {TEXT: VALID_TEXT}, {FEATURES: FEATURES, WORDS: WORDS, **{name: name for name in FORMULAS}}),
    (FOREST, {INPUT_0: FEATURES}, {OUTPUT_0: FOREST_OUTPUT}),
    (
        POSTPROCESS,
        {BERT_OUTPUT: BERT_OUTPUT, FOREST_OUTPUT: FOREST_OUTPUT, WORDS: WORDS},
        {name: name for name in SCORE_OUTPUTS},
    ),
)
SERIAL_STEPS = (
    (FEATURIZE, {TEXT: TEXT}, {FEATURES: FEATURES, WORDS: WORDS, **{name: name for name in FORMULAS}}),
    (FOREST, {INPUT_0: FEATURES}, {OUTPUT_0: FOREST_OUTPUT}),
    (PREPROCESS, {TEXT: TEXT, AFTER: FOREST_OUTPUT}, {INPUT_IDS: INPUT_IDS, ATTENTION_MASK: ATTENTION_MASK}),
    (BERT, {INPUT_0: INPUT_IDS, INPUT_1: ATTENTION_MASK}, {OUTPUT_0: BERT_OUTPUT}),
    (
        POSTPROCESS,
        {BERT_OUTPUT: BERT_OUTPUT, FOREST_OUTPUT: FOREST_OUTPUT, WORDS: WORDS},
        {name: name for name in SCORE_OUTPUTS},
    ),
)


#: The fused repository (`assemble --fused`, the portable profiles only): BERT runs inside
#: preprocess and the forest inside featurize, in their stubs, so that a text crosses two
#: Python models fewer (two python-backend hops less: docs/performance.md, "Fewer
#: Python hops"). Each fused model: the one it runs inside.
FUSED_INTO = {BERT: PREPROCESS, FOREST: FEATURIZE}
_FEATURIZE_FUSED_OUT = {FOREST_OUTPUT: FOREST_OUTPUT, WORDS: WORDS, **{name: name for name in FORMULAS}}
_POSTPROCESS_STEP = SERIAL_STEPS[-1]
#: The fused wirings: the same rules, the same order, without the bert and forest steps.
FUSED_SERIAL_STEPS = (
    (FEATURIZE, {TEXT: TEXT}, _FEATURIZE_FUSED_OUT),
    (PREPROCESS, {TEXT: TEXT, AFTER: FOREST_OUTPUT}, {BERT_OUTPUT: BERT_OUTPUT}),
    _POSTPROCESS_STEP,
)
FUSED_PARALLEL_STEPS = (
    PARALLEL_STEPS[0],
    (PREPROCESS, {TEXT: VALID_TEXT}, {BERT_OUTPUT: BERT_OUTPUT}),
    (FEATURIZE, {TEXT: VALID_TEXT}, _FEATURIZE_FUSED_OUT),
    _POSTPROCESS_STEP,
)


def ensemble_steps(parallel: bool, fused: bool = False):
    """The wiring: the branches in parallel (Triton 26.02+) or one after the other; `fused`:
    with BERT in preprocess and the forest in featurize (FUSED_INTO)."""
    if fused:
        return FUSED_PARALLEL_STEPS if parallel else FUSED_SERIAL_STEPS
    return PARALLEL_STEPS if parallel else SERIAL_STEPS


def step_models(parallel: bool, fused: bool = False) -> tuple[str, ...]:
    """The models of a wiring, in step order (the serial one has no `validate`, the fused one
    no bert and no forest)."""
    return tuple(model for model, _, _ in ensemble_steps(parallel, fused))


def entrance(parallel: bool) -> str:
    """The wiring's first step: the one that checks the text and sheds load (rule 3)."""
    return ensemble_steps(parallel)[0][0]


#: Largest batch each model accepts. The ensemble's must not exceed any step's.
MAX_BATCH_SIZE = {
    VALIDATE: 256,
    PREPROCESS: 256,
    FEATURIZE: 256,
    BERT: 64,
    FOREST: 256,
    POSTPROCESS: 256,
    ENSEMBLE: 64,
}


def runs(model: str, fused: bool = False) -> tuple[str, ...]:
    """The models `model` runs: itself, and in the fused repository those fused into it
    (preprocess runs bert, featurize the forest: FUSED_INTO)."""
    return (model, *(m for m, home in FUSED_INTO.items() if fused and home == model))


def max_batch_size(model: str, fused: bool = False) -> int:
    """The largest batch `model` accepts: the smallest of the models it runs (a fused
    preprocess takes bert's 64)."""
    return min(MAX_BATCH_SIZE[m] for m in runs(model, fused))
