"""Every config.pbtxt (canonical and each profile) parses strictly as Triton's ModelConfig
and matches the tensor contracts; the ensemble graph is consistent."""

from __future__ import annotations

import os

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from readability_triton import contracts as C
from readability_triton.errors import AssemblyError
from readability_triton.repository import configs, profiles, releases, warmup
from readability_triton.repository.options import AssemblyOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANONICAL = os.path.join(ROOT, "model_repository")
DataType = model_config_pb2.DataType
Kind = model_config_pb2.ModelInstanceGroup.Kind


def parse(text: str) -> model_config_pb2.ModelConfig:
    # text_format.Parse is strict: unknown fields, bad enum names and bad syntax raise.
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def full_dims(config: model_config_pb2.ModelConfig, tensor) -> tuple[int, ...]:
    """A tensor's shape with its batch dimension: implicit (-1) where the model batches,
    in its dims where it does not (FIL, `configs.fil_io`)."""
    return ((-1,) if config.max_batch_size else ()) + tuple(tensor.dims)


def check_against_contract(config: model_config_pb2.ModelConfig, contract: C.ModelContract) -> None:
    def as_tuples(tensors):
        return [(t.name, DataType.Name(t.data_type), full_dims(config, t)[1:]) for t in tensors]

    assert as_tuples(config.input) == [(s.name, s.data_type, s.dims) for s in contract.inputs]
    assert as_tuples(config.output) == [(s.name, s.data_type, s.dims) for s in contract.outputs]


#: The canonical repository's models: the serial wiring of the tested release (no validate).
CANONICAL_MODELS = configs.repository_models()


def test_canonical_configs_are_the_rendered_gpu_profile():
    assert sorted(m for m in os.listdir(CANONICAL) if not m.endswith(".md")) == sorted(CANONICAL_MODELS)
    for model in CANONICAL_MODELS:
        with open(os.path.join(CANONICAL, model, "config.pbtxt"), encoding="utf-8") as handle:
            committed = handle.read()
        assert committed == configs.render_config(model, AssemblyOptions("gpu")), (
            f"model_repository/{model}/config.pbtxt is stale: run "
            "`python -m readability_triton.repository.configs model_repository`"
        )
        folder = os.path.join(CANONICAL, model, warmup.WARMUP_FOLDER)
        want = warmup.warmup_files(configs.read_config(os.path.join(CANONICAL, model, "config.pbtxt")))
        got = (
            {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))} if want else {}
        )
        assert got == want, f"model_repository/{model}/warmup is stale: run the same command"


@pytest.mark.parametrize("model", CANONICAL_MODELS)
def test_canonical_config_parses_and_matches_contract(model):
    with open(os.path.join(CANONICAL, model, "config.pbtxt"), encoding="utf-8") as handle:
        config = parse(handle.read())
    assert config.name == model
    check_against_contract(config, C.contracts()[model])


def test_canonical_python_models_link_to_the_backends():
    for model in [m for m in C.PYTHON_MODELS if m in CANONICAL_MODELS]:
        link = os.path.join(CANONICAL, model, "1", "model.py")
        assert os.path.islink(link)
        target = os.path.realpath(link)
        assert target == os.path.join(ROOT, "backends", model, "model.py")
        assert os.path.isfile(target)
    for model in CANONICAL_MODELS:
        assert os.path.isdir(os.path.join(CANONICAL, model, "1")), f"{model}/1 version folder is missing"


def test_parser_is_strict():
    with pytest.raises(text_format.ParseError):
        parse('name: "x"\nmax_batch_sise: 4\n')
    with pytest.raises(text_format.ParseError):
        parse('name: "x"\ninput [ { name: "a" data_type: TYPE_FLOAT32 dims: [ 1 ] } ]\n')


