"""`train-bert`: fine-tune a Hugging Face BERT checkpoint as a regressor (a linear head,
MSE, AdamW with weight decay, linear warm-up and decay), with optional K-fold
cross-validation. transformers is imported inside the functions that need it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from typing import Any

import numpy as np
import torch

from .. import contracts
from ..bert.modules import encode_texts, length_batches
from ..data import data_digest, text_fingerprints
from ..errors import BertError
from ..folds import check_folds, out_of_fold
from ..layout import TRAINING_RECORD
from ..metrics import rmse
from ..progress import no_progress
from .bert_checkpoint import (
    check_checkpoint_folder,
    check_compatible,
    load_tokenizer,
    write_tokenizer,
)

log = logging.getLogger(__name__)


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


def _optimizer(model, lr: float, weight_decay: float):
    decay: list = []
    no_decay: list = []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        plain = name.endswith("bias") or "layernorm" in name.lower() or "layer_norm" in name.lower()
        (no_decay if plain else decay).append(parameter)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        foreach=True,
    )


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
            logits = model(
                input_ids=input_ids[index, :length].to(device), attention_mask=attention_mask[index, :length].to(device)
            ).logits
            out[index] = logits.float().squeeze(-1).cpu()
    return out.numpy()


def _new_model(base: str, seed: int, dropout: float | None, mean_target: float, device):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    extra: dict[str, Any] = {}  # keyword arguments of from_pretrained (typed per name since transformers 5)
    if dropout is not None:
        extra = {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout, "classifier_dropout": dropout}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                base, num_labels=1, problem_type="regression", ignore_mismatched_sizes=True, **extra
            )
        except (OSError, ValueError, KeyError) as err:
            raise BertError(f"{base}: cannot load it as a BERT checkpoint to fine-tune ({err})") from None
    head = getattr(model, "classifier", None)
    if isinstance(head, torch.nn.Linear):
        with torch.no_grad():
            head.bias.fill_(float(mean_target))  # start at the mean: fewer wasted steps
    return model.to(device)


def _fit(
    model,
    input_ids,
    attention_mask,
    targets,
    *,
    epochs,
    lr,
    weight_decay,
    batch_size,
    warmup,
    seed,
    device,
    progress,
    desc,
    validation=None,
):
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
                index = order[start : start + batch_size]
                length = max(int(attention_mask[index].sum(1).max()), 1)
                logits = model(
                    input_ids=input_ids[index, :length].to(device),
                    attention_mask=attention_mask[index, :length].to(device),
                ).logits
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
            log.info(
                f"{desc} epoch {epoch + 1}/{epochs}: train MSE {record['train_mse']:.4f}"
                + (f", held-out RMSE {record['val_rmse']:.4f}" if "val_rmse" in record else "")
            )
    finally:
        bar.close()
    return history


def train_bert(
    texts,
    targets,
    base: str,
    out: str,
    *,
    epochs: int = 3,
    lr: float = 5e-5,
    weight_decay: float = 0.01,
    folds: int = 1,
    max_length: int = contracts.DEFAULT_MAX_LENGTH,
    batch_size: int = 16,
    seed: int = 0,
    warmup: float = 0.1,
    dropout: float | None = 0.0,
    device: str = "auto",
    progress=None,
) -> dict:
    """`train-bert`: fine-tune `base` as a regressor (linear head, MSE, AdamW with weight
    decay, linear warm-up and decay). With `folds >= 2`, K-fold cross-validation first
    (one model per fold, RMSE on each held-out fold), then the model saved to `out` is
    trained on all the data. Returns the training record (also written to
    `out/training.json`)."""
    progress = progress or no_progress
    if epochs < 1 or batch_size < 1 or lr <= 0 or weight_decay < 0 or not 0 <= warmup < 1:
        raise BertError(
            "--epochs and --batch-size must be at least 1, --lr positive, --weight-decay >= 0 and --warmup in [0, 1)"
        )
    folds = check_folds(folds, len(texts), error=BertError)
    check_checkpoint_folder(base, "--base")
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base)
    check_compatible(
        base, config.vocab_size, max_length=max_length, max_positions=getattr(config, "max_position_embeddings", None)
    )
    tokenizer = load_tokenizer(base, max_length, "train-bert (the --base folder must hold its tokenizer)")
    check_compatible(base, config.vocab_size, tokens=tokenizer.vocab_size)
    torch_device = pick_device(device)
    input_ids, attention_mask = encode_texts(tokenizer, texts)
    y = np.asarray(targets, dtype=np.float64)
    settings = {
        "base": os.path.abspath(base),
        "epochs": epochs,
        "lr": lr,
        "weight_decay": weight_decay,
        "folds": folds,
        "max_length": max_length,
        "batch_size": batch_size,
        "seed": seed,
        "warmup": warmup,
        "dropout": dropout,
        "device": str(torch_device),
        "n_texts": len(texts),
    }
    log.info(f"fine-tuning {base} on {len(texts)} texts ({torch_device}, max_length {max_length})")
    record: dict = {"settings": settings, "data_digest": data_digest(texts, y), "texts_seen": text_fingerprints(texts)}
    started = time.perf_counter()
    if folds >= 2:
        fold_no = iter(range(folds))

        def fit_predict(train, held):
            k = next(fold_no)
            train_t, held_t = torch.as_tensor(train), torch.as_tensor(held)
            model = _new_model(base, seed + k, dropout, float(y[train].mean()), torch_device)
            _fit(
                model,
                input_ids[train_t],
                attention_mask[train_t],
                y[train],
                epochs=epochs,
                lr=lr,
                weight_decay=weight_decay,
                batch_size=batch_size,
                warmup=warmup,
                seed=seed + k,
                device=torch_device,
                progress=progress,
                desc=f"fold {k + 1}/{folds}",
                validation=(input_ids[held_t], attention_mask[held_t], y[held]),
            )
            return predict(model, input_ids[held_t], attention_mask[held_t], batch_size * 2, torch_device)

        oof, fold_rmse = out_of_fold(y, folds, fit_predict, seed)
        record["fold_rmse"] = fold_rmse
        record["cv_rmse"] = rmse(oof, y)
        record["oof"] = [float(v) for v in oof]
        log.info(f"{folds}-fold CV RMSE {record['cv_rmse']:.4f} (folds: {', '.join(f'{r:.4f}' for r in fold_rmse)})")
    model = _new_model(base, seed, dropout, float(y.mean()), torch_device)
    record["history"] = _fit(
        model,
        input_ids,
        attention_mask,
        y,
        epochs=epochs,
        lr=lr,
        weight_decay=weight_decay,
        batch_size=batch_size,
        warmup=warmup,
        seed=seed,
        device=torch_device,
        progress=progress,
        desc="all data",
    )
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
