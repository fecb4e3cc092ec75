"""The BERT branch: fine-tuning a regressor (`train-bert`) and exporting it (`export-bert`).

The `bert` step of the ensemble runs a TorchScript module with the contract

    forward(input_ids: int64[B, L], attention_mask: int64[B, L]) -> float32[B, 1]

(`pytorch_libtorch` takes its inputs in forward-argument order: `input__0`, `input__1`).

Export traces the model on the CPU and checks the traced module against eager PyTorch
at several batch sizes and padding patterns before anything is written. Two details keep
one traced file usable on the CPU and on a GPU:

- the 2-D attention mask is turned into the additive 4-D mask inside the traced module
  with tensor operations only (transformers 5 builds its own mask with
  `.to(device=...)` calls that a trace would freeze to the tracing device, and skips the
  mask when a batch has no padding, which a trace would freeze too); transformers passes
  a ready 4-D mask through unchanged;
- `token_type_ids` are `zeros_like(input_ids)`, never a tensor created on a device.

`export_torchscript` scans the traced graph for device constants and reports any.
torch is imported with this module (the CLI imports it inside its commands); transformers
and scikit-learn inside the functions that need them.
"""
from __future__ import annotations

import inspect
import json
import math
import os
import shutil
import tempfile
import time
import warnings

import numpy as np
import torch

from . import contracts
from .evaluation import rmse

#: Poolings of an encoder's output that a linear regression head can sit on.
#: `pooler` is exactly `BertForSequenceClassification`'s head input (the [CLS] state
#: through the pre-trained dense + tanh pooler); `layers_mean` concatenates the masked
#: mean of every transformer layer's output.
POOLINGS = ("pooler", "cls", "mean", "layers_mean")
#: Largest |traced - eager| accepted for a float32 export (the issue's bound).
FP32_TOLERANCE = 1e-4
#: Largest |traced - eager| accepted for a float16 export (both run in float16).
FP16_TOLERANCE = 1e-2
#: Batch sizes the traced module is checked at (it is traced at batch size 2).
VERIFY_BATCH_SIZES = (1, 2, 5, 8)
#: Name of the training record `train-bert` writes next to the checkpoint.
TRAINING_RECORD = "training.json"


class BertError(ValueError):
    """A checkpoint, tokenizer or option the user has to fix (the message says how)."""


class ExportError(RuntimeError):
    """The traced module does not reproduce eager PyTorch; nothing was written."""


# ----------------------------------------------------------------- helpers


def pick_device(name: str = "auto"):
    """`auto`: the first CUDA GPU when PyTorch sees one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise BertError(f"--device {name}: PyTorch sees no CUDA GPU here; use --device cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError:
        raise BertError(f"--device {name!r}: not a PyTorch device (use auto, cpu, cuda or cuda:N)") from None


def additive_mask(attention_mask, dtype):
    """`[B, L]` 0/1 mask -> `[B, 1, 1, L]` additive mask: 0 where kept, the dtype's
    lowest value where padded. Tensor operations only, so a trace holds no device."""
    keep = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - keep) * torch.finfo(dtype).min


def _accepts(module, name: str) -> bool:
    try:
        return name in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def pool(outputs, attention_mask, pooling: str):
    """One pooled vector per text from a BERT encoder's outputs (see `POOLINGS`).

    `outputs` must hold `hidden_states` for `layers_mean`."""
    if pooling == "pooler":
        if outputs.pooler_output is None:
            raise BertError("this encoder has no pooler; choose another pooling")
        return outputs.pooler_output
    if pooling == "cls":
        return outputs.last_hidden_state[:, 0]
    weights = attention_mask.to(outputs.last_hidden_state.dtype).unsqueeze(-1)
    count = weights.sum(1).clamp(min=1.0)
    if pooling == "mean":
        return (outputs.last_hidden_state * weights).sum(1) / count
    if pooling == "layers_mean":
        return torch.cat([(h * weights).sum(1) / count for h in outputs.hidden_states[1:]], dim=-1)
    raise BertError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")


class SequenceRegressor(torch.nn.Module):
    """A Hugging Face `*ForSequenceClassification` model with one output, behind the
    `bert` step's contract."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.token_types = _accepts(model, "token_type_ids")

    def forward(self, input_ids, attention_mask):
        dtype = next(self.model.parameters()).dtype
        kwargs = {"input_ids": input_ids, "attention_mask": additive_mask(attention_mask, dtype),
                  "return_dict": False}
        if self.token_types:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        return self.model(**kwargs)[0].float()