#: A release of each wiring: serial (the tested one) and parallel (26.02+).
WIRINGS = {"serial": "24.10", "parallel": "26.02"}


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("bert_format", ["onnx", "torchscript"])
@pytest.mark.parametrize("profile", profiles.PROFILES)
@pytest.mark.parametrize("max_length", [16, 256])
def test_profile_configs(profile, max_length, bert_format, wiring):
    version = WIRINGS[wiring]
    models = configs.repository_models(version)
    rendered = {
        m: parse(
            configs.render_config(
                m, AssemblyOptions(profile, max_length=max_length, bert_format=bert_format, triton_version=version)
            )
        )
        for m in models
    }
    # the default set: 8 apart where bert's batcher joins every bucket on the CPU (the ragged
    # graph, a Python bert), else 16 apart to 128 and then doubling (configs.bucket_set)
    joined = profile == "portable" or (profile == "cpu" and bert_format == "onnx")
    bucket_set = C.default_buckets(max_length, joined)
    contracts = C.contracts(max_length, buckets=bucket_set)
    buckets = ",".join(map(str, bucket_set))
    for model, config in rendered.items():
        check_against_contract(config, contracts[model])
        # preprocess cuts to the buckets, and a Python bert runs rows by the same ones
        carries = model == C.PREPROCESS or (model == C.BERT and config.backend == "python")
        assert (C.BUCKETS in config.parameters) == carries, model
        if carries:
            assert config.parameters[C.BUCKETS].string_value == buckets
            assert config.parameters[C.MAX_LENGTH].string_value == str(max_length)
        if model == C.ENSEMBLE:
            assert config.platform == "ensemble" and config.max_batch_size == C.MAX_BATCH_SIZE[model] > 0
            continue
        if config.backend == "fil":  # non-batching: its [N] answer reported as [N, 1] (configs.fil_io)
            assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
            assert [tuple(t.dims) for t in config.input] == [(-1, C.N_FEATURES)]
            ((output),) = config.output
            assert tuple(output.dims) == (-1, 1) and tuple(output.reshape.shape) == (-1,)
        else:
            # every other step batches dynamically, with no queue policy: one turns off the
            # batcher's prefetching and lets a request sleep 500 ms (profiles.dynamic_batching)
            assert config.max_batch_size == C.MAX_BATCH_SIZE[model] > 0
            assert config.HasField("dynamic_batching")
            assert not config.dynamic_batching.HasField("default_queue_policy")
            assert not config.dynamic_batching.priority_queue_policy
            assert config.dynamic_batching.priority_levels == 0
        # ... and runs on the device the profile says
        (group,) = config.instance_group
        assert group.count >= 1
        assert Kind.Name(group.kind) == profiles.placement(model, profile).kind
    kinds = {m: Kind.Name(rendered[m].instance_group[0].kind) for m in models if m != C.ENSEMBLE}
    expected_python = "KIND_GPU" if profile in ("gpu", "portable-gpu") else "KIND_CPU"
    assert {kinds[m] for m in C.PYTHON_MODELS if m != C.VALIDATE} == {expected_python}
    if wiring == "parallel":
        assert kinds[C.VALIDATE] == "KIND_CPU"  # BYTES in and out: CPU work in every profile
    else:
        assert C.VALIDATE not in rendered  # featurize checks the text first
        with pytest.raises(AssemblyError, match="no validate model"):
            configs.render_config(C.VALIDATE, AssemblyOptions(profile, triton_version=version))
    expected_models = "KIND_GPU" if profile in ("gpu", "hybrid", "portable-gpu") else "KIND_CPU"
    assert {kinds[C.BERT], kinds[C.FOREST]} == {expected_models}

    bert, forest, post = rendered[C.BERT], rendered[C.FOREST], rendered[C.POSTPROCESS]
    if profile in profiles.PORTABLE_PROFILES:
        assert bert.backend == forest.backend == "python"
    else:
        assert bert.platform == profiles.BERT_PLATFORMS[bert_format] and not bert.backend
        assert ("INFERENCE_MODE" in bert.parameters) == (bert_format == "torchscript")
        assert forest.backend == "fil"
        assert forest.parameters["model_type"].string_value == "treelite_checkpoint"
        key = "is_classifier" if releases.release(version).fil_is_classifier else "output_class"
        assert forest.parameters[key].string_value == "false"
    # bert takes its ids ragged where the onnxruntime backend serves it on the CPU (configs.ragged_bert)
    # (a Python bert takes requests of any width in one batch too, and needs no widths)
    ragged = profile == "cpu" and bert_format == "onnx" and C.variable_length(bucket_set, max_length)
    joins = ragged or (bert.backend == "python" and C.variable_length(bucket_set, max_length))
    assert [t.allow_ragged_batch for t in bert.input] == [joins, joins], profile
    if ragged:  # each row's widths, of the ids and of the mask
        assert [model_config_pb2.BatchInput.Kind.Name(b.kind) for b in bert.batch_input] == ["BATCH_ITEM_SHAPE"] * 2
        assert [(list(b.target_name), list(b.source_input)) for b in bert.batch_input] == [
            ([C.ROW_WIDTHS], [C.INPUT_0]),
            ([C.MASK_WIDTHS], [C.INPUT_1]),
        ]
        assert {b.data_type for b in bert.batch_input} == {model_config_pb2.TYPE_INT32}
    else:
        assert not bert.batch_input
    for model in C.PYTHON_MODELS:
        assert model not in rendered or rendered[model].backend == "python"
    # GPU Python models that read another model's output take it on the GPU (DLPack)
    gpu_readers = [post] + ([bert, forest] if profile == "portable-gpu" else [])
    for config in (post, bert, forest):
        if (
            config in gpu_readers
            and Kind.Name(config.instance_group[0].kind) == "KIND_GPU"
            and config.backend == "python"
        ):
            assert config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no", config.name
        else:
            assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in config.parameters, (profile, config.name)
    assert rendered[C.PREPROCESS].parameters["MAX_LENGTH"].string_value == str(max_length)
    # the first step refuses first only if no later step has a stricter limit: one value for all
    readers = [m for m in (C.VALIDATE, C.PREPROCESS, C.FEATURIZE) if m in rendered]
    limits = {rendered[m].parameters["MAX_TEXT_BYTES"].string_value for m in readers}
    assert limits == {str(C.DEFAULT_MAX_TEXT_BYTES)}
    # the entrance alone sheds load; featurize checks for words where it is the entrance
    entrance = C.VALIDATE if wiring == "parallel" else C.FEATURIZE
    shedding = [m for m, config in rendered.items() if "MAX_PENDING_REQUESTS" in config.parameters]
    assert shedding == [entrance] and "MAX_QUEUE_SECONDS" in rendered[entrance].parameters
    words = {
        m: config.parameters[C.REQUIRE_WORDS].string_value
        for m, config in rendered.items()
        if C.REQUIRE_WORDS in config.parameters
    }
    assert words == ({} if wiring == "parallel" else {C.FEATURIZE: "true"})
    assert float(post.parameters["BERT_WEIGHT"].string_value) == 0.5
    assert float(post.parameters["FOREST_WEIGHT"].string_value) == 0.5


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("max_length", [16, 256])
@pytest.mark.parametrize("profile", profiles.PORTABLE_PROFILES)
def test_fused_configs(profile, max_length, wiring):
    """`assemble --fused`: preprocess answers BERT_OUTPUT and featurize FOREST_OUTPUT (their
    fused contracts), there is no bert and no forest, preprocess takes bert's batch limit and
    its threads, each runs its own fused adapter; the rest is as in the separate repository."""
    version = WIRINGS[wiring]
    models = configs.repository_models(version, fused=True)
    assert C.BERT not in models and C.FOREST not in models
    rendered = {
        m: parse(
            configs.render_config(
                m, AssemblyOptions(profile, max_length=max_length, triton_version=version, fused=True)
            )
        )
        for m in models
    }
    contracts = C.contracts(max_length, fused=True)
    assert set(contracts) - {C.VALIDATE} == set(rendered) - {C.VALIDATE}
    for model, config in rendered.items():
        check_against_contract(config, contracts[model])
        if model == C.ENSEMBLE:
            continue
        assert config.backend == "python" and config.max_batch_size == C.max_batch_size(model, fused=True)
        assert config.HasField("dynamic_batching") and not config.dynamic_batching.HasField("default_queue_policy")
    assert [o.name for o in rendered[C.PREPROCESS].output] == [C.BERT_OUTPUT]
    assert rendered[C.FEATURIZE].output[0].name == C.FOREST_OUTPUT
    assert rendered[C.PREPROCESS].max_batch_size == C.MAX_BATCH_SIZE[C.BERT] >= rendered[C.ENSEMBLE].max_batch_size
    threads = {m: rendered[m].parameters[C.THREADS].string_value for m in models if m != C.ENSEMBLE}
    assert threads == {m: ("0" if m == C.PREPROCESS else "1") for m in threads}  # BERT's instance takes the cores
    kind = "KIND_GPU" if profile == "portable-gpu" else "KIND_CPU"
    for model in (C.PREPROCESS, C.FEATURIZE, C.POSTPROCESS):
        assert Kind.Name(rendered[model].instance_group[0].kind) == kind
    entrance = C.VALIDATE if wiring == "parallel" else C.FEATURIZE
    assert [m for m, c in rendered.items() if "MAX_PENDING_REQUESTS" in c.parameters] == [entrance]
    assert rendered[C.PREPROCESS].parameters["MAX_LENGTH"].string_value == str(max_length)
    # a fused model waits as long as the longest of the models it runs: on a GPU, BERT's wait
    delays = {m: rendered[m].dynamic_batching.max_queue_delay_microseconds for m in models if m != C.ENSEMBLE}
    on_gpu = profile == "portable-gpu"
    assert delays[C.PREPROCESS] == (profiles.QUEUE_DELAY_US[C.BERT] if on_gpu else 0)
    assert delays[C.FEATURIZE] == (profiles.QUEUE_DELAY_US[C.FEATURIZE] if on_gpu else 0)
    assert {profiles.backend_file(m, profile, fused=True) for m in (C.PREPROCESS, C.FEATURIZE)} == {
        "preprocess_fused",
        "featurize_fused",
    }
    for folder in ("preprocess_fused", "featurize_fused"):
        assert os.path.isfile(os.path.join(ROOT, "backends", folder, "model.py"))


