"""`export-bert`: a sequence-regression checkpoint exported to ONNX `model.onnx` (the modern
dynamo exporter, dynamic batch and length dimensions, opset 18) or traced to TorchScript
`model.pt`, verified against eager PyTorch at several batch sizes, on random ids with
padding and on real texts' tokens, before anything is written (the file is loaded back,
by ONNX Runtime or torch.jit, and checked again); the tokenizer files the `preprocess`
model needs are written next to it. `export_torchscript` also scans the traced graph for
device constants and reports any. The checkpoint and tokenizer are read by
`bert_checkpoint`, the verification is `bert_verify`'s; onnx, onnxscript and onnxruntime
are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import time
import warnings

import torch

from .. import contracts
from ..bert.modules import EagerReference, SequenceRegressor
from ..bert.runner import onnx_session
from ..errors import BertError, ExportError
from ..layout import BERT_FORMATS, TRAINING_RECORD, update_manifest
from .bert_checkpoint import (
    check_compatible,
    load_sequence_regressor,
    load_tokenizer,
    special_ids,
    write_tokenizer,
)
from .bert_verify import (
    FP16_TOLERANCE,
    FP32_TOLERANCE,
    VERIFY_BATCH_SIZES,
    compare,
    device_constants,
    real_inputs,
    staged,
    verification_inputs,
)

log = logging.getLogger(__name__)

#: The ONNX opset of the exported graph (ONNX Runtime 1.19.2, in Triton 24.10, reads up to 21).
ONNX_OPSET = 18
#: The newest ONNX IR version ONNX Runtime 1.19.2 (Triton 24.10) loads.
MAX_IR_VERSION = 10


def trace(module, max_length: int, vocab_size: int, ids: dict[str, int], seed: int = 0):
    """`torch.jit.trace` of `module` on a padded example batch of 2 (CPU)."""
    generator = torch.Generator().manual_seed(seed)
    example = verification_inputs(2, max_length, vocab_size, ids, generator)  # row 2 is padded
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # jit deprecation notices, tracer warnings checked below
        return torch.jit.trace(module, example, check_trace=False)


def export_torchscript(
    module,
    out_path: str,
    *,
    max_length: int,
    vocab_size: int,
    ids: dict[str, int],
    reference=None,
    half: bool = False,
    batch_sizes=VERIFY_BATCH_SIZES,
    seed: int = 0,
) -> dict:
    """Trace `module` (contract above), verify it, and write it to `out_path`.

    `reference` (default: `module` itself) is the eager model the trace must reproduce.
    With `half`, both are converted to float16 and compared in float16 (the difference to
    the float32 reference is reported too). Raises `ExportError`, writing nothing, when
    the traced module differs by more than the tolerance; the saved file is loaded back
    with `torch.jit.load` and checked again before it replaces `out_path`.
    """
    module = module.eval()
    reference = (reference if reference is not None else module).eval()
    fp32_reference = None
    if half:
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            fp32_reference = {
                b: reference(*verification_inputs(b, max_length, vocab_size, ids, generator)) for b in batch_sizes
            }
        module = module.half()
        reference = reference.half()
    tolerance = FP16_TOLERANCE if half else FP32_TOLERANCE
    started = time.perf_counter()
    traced = trace(module, max_length, vocab_size, ids, seed)
    diffs = compare(traced, reference, max_length, vocab_size, ids, batch_sizes, seed=seed + 1)
    worst = max(diffs.values())
    log.info(
        f"traced in {time.perf_counter() - started:.1f} s; max |traced - eager| = {worst:.3g} "
        f"({'float16' if half else 'float32'}; batch sizes {', '.join(map(str, batch_sizes))})"
    )
    if not worst <= tolerance:
        raise ExportError(
            f"the traced module differs from eager PyTorch by {worst:.3g} (> {tolerance:g}; "
            f"per batch size: {diffs}); {out_path} was not written"
        )
    result = {
        "max_abs_diff": worst,
        "per_batch_size": {str(k): v for k, v in diffs.items()},
        "tolerance": tolerance,
        "dtype": "float16" if half else "float32",
        "max_length": max_length,
    }
    if fp32_reference is not None:
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            vs32 = max(
                (traced(*verification_inputs(b, max_length, vocab_size, ids, generator)) - fp32_reference[b])
                .abs()
                .max()
                .item()
                for b in batch_sizes
            )
        result["max_abs_diff_vs_float32"] = vs32
        log.info(f"float16 module vs the float32 model: max |diff| = {vs32:.3g}")
    pinned = device_constants(traced)
    result["device_constants"] = pinned
    if pinned:
        log.info(
            f"warning: the traced graph pins a device ({len(pinned)} constants, e.g. {pinned[0]}); "
            "it may only run on the device it was traced on"
        )
    with staged(out_path) as temporary:  # the archive is named after the file
        torch.jit.save(traced, temporary)
        loaded = torch.jit.load(temporary, map_location="cpu")
        reloaded = compare(loaded, reference, max_length, vocab_size, ids, batch_sizes[:2], seed=seed + 2)
        if not max(reloaded.values()) <= tolerance:
            raise ExportError(
                f"the saved module, loaded back, differs from eager PyTorch by "
                f"{max(reloaded.values()):.3g}; {out_path} was not written"
            )
        os.replace(temporary, out_path)
    if torch.cuda.is_available():
        on_gpu = torch.jit.load(out_path, map_location="cuda")
        gpu_reference = reference.to("cuda")
        gpu = compare(on_gpu, gpu_reference, max_length, vocab_size, ids, batch_sizes[:2], seed=seed + 3, device="cuda")
        reference.to("cpu")
        result["cuda_max_abs_diff"] = max(gpu.values())
        log.info(f"loaded on the GPU: max |traced - eager| = {result['cuda_max_abs_diff']:.3g}")
    result["bytes"] = os.path.getsize(out_path)
    return result


def _onnx_tools():
    try:
        import onnx
        import onnxruntime
        import onnxscript  # noqa: F401 - the dynamo exporter needs it
    except ImportError as exc:
        raise BertError(
            f"the ONNX export needs onnx, onnxscript and onnxruntime ({exc}): pip install 'readability-triton[onnx]'"
        ) from None
    return onnx, onnxruntime


def _run_onnx(session, tokens, mask):
    return torch.from_numpy(session.run(None, {contracts.INPUT_0: tokens.numpy(), contracts.INPUT_1: mask.numpy()})[0])


def export_onnx(
    module,
    out_path: str,
    *,
    max_length: int,
    vocab_size: int,
    ids: dict[str, int],
    reference=None,
    batch_sizes=VERIFY_BATCH_SIZES,
    seed: int = 0,
    real_inputs=None,
) -> dict:
    """Export `module` (the bert contract) to ONNX with `torch.onnx.export(dynamo=True)`,
    dynamic batch and length dimensions (length 2..max_length: `OnnxRunner` cuts a batch's
    padding off) and opset `ONNX_OPSET`, check it with `onnx.checker`, and compare ONNX
    Runtime's output with eager PyTorch (`reference`, default `module`) at `batch_sizes` on
    random ids with padding, and on `real_inputs` (ids, mask) when given, padded and trimmed.
    Raises `ExportError`, writing nothing, when they differ by more than 1e-4 (float32)."""
    onnx, onnxruntime = _onnx_tools()
    module = module.eval()
    reference = (reference if reference is not None else module).eval()
    example = verification_inputs(2, max_length, vocab_size, ids, torch.Generator().manual_seed(seed))
    batch = torch.export.Dim("batch", min=1, max=4096)
    # the length is dynamic too (2..max_length): OnnxRunner cuts a batch's padding off
    length = torch.export.Dim("length", min=2, max=max_length) if max_length > 2 else None
    dims = {0: batch, 1: length} if length is not None else {0: batch}
    started = time.perf_counter()
    with staged(out_path) as temporary:
        chatter = io.StringIO()  # the exporter prints its progress and logs optional ops it skips
        quiet = logging.getLogger("torch.onnx")
        level, quiet.level = quiet.level, logging.ERROR
        try:
            with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(chatter):
                warnings.simplefilter("ignore")
                program = torch.onnx.export(
                    module,
                    example,
                    dynamo=True,
                    opset_version=ONNX_OPSET,
                    input_names=[contracts.INPUT_0, contracts.INPUT_1],
                    output_names=[contracts.OUTPUT_0],
                    dynamic_shapes=(dims, dims),
                )
        except Exception as exc:
            raise ExportError(
                f"torch.onnx.export (dynamo) could not export the model: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}; {out_path} was not written"
            ) from exc
        finally:
            quiet.level = level
        if program is None:
            raise ExportError("torch.onnx.export returned no program")
        program.save(temporary)
        exported = onnx.load(temporary)
        if exported.ir_version > MAX_IR_VERSION:
            raise ExportError(
                f"the ONNX model has IR version {exported.ir_version}; ONNX Runtime 1.19.2 (Triton "
                f"24.10) loads up to {MAX_IR_VERSION}: export with an onnx/onnxscript that writes it"
            )
        entry = exported.metadata_props.add()
        entry.key, entry.value = "vocab_size", str(vocab_size)
        onnx.save(exported, temporary)
        onnx.checker.check_model(temporary, full_check=True)
        session = onnx_session(temporary)  # the serving runner's session set-up
        generator = torch.Generator().manual_seed(seed + 1)
        diffs: dict = {}
        with torch.no_grad():
            cases = [(str(b), verification_inputs(b, max_length, vocab_size, ids, generator)) for b in batch_sizes]
            if real_inputs is not None:
                cases.append((f"{len(real_inputs[0])} real texts", real_inputs))
                real_ids, real_mask = real_inputs
                longest = max(int(real_mask.sum(dim=1).max()), 2)  # what OnnxRunner feeds: padding cut off
                cases.append((f"{len(real_ids)} real texts, trimmed", (real_ids[:, :longest], real_mask[:, :longest])))
            for name, (tokens, mask) in cases:
                got, want = _run_onnx(session, tokens, mask), reference(tokens, mask)
                if tuple(got.shape) != (len(tokens), 1) or got.dtype != torch.float32:
                    raise ExportError(
                        f"the ONNX model returns {got.dtype} {tuple(got.shape)} for a batch of "
                        f"{len(tokens)}; the bert contract is float32 [{len(tokens)}, 1]"
                    )
                diff = (got - want.float()).abs().max().item()
                diffs[name] = diff if math.isfinite(diff) else float("inf")
        worst = max(diffs.values())
        log.info(
            f"exported to ONNX (opset {ONNX_OPSET}) in {time.perf_counter() - started:.1f} s; max |ONNX Runtime - "
            f"eager| = {worst:.3g} (float32; batch sizes {', '.join(diffs)})"
        )
        if not worst <= FP32_TOLERANCE:
            raise ExportError(
                f"ONNX Runtime's output differs from eager PyTorch by {worst:.3g} (> {FP32_TOLERANCE:g}; "
                f"per batch: {diffs}); {out_path} was not written"
            )
        os.replace(temporary, out_path)
    return {
        "format": "onnx",
        "opset": ONNX_OPSET,
        "max_abs_diff": worst,
        "per_batch_size": diffs,
        "tolerance": FP32_TOLERANCE,
        "dtype": "float32",
        "max_length": max_length,
        "dynamic_length": length is not None,
        "onnx": str(onnx.__version__),
        "onnxruntime": str(onnxruntime.__version__),
        "torch": str(torch.__version__),
        "ir_version": int(exported.ir_version),
        "checker": "onnx.checker.check_model(full_check=True) passed",
        "bytes": os.path.getsize(out_path),
    }


def export_checkpoint(
    checkpoint: str,
    out_path: str,
    max_length: int = contracts.DEFAULT_MAX_LENGTH,
    half: bool = False,
    tokenizer: str | None = None,
    format: str = "onnx",
) -> dict:
    """`export-bert`: checkpoint folder -> verified `out_path` (ONNX or TorchScript) + tokenizer
    files; where `out_path` has the artifact set's name for the format (`model.onnx`,
    `model.pt`), the folder's manifest.json is (re)written too, this export recorded under
    `info["bert"]["export_<format>"]` (`result["manifest"]` says whether)."""
    if format not in BERT_FORMATS:
        raise BertError(f"--format {format!r}: choose one of {', '.join(BERT_FORMATS)}")
    if half and format != "torchscript":
        raise BertError(
            "--half exports float16 TorchScript; for FP16 with ONNX, export float32 and let TensorRT "
            "build an FP16 engine (`assemble --tensorrt`)"
        )
    contracts.check_max_length(max_length, "--max-length", BertError)
    model = load_sequence_regressor(checkpoint)
    vocab_size = int(model.config.vocab_size)
    source = tokenizer or checkpoint
    check_compatible(
        checkpoint,
        vocab_size,
        max_length=max_length,
        max_positions=getattr(model.config, "max_position_embeddings", None),
    )
    tok = load_tokenizer(source, max_length, "export-bert (pass the folder with vocab.txt as --tokenizer)")
    check_compatible(source, vocab_size, tokens=tok.vocab_size)
    ids = special_ids(tok)
    if format == "onnx":
        result = export_onnx(
            SequenceRegressor(model),
            out_path,
            max_length=max_length,
            vocab_size=vocab_size,
            ids=ids,
            reference=EagerReference(model),
            real_inputs=real_inputs(tok),
        )
    else:
        result = export_torchscript(
            SequenceRegressor(model),
            out_path,
            max_length=max_length,
            vocab_size=vocab_size,
            ids=ids,
            reference=EagerReference(model),
            half=half,
        )
        result["format"] = "torchscript"
    result["tokenizer_files"] = write_tokenizer(
        source, os.path.dirname(os.path.abspath(out_path)), max_length, vocab_size
    )
    result["checkpoint"] = os.path.abspath(checkpoint)
    record = os.path.join(checkpoint, TRAINING_RECORD)
    if os.path.isfile(record):
        import json

        with open(record, encoding="utf-8") as handle:
            training = json.load(handle)
        kept = ("cv_rmse", "fold_rmse", "oof", "data_digest", "texts_seen", "settings")
        result["training"] = {k: training[k] for k in kept if k in training}
    in_set = os.path.basename(out_path) == BERT_FORMATS[format]
    if in_set:
        update_manifest(
            os.path.dirname(os.path.abspath(out_path)), "bert", result, max_length=max_length, key=f"export_{format}"
        )
    result["manifest"] = in_set
    return result