class PooledRegressor(torch.nn.Module):
    """A BERT encoder, a pooling (see `POOLINGS`) and a linear head with one output."""

    def __init__(self, encoder, pooling: str, head):
        super().__init__()
        if pooling not in POOLINGS:
            raise BertError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        self.encoder = encoder
        self.pooling = pooling
        self.head = head
        self.token_types = _accepts(encoder, "token_type_ids")

    def pooled(self, input_ids, attention_mask):
        dtype = self.head.weight.dtype
        kwargs = {"input_ids": input_ids, "attention_mask": additive_mask(attention_mask, dtype),
                  "output_hidden_states": self.pooling == "layers_mean", "return_dict": True}
        if self.token_types:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        return pool(self.encoder(**kwargs), attention_mask, self.pooling)

    def forward(self, input_ids, attention_mask):
        return self.head(self.pooled(input_ids, attention_mask)).float()


class EagerReference(torch.nn.Module):
    """Hugging Face's own forward (2-D mask, its own mask code): what a trace must match."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits.float()


# ------------------------------------------------------------- checkpoints


def _check_checkpoint_folder(path: str, what: str) -> None:
    if not os.path.isdir(path):
        raise BertError(f"{path}: no such folder; {what} must be a Hugging Face model folder (with config.json)")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise BertError(f"{path}: no config.json; {what} must be a Hugging Face model folder "
                        "(what `save_pretrained` or `readability-triton train-bert` writes)")


def load_sequence_regressor(checkpoint: str, attn_implementation: str = "sdpa"):
    """A Hugging Face sequence-regression model with exactly one output, in eval mode.

    Refuses multi-output checkpoints, classification checkpoints and bare encoders (whose
    head would be randomly initialised) with a message that says what to do instead."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    _check_checkpoint_folder(checkpoint, "the checkpoint")
    try:
        config = AutoConfig.from_pretrained(checkpoint)
    except (OSError, ValueError) as err:
        raise BertError(f"{checkpoint}: config.json is not a Hugging Face model configuration ({err})") from None
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise BertError(f"{checkpoint}: a {', '.join(architectures)} checkpoint has no trained regression head; "
                        "fine-tune it first with `readability-triton train-bert --base "
                        f"{checkpoint} --out DIR` and export DIR")
    n_outputs = int(getattr(config, "num_labels", 0) or 0)
    problem = getattr(config, "problem_type", None)
    if n_outputs != 1:
        kind = f", problem_type={problem}" if problem else ""
        raise BertError(f"{checkpoint}: a multi-output checkpoint ({n_outputs} outputs: num_labels={n_outputs}{kind}); "
                        "the bert step serves one readability score, so export-bert needs a sequence-regression "
                        "checkpoint with one output (num_labels=1); fine-tune one with `readability-triton train-bert`")
    if problem not in (None, "regression"):
        raise BertError(f"{checkpoint}: problem_type={problem!r}; export-bert needs a regression checkpoint "
                        "(problem_type 'regression', num_labels=1); fine-tune one with `readability-triton train-bert`")
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            checkpoint, attn_implementation=attn_implementation, output_loading_info=True)
    except (OSError, ValueError, KeyError) as err:
        raise BertError(f"{checkpoint}: cannot load it as a sequence-regression model ({err})") from None
    missing = [k for k in info.get("missing_keys", ()) if k]
    if missing:
        raise BertError(f"{checkpoint}: the checkpoint lacks weights ({', '.join(sorted(missing)[:4])}"
                        f"{', ...' if len(missing) > 4 else ''}); they would be random. Export a fully "
                        "trained checkpoint (see `readability-triton train-bert`)")
    return model.eval()


def load_tokenizer(directory: str, max_length: int, what: str):
    """The serving tokenizer (`tokenization.WordPieceTokenizer`) of `directory`."""
    from .tokenization import WordPieceTokenizer

    try:
        return WordPieceTokenizer.from_directory(directory, max_length)
    except (ValueError, OSError) as err:
        raise BertError(f"{directory}: no usable BERT tokenizer for {what} ({err}); it needs vocab.txt "
                        "(and optionally tokenizer.json, tokenizer_config.json, special_tokens_map.json)") from None