@pytest.mark.parametrize("profile", ["gpu", "hybrid", "cpu"])
def test_only_portable_profiles_fuse(profile):
    with pytest.raises(AssemblyError, match="only the portable profiles"):
        configs.render_config(C.PREPROCESS, AssemblyOptions(profile, fused=True))


def test_the_fused_repository_has_no_bert_to_cache_or_render():
    with pytest.raises(AssemblyError, match="no bert model"):
        configs.render_config(C.PREPROCESS, AssemblyOptions("portable", fused=True, response_cache=True))
    for model in (C.BERT, C.FOREST):
        with pytest.raises(AssemblyError, match=f"no {model} model"):
            configs.render_config(model, AssemblyOptions("portable", fused=True))


#: Every profile's repository, and the fused one of each portable profile.
GRAPHS = [(p, False) for p in profiles.PROFILES] + [(p, True) for p in profiles.PORTABLE_PROFILES]


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("profile, fused", GRAPHS, ids=[f"{p}{'-fused' if f else ''}" for p, f in GRAPHS])
def test_ensemble_graph(profile, wiring, fused):
    """Every ensemble tensor is produced exactly once and consumed; dtypes and dims agree
    between producer and consumer; the ensemble's batch size fits every step; every
    ensemble output is a leaf (no step reads it); every step runs after the first step
    accepted the request, and the serial wiring runs one step at a time (see the rules at
    contracts.PARALLEL_STEPS). The same for the fused repository of the portable profiles."""
    version = WIRINGS[wiring]
    models = configs.repository_models(version, fused)
    rendered = {
        m: parse(configs.render_config(m, AssemblyOptions(profile, triton_version=version, fused=fused)))
        for m in models
    }
    ensemble = rendered[C.ENSEMBLE]
    steps = ensemble.ensemble_scheduling.step
    assert {s.model_name for s in steps} == set(models) - {C.ENSEMBLE}

    def spec(config, tensors, name):
        (match,) = [t for t in tensors if t.name == name]
        return match.data_type, full_dims(config, match)

    produced = {t.name: spec(ensemble, ensemble.input, t.name) for t in ensemble.input}
    producers = {name: "<input>" for name in produced}
    consumed = set()
    # Steps may be listed in any order; resolve them in dependency order.
    pending = list(steps)
    while pending:
        ready = [s for s in pending if all(v in produced for v in s.input_map.values())]
        assert ready, f"unsatisfiable inputs in steps {[s.model_name for s in pending]}"
        for step in ready:
            step_config = rendered[step.model_name]
            # every input mapped but an optional one (AFTER, which orders the serial wiring only)
            assert {t.name for t in step_config.input if not t.optional} <= set(step.input_map)
            assert set(step.input_map) <= {t.name for t in step_config.input}
            assert set(step.output_map) == {t.name for t in step_config.output}
            for model_input, tensor in step.input_map.items():
                assert produced[tensor] == spec(step_config, step_config.input, model_input), (
                    step.model_name,
                    model_input,
                )
                consumed.add(tensor)
            for model_output, tensor in step.output_map.items():
                assert tensor not in producers, f"{tensor} produced twice ({producers[tensor]}, {step.model_name})"
                producers[tensor] = step.model_name
                produced[tensor] = spec(step_config, step_config.output, model_output)
            # the ensemble's batch size fits every batching step (a non-batching one takes any)
            assert step_config.max_batch_size == 0 or step_config.max_batch_size >= ensemble.max_batch_size
            pending.remove(step)
    step_inputs = {tensor for step in steps for tensor in step.input_map.values()}
    for output in ensemble.output:
        assert output.name in produced and producers[output.name] != "<input>"
        assert produced[output.name] == (output.data_type, full_dims(ensemble, output))
        assert output.name not in step_inputs, (
            f"ensemble output {output.name} is also an input of a step: a client asking for some outputs "
            "only would have it pruned from under that step (server#7482)"
        )
        consumed.add(output.name)
    assert consumed == set(produced), f"produced but never used: {set(produced) - consumed}"
    # Rule 3: every other step depends on the first step's outputs, so it runs only after the
    # first step accepted the request; in the parallel wiring only validate reads TEXT.
    first = steps[0].model_name
    assert first == (C.VALIDATE if wiring == "parallel" else C.FEATURIZE)
    after = {first}
    for step in steps[1:]:  # listed in dependency order
        assert any(producers[t] in after for t in step.input_map.values()), f"{step.model_name} may run first"
        after.add(step.model_name)
    readers = [s.model_name for s in steps if any(producers[t] == "<input>" for t in s.input_map.values())]
    assert readers == ([C.VALIDATE] if wiring == "parallel" else [C.FEATURIZE, C.PREPROCESS])
    if wiring == "serial":  # Rule 2: one step at a time, each reads the one before it (or a later one)
        order = [s.model_name for s in steps]
        for i, step in enumerate(steps[1:], start=1):
            assert order[i - 1] in {producers[t] for t in step.input_map.values()}, (order[i - 1], step.model_name)