def special_ids(tokenizer) -> dict[str, int]:
    """[CLS], [SEP], [PAD] ids of a `WordPieceTokenizer`."""
    ids = {}
    for key in ("cls_token", "sep_token", "pad_token"):
        value = tokenizer.backend.token_to_id(tokenizer.special_tokens[key])
        if value is None:
            raise BertError(f"the tokenizer has no {tokenizer.special_tokens[key]} token")
        ids[key] = int(value)
    return ids


def encode_texts(tokenizer, texts):
    """Token ids and mask as int64 torch tensors, with the serving tokenizer."""
    ids, mask = tokenizer.encode(list(texts))
    return torch.as_tensor(np.asarray(ids, dtype=np.int64)), torch.as_tensor(np.asarray(mask, dtype=np.int64))


def length_batches(mask, batch_size: int):
    """Index batches in order of token count (a batch is trimmed to its longest row)."""
    lengths = mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield index, max(int(lengths[index].max()), 1)


# -------------------------------------------------------------- export


def verification_inputs(batch_size: int, max_length: int, vocab_size: int, ids: dict[str, int], generator):
    """Random token ids with [CLS]/[SEP], a full-length row, a 2-token row and random
    padding in between."""
    low = min(1000, max(vocab_size // 2, 1))
    tokens = torch.randint(low, vocab_size, (batch_size, max_length), generator=generator, dtype=torch.int64)
    lengths = torch.randint(2, max_length + 1, (batch_size,), generator=generator)
    lengths[0] = max_length
    if batch_size > 1:
        lengths[-1] = 2
    positions = torch.arange(max_length).unsqueeze(0)
    mask = (positions < lengths.unsqueeze(1)).to(torch.int64)
    tokens[:, 0] = ids["cls_token"]
    tokens[torch.arange(batch_size), lengths - 1] = ids["sep_token"]
    tokens = torch.where(mask.bool(), tokens, torch.full_like(tokens, ids["pad_token"]))
    return tokens, mask


def trace(module, max_length: int, vocab_size: int, ids: dict[str, int], seed: int = 0):
    """`torch.jit.trace` of `module` on a padded example batch of 2 (CPU)."""
    generator = torch.Generator().manual_seed(seed)
    example = verification_inputs(2, max_length, vocab_size, ids, generator)  # row 2 is padded
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # jit deprecation notices, tracer warnings checked below
        return torch.jit.trace(module, example, check_trace=False)


def device_constants(traced) -> list[str]:
    """Graph lines that pin a device (such a module only runs on that device)."""
    found = []
    for line in str(traced.inlined_graph).splitlines():
        if "prim::Constant" in line and ('value="cpu"' in line or 'value="cuda' in line):
            found.append(line.strip())
    return found


def compare(candidate, reference, max_length: int, vocab_size: int, ids: dict[str, int],
            batch_sizes=VERIFY_BATCH_SIZES, seed: int = 1, device=None) -> dict[int, float]:
    """max |candidate - reference| per batch size, on the same random batches."""
    generator = torch.Generator().manual_seed(seed)
    diffs = {}
    with torch.no_grad():
        for batch_size in batch_sizes:
            tokens, mask = verification_inputs(batch_size, max_length, vocab_size, ids, generator)
            if device is not None:
                tokens, mask = tokens.to(device), mask.to(device)
            got = candidate(tokens, mask)
            want = reference(tokens, mask)
            if tuple(got.shape) != (batch_size, 1) or got.dtype != torch.float32:
                raise ExportError(f"the traced module returns {got.dtype} {tuple(got.shape)} for a batch of "
                                  f"{batch_size}; the bert contract is float32 [{batch_size}, 1]")
            diff = (got.float() - want.float()).abs().max().item()
            diffs[batch_size] = diff if math.isfinite(diff) else float("inf")
    return diffs


def export_torchscript(module, out_path: str, *, max_length: int, vocab_size: int, ids: dict[str, int],
                       reference=None, half: bool = False, batch_sizes=VERIFY_BATCH_SIZES,
                       seed: int = 0, log=None) -> dict:
    """Trace `module` (contract above), verify it, and write it to `out_path`.

    `reference` (default: `module` itself) is the eager model the trace must reproduce.
    With `half`, both are converted to float16 and compared in float16 (the difference to
    the float32 reference is reported too). Raises `ExportError`, writing nothing, when
    the traced module differs by more than the tolerance; the saved file is loaded back
    with `torch.jit.load` and checked again before it replaces `out_path`.
    """
    log = log or (lambda message: None)
    module = module.eval()
    reference = (reference if reference is not None else module).eval()
    fp32_reference = None
    if half:
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            fp32_reference = {b: reference(*verification_inputs(b, max_length, vocab_size, ids, generator))
                              for b in batch_sizes}
        module = module.half()
        reference = reference.half()
    tolerance = FP16_TOLERANCE if half else FP32_TOLERANCE
    started = time.perf_counter()
    traced = trace(module, max_length, vocab_size, ids, seed)
    diffs = compare(traced, reference, max_length, vocab_size, ids, batch_sizes, seed=seed + 1)
    worst = max(diffs.values())
    log(f"traced in {time.perf_counter() - started:.1f} s; max |traced - eager| = {worst:.3g} "
        f"({'float16' if half else 'float32'}; batch sizes {', '.join(map(str, batch_sizes))})")
    if not worst <= tolerance:
        raise ExportError(f"the traced module differs from eager PyTorch by {worst:.3g} (> {tolerance:g}; "
                          f"per batch size: {diffs}); {out_path} was not written")
    result = {"max_abs_diff": worst, "per_batch_size": {str(k): v for k, v in diffs.items()},
              "tolerance": tolerance, "dtype": "float16" if half else "float32", "max_length": max_length}
    if fp32_reference is not None:
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            vs32 = max((traced(*verification_inputs(b, max_length, vocab_size, ids, generator)) - fp32_reference[b])
                       .abs().max().item() for b in batch_sizes)
        result["max_abs_diff_vs_float32"] = vs32
        log(f"float16 module vs the float32 model: max |diff| = {vs32:.3g}")
    pinned = device_constants(traced)
    result["device_constants"] = pinned
    if pinned:
        log(f"warning: the traced graph pins a device ({len(pinned)} constants, e.g. {pinned[0]}); "
            "it may only run on the device it was traced on")
    directory = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=directory)
    temporary = os.path.join(staging, os.path.basename(out_path))  # the archive is named after the file
    try:
        torch.jit.save(traced, temporary)
        loaded = torch.jit.load(temporary, map_location="cpu")
        reloaded = compare(loaded, reference, max_length, vocab_size, ids, batch_sizes[:2], seed=seed + 2)
        if not max(reloaded.values()) <= tolerance:
            raise ExportError(f"the saved module, loaded back, differs from eager PyTorch by "
                              f"{max(reloaded.values()):.3g}; {out_path} was not written")
        os.replace(temporary, out_path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if torch.cuda.is_available():
        on_gpu = torch.jit.load(out_path, map_location="cuda")
        gpu_reference = reference.to("cuda")
        gpu = compare(on_gpu, gpu_reference, max_length, vocab_size, ids, batch_sizes[:2], seed=seed + 3,
                      device="cuda")
        reference.to("cpu")
        result["cuda_max_abs_diff"] = max(gpu.values())
        log(f"loaded on the GPU: max |traced - eager| = {result['cuda_max_abs_diff']:.3g}")
    result["bytes"] = os.path.getsize(out_path)
    return result


def write_tokenizer(source: str, directory: str, max_length: int, vocab_size: int | None = None) -> list[str]:
    """Copy the tokenizer files of `source` into `directory` (what `preprocess` loads),
    check they load, and that every token id has an embedding."""
    from .tokenization import save_tokenizer_files

    try:
        written = save_tokenizer_files(source, directory)
    except (ValueError, OSError) as err:
        raise BertError(f"{source}: cannot write its tokenizer ({err}); the BERT checkpoint must come with "
                        "its vocab.txt (or tokenizer.json); with export-bert, --tokenizer DIR names another folder "
                        "that has them") from None
    tokenizer = load_tokenizer(directory, max_length, "the exported model")
    if vocab_size is not None and tokenizer.vocab_size > vocab_size:
        raise BertError(f"{source}: the tokenizer has {tokenizer.vocab_size} tokens but the model embeds only "
                        f"{vocab_size}; the tokenizer belongs to another model")
    return written


def export_checkpoint(checkpoint: str, out_path: str, max_length: int = contracts.DEFAULT_MAX_LENGTH,
                      half: bool = False, tokenizer: str | None = None, log=None) -> dict:
    """`export-bert`: checkpoint folder -> verified TorchScript `out_path` + tokenizer files."""
    log = log or (lambda message: None)
    if max_length < 2:
        raise BertError(f"--max-length {max_length}: must be at least 2 ([CLS] and [SEP])")
    model = load_sequence_regressor(checkpoint)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and max_length > limit:
        raise BertError(f"--max-length {max_length}: the model has position embeddings for {limit} tokens; "
                        f"use --max-length {limit} or less")
    source = tokenizer or checkpoint
    tok = load_tokenizer(source, max_length, "export-bert (pass the folder with vocab.txt as --tokenizer)")
    vocab_size = int(model.config.vocab_size)
    if tok.vocab_size > vocab_size:
        raise BertError(f"{source}: the tokenizer has {tok.vocab_size} tokens but the model embeds only "
                        f"{vocab_size}; the tokenizer belongs to another model")
    ids = special_ids(tok)
    result = export_torchscript(SequenceRegressor(model), out_path, max_length=max_length, vocab_size=vocab_size,
                                ids=ids, reference=EagerReference(model), half=half, log=log)
    result["tokenizer_files"] = write_tokenizer(source, os.path.dirname(os.path.abspath(out_path)), max_length,
                                                vocab_size)
    result["checkpoint"] = os.path.abspath(checkpoint)
    return result


# ------------------------------------------------------------- training


def _optimizer(model, lr: float, weight_decay: float):
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        plain = name.endswith("bias") or "layernorm" in name.lower() or "layer_norm" in name.lower()
        (no_decay if plain else decay).append(parameter)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, foreach=True)


def _schedule(optimizer, total_steps: int, warmup_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def predict(model, input_ids, attention_mask, batch_size: int = 32, device=None):
    """Predictions of a `*ForSequenceClassification` regressor (length-sorted batches)."""
    device = device or next(model.parameters()).device
    out = torch.empty(len(input_ids), dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        for index, length in length_batches(attention_mask, batch_size):
            logits = model(input_ids=input_ids[index, :length].to(device),
                           attention_mask=attention_mask[index, :length].to(device)).logits
            out[index] = logits.float().squeeze(-1).cpu()
    return out.numpy()


def _new_model(base: str, seed: int, dropout: float | None, mean_target: float, device):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    extra = {}
    if dropout is not None:
        extra = {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout, "classifier_dropout": dropout}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                base, num_labels=1, problem_type="regression", ignore_mismatched_sizes=True, **extra)
        except (OSError, ValueError, KeyError) as err:
            raise BertError(f"{base}: cannot load it as a BERT checkpoint to fine-tune ({err})") from None
    head = getattr(model, "classifier", None)
    if isinstance(head, torch.nn.Linear):
        with torch.no_grad():
            head.bias.fill_(float(mean_target))  # start at the mean: fewer wasted steps
    return model.to(device)


def _fit(model, input_ids, attention_mask, targets, *, epochs, lr, weight_decay, batch_size, warmup, seed,
         device, progress, desc, validation=None, log=None):
    log = log or (lambda message: None)
    n = len(input_ids)
    steps_per_epoch = math.ceil(n / batch_size)
    total = epochs * steps_per_epoch
    optimizer = _optimizer(model, lr, weight_decay)
    schedule = _schedule(optimizer, total, int(round(warmup * total)))
    generator = torch.Generator().manual_seed(seed)
    y = torch.as_tensor(np.asarray(targets, dtype=np.float32))
    history = []
    bar = progress(total=total, desc=desc, unit="step")
    try:
        for epoch in range(epochs):
            model.train()
            order = torch.randperm(n, generator=generator)
            losses = []
            for start in range(0, n, batch_size):
                index = order[start:start + batch_size]
                length = max(int(attention_mask[index].sum(1).max()), 1)
                logits = model(input_ids=input_ids[index, :length].to(device),
                               attention_mask=attention_mask[index, :length].to(device)).logits
                loss = torch.nn.functional.mse_loss(logits.float().squeeze(-1), y[index].to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
            record = {"epoch": epoch + 1, "train_mse": float(np.mean(losses))}
            if validation is not None:
                val_ids, val_mask, val_y = validation
                record["val_rmse"] = rmse(predict(model, val_ids, val_mask, batch_size * 2, device), val_y)
            history.append(record)
            log(f"{desc} epoch {epoch + 1}/{epochs}: train MSE {record['train_mse']:.4f}"
                + (f", held-out RMSE {record['val_rmse']:.4f}" if "val_rmse" in record else ""))
    finally:
        bar.close()
    return history


def train_bert(texts, targets, base: str, out: str, *, epochs: int = 3, lr: float = 5e-5,
               weight_decay: float = 0.01, folds: int = 1, max_length: int = contracts.DEFAULT_MAX_LENGTH,
               batch_size: int = 16, seed: int = 0, warmup: float = 0.1, dropout: float | None = 0.0,
               device: str = "auto", progress=None, log=None) -> dict:
    """`train-bert`: fine-tune `base` as a regressor (linear head, MSE, AdamW with weight
    decay, linear warm-up and decay). With `folds >= 2`, K-fold cross-validation first
    (one model per fold, RMSE on each held-out fold), then the model saved to `out` is
    trained on all the data. Returns the training record (also written to
    `out/training.json`)."""
    from .commands import progress as default_progress

    progress = progress or default_progress
    log = log or (lambda message: None)
    if epochs < 1 or batch_size < 1 or lr <= 0 or weight_decay < 0 or not 0 <= warmup < 1:
        raise BertError("--epochs and --batch-size must be at least 1, --lr positive, --weight-decay >= 0 and "
                        "--warmup in [0, 1)")
    if folds < 0:
        raise BertError(f"--folds {folds}: use 0 or 1 (no cross-validation) or at least 2")
    if folds > len(texts):
        raise BertError(f"--folds {folds}: only {len(texts)} texts; use fewer folds")
    _check_checkpoint_folder(base, "--base")
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base)
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and max_length > limit:
        raise BertError(f"--max-length {max_length}: {base} has position embeddings for {limit} tokens")
    tokenizer = load_tokenizer(base, max_length, "train-bert (the --base folder must hold its tokenizer)")
    if tokenizer.vocab_size > config.vocab_size:
        raise BertError(f"{base}: the tokenizer has {tokenizer.vocab_size} tokens but the model embeds only "
                        f"{config.vocab_size}")
    torch_device = pick_device(device)
    input_ids, attention_mask = encode_texts(tokenizer, texts)
    y = np.asarray(targets, dtype=np.float64)
    settings = {"base": os.path.abspath(base), "epochs": epochs, "lr": lr, "weight_decay": weight_decay,
                "folds": folds, "max_length": max_length, "batch_size": batch_size, "seed": seed,
                "warmup": warmup, "dropout": dropout, "device": str(torch_device), "n_texts": len(texts)}
    log(f"fine-tuning {base} on {len(texts)} texts ({torch_device}, max_length {max_length})")
    record: dict = {"settings": settings}
    started = time.perf_counter()
    if folds >= 2:
        from sklearn.model_selection import KFold

        oof = np.zeros(len(y))
        fold_rmse = []
        for k, (train, held) in enumerate(KFold(folds, shuffle=True, random_state=seed).split(y)):
            train_t, held_t = torch.as_tensor(train), torch.as_tensor(held)
            model = _new_model(base, seed + k, dropout, float(y[train].mean()), torch_device)
            _fit(model, input_ids[train_t], attention_mask[train_t], y[train], epochs=epochs, lr=lr,
                 weight_decay=weight_decay, batch_size=batch_size, warmup=warmup, seed=seed + k,
                 device=torch_device, progress=progress, desc=f"fold {k + 1}/{folds}",
                 validation=(input_ids[held_t], attention_mask[held_t], y[held]), log=log)
            oof[held] = predict(model, input_ids[held_t], attention_mask[held_t], batch_size * 2, torch_device)
            fold_rmse.append(rmse(oof[held], y[held]))
            del model
        record["fold_rmse"] = fold_rmse
        record["cv_rmse"] = rmse(oof, y)
        log(f"{folds}-fold CV RMSE {record['cv_rmse']:.4f} (folds: {', '.join(f'{r:.4f}' for r in fold_rmse)})")
    model = _new_model(base, seed, dropout, float(y.mean()), torch_device)
    record["history"] = _fit(model, input_ids, attention_mask, y, epochs=epochs, lr=lr, weight_decay=weight_decay,
                             batch_size=batch_size, warmup=warmup, seed=seed, device=torch_device,
                             progress=progress, desc="all data", log=log)
    record["train_rmse"] = rmse(predict(model, input_ids, attention_mask, batch_size * 2, torch_device), y)
    record["seconds"] = round(time.perf_counter() - started, 1)
    model.config.problem_type = "regression"
    model = model.to("cpu").eval()
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    write_tokenizer(base, out, max_length, int(model.config.vocab_size))
    with open(os.path.join(out, TRAINING_RECORD), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")
    return record