@pytest.mark.parametrize("profile", ["gpu", "hybrid"])
def test_tensorrt_optimization_is_what_the_onnxruntime_backend_reads(profile):
    config = parse(
        configs.render_config(C.BERT, AssemblyOptions(profile, max_length=128, bert_format="onnx", tensorrt=True))
    )
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt"
    params = dict(accelerator.parameters)
    assert set(params) <= set(profiles.TENSORRT_KEYS), set(params) - set(profiles.TENSORRT_KEYS)
    assert params["precision_mode"] == "FP16" and params["trt_engine_cache_enable"] == "1"
    # one optimization profile per bucket: each input named once per profile, in bucket order
    lengths = C.default_buckets(128)
    assert params["trt_profile_min_shapes"] == ",".join(f"input__0:1x{n},input__1:1x{n}" for n in lengths)
    batch = C.MAX_BATCH_SIZE[C.BERT]
    assert params["trt_profile_max_shapes"] == ",".join(f"input__0:{batch}x{n},input__1:{batch}x{n}" for n in lengths)
    padded = parse(
        configs.render_config(
            C.BERT, AssemblyOptions(profile, max_length=128, bert_format="onnx", tensorrt=True, buckets=(128,))
        )
    )
    (one,) = padded.optimization.execution_accelerators.gpu_execution_accelerator
    assert dict(one.parameters)["trt_profile_opt_shapes"] == "input__0:16x128,input__1:16x128"
    assert [list(s.inputs["input__0"].dims) for s in config.model_warmup] == [[n] for n in lengths]  # each built
    assert int(params["max_workspace_size_bytes"]) >= 1 << 30
    assert not config.optimization.execution_accelerators.cpu_execution_accelerator


@pytest.mark.parametrize("profile, bert_format", [("cpu", "onnx"), ("portable", "onnx"), ("gpu", "torchscript")])
def test_tensorrt_needs_onnx_on_a_gpu(profile, bert_format):
    with pytest.raises(AssemblyError, match="--tensorrt needs the ONNX model on a GPU"):
        configs.render_config(C.BERT, AssemblyOptions(profile, bert_format=bert_format, tensorrt=True))


def test_unknown_profile_is_refused():
    with pytest.raises(AssemblyError, match="unknown profile"):
        configs.render_config(C.BERT, AssemblyOptions("tpu"))


@pytest.mark.parametrize("profile", ["gpu", "hybrid", "cpu"])
def test_ragged_is_asked_for_or_refused(profile):
    """--ragged: also on a GPU; never with TensorRT, libtorch, or one bucket (configs.ragged_bert)."""
    bert = configs.model_config(C.BERT, AssemblyOptions(profile, bert_format="onnx", ragged=True))
    assert all(t.allow_ragged_batch for t in bert.input) and len(bert.batch_input) == 2
    off = configs.model_config(C.BERT, AssemblyOptions(profile, bert_format="onnx", ragged=False))
    assert not any(t.allow_ragged_batch for t in off.input) and not off.batch_input
    refused = [
        AssemblyOptions(profile, bert_format="torchscript", ragged=True),
        AssemblyOptions(profile, bert_format="onnx", ragged=True, buckets=(256,)),
    ]
    if profile != "cpu":
        refused.append(AssemblyOptions(profile, bert_format="onnx", ragged=True, tensorrt=True))
    for options in refused:
        with pytest.raises(AssemblyError, match="--ragged needs bert on the onnxruntime backend"):
            configs.model_config(C.BERT, options)
    # the default: ragged on the CPU only, and not beside TensorRT or one bucket
    default = configs.model_config(C.BERT, AssemblyOptions(profile, bert_format="onnx"))
    assert bool(default.batch_input) == (profile == "cpu")
    assert not configs.model_config(C.BERT, AssemblyOptions(profile, bert_format="onnx", buckets=(256,))).batch_input
    with pytest.raises(AssemblyError, match="--ragged needs"):
        configs.model_config(C.BERT, AssemblyOptions("portable", bert_format="onnx", ragged=True))


@pytest.mark.parametrize("profile", ["gpu", "hybrid", "cpu", "portable"])
def test_the_ragged_graph_is_packed_on_the_cpu_unless_told(profile):
    """configs.packed_bert: by default where the ragged graph serves on the CPU; --packed also
    on a GPU; --no-packed never; --packed without a ragged graph refused."""
    packed = lambda **kw: configs.packed_bert(AssemblyOptions(profile, bert_format="onnx", **kw))  # noqa: E731
    assert packed() == (profile == "cpu")
    assert not packed(packed=False) and not packed(ragged=False)
    if profile == "portable":
        with pytest.raises(AssemblyError, match="--packed needs bert's ragged graph"):
            packed(packed=True)
    else:
        assert packed(ragged=True, packed=True) and packed(ragged=True) == (profile == "cpu")
        with pytest.raises(AssemblyError, match="--packed needs bert's ragged graph"):
            packed(ragged=False, packed=True)


@pytest.mark.parametrize(
    "profile, bert_format, ragged, spread",
    [
        ("cpu", "onnx", None, True),
        ("portable", "onnx", None, True),
        ("portable", "torchscript", None, False),
        ("gpu", "onnx", None, False),
        ("gpu", "onnx", True, False),  # the ragged graph's fine set, on a GPU: every bucket warmed
    ],
)
def test_bert_warms_up_at_each_length_that_builds_something(profile, bert_format, ragged, spread):
    """ONNX Runtime on the CPU (the ragged graph, a Python bert) builds nothing per length:
    bert warms up at 9 of its 32 buckets, spread to the largest; TorchScript, and a GPU (one
    TensorRT profile per bucket; CUDA's kernels per shape), at every bucket."""
    options = AssemblyOptions(profile, max_length=256, bert_format=bert_format, ragged=ragged)
    config = parse(configs.render_config(C.BERT, options))
    widths = [s.inputs[C.INPUT_0].dims[-1] for s in config.model_warmup]
    buckets = configs.bucket_set(options)
    if spread:
        assert len(buckets) == 32 and widths == [8, 40, 72, 104, 136, 160, 192, 224, 256]
    else:
        assert widths == list(buckets)
    assert set(widths) <= set(buckets) and widths[-1] == 256
    assert warmup.warmup_lengths(buckets, shared=False) == buckets
    assert warmup.warmup_lengths((16, 32, 256), shared=True) == (16, 32, 256)
