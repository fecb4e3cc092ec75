"""A BERT checkpoint folder and its tokenizer, as export-bert, train-bert and build-demo
read them: the folder checked, the sequence-regression model loaded (one output, every
weight present), the serving tokenizer loaded, and the one check that a tokenizer and a
model belong together (`check_compatible`). transformers is imported where it is used.
"""

from __future__ import annotations

import os

from ..errors import BertError
from ..tokenizer import WordPieceTokenizer, save_tokenizer_files


def check_checkpoint_folder(path: str, what: str) -> None:
    if not os.path.isdir(path):
        raise BertError(f"{path}: no such folder; {what} must be a Hugging Face model folder (with config.json)")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise BertError(
            f"{path}: no config.json; {what} must be a Hugging Face model folder "
            "(what `save_pretrained` or `readability-triton train-bert` writes)"
        )


def load_sequence_regressor(checkpoint: str, attn_implementation: str = "sdpa"):
    """A Hugging Face sequence-regression model with exactly one output, in eval mode.

    Refuses multi-output checkpoints, classification checkpoints and bare encoders (whose
    head would be randomly initialised) with a message that says what to do instead."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    check_checkpoint_folder(checkpoint, "the checkpoint")
    try:
        config = AutoConfig.from_pretrained(checkpoint)
    except (OSError, ValueError) as err:
        raise BertError(f"{checkpoint}: config.json is not a Hugging Face model configuration ({err})") from None
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise BertError(
            f"{checkpoint}: a {', '.join(architectures)} checkpoint has no trained regression head; "
            "fine-tune it first with `readability-triton train-bert --base "
            f"{checkpoint} --out DIR` and export DIR"
        )
    n_outputs = int(getattr(config, "num_labels", 0) or 0)
    problem = getattr(config, "problem_type", None)
    if n_outputs != 1:
        kind = f", problem_type={problem}" if problem else ""
        raise BertError(
            f"{checkpoint}: a multi-output checkpoint ({n_outputs} outputs: num_labels={n_outputs}{kind}); "
            "the bert step serves one readability score, so export-bert needs a sequence-regression "
            "checkpoint with one output (num_labels=1); fine-tune one with `readability-triton train-bert`"
        )
    if problem not in (None, "regression"):
        raise BertError(
            f"{checkpoint}: problem_type={problem!r}; export-bert needs a regression checkpoint "
            "(problem_type 'regression', num_labels=1); fine-tune one with `readability-triton train-bert`"
        )
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            checkpoint, attn_implementation=attn_implementation, output_loading_info=True
        )
    except (OSError, ValueError, KeyError) as err:
        raise BertError(f"{checkpoint}: cannot load it as a sequence-regression model ({err})") from None
    missing = [k for k in info.get("missing_keys", ()) if k]
    if missing:
        raise BertError(
            f"{checkpoint}: the checkpoint lacks weights ({', '.join(sorted(missing)[:4])}"
            f"{', ...' if len(missing) > 4 else ''}); they would be random. Export a fully "
            "trained checkpoint (see `readability-triton train-bert`)"
        )
    return model.eval()


def load_tokenizer(directory: str, max_length: int, what: str):
    """The serving tokenizer (`tokenizer.WordPieceTokenizer`) of `directory`."""

    try:
        return WordPieceTokenizer.from_directory(directory, max_length)
    except (ValueError, OSError) as err:
        raise BertError(
            f"{directory}: no usable BERT tokenizer for {what} ({err}); it needs vocab.txt "
            "(and optionally tokenizer.json, tokenizer_config.json, special_tokens_map.json)"
        ) from None


def special_ids(tokenizer) -> dict[str, int]:
    """[CLS], [SEP], [PAD] ids of a `WordPieceTokenizer`."""
    ids = {}
    for key in ("cls_token", "sep_token", "pad_token"):
        value = tokenizer.backend.token_to_id(tokenizer.special_tokens[key])
        if value is None:
            raise BertError(f"the tokenizer has no {tokenizer.special_tokens[key]} token")
        ids[key] = int(value)
    return ids


def check_compatible(
    source: str,
    vocab_size: int,
    *,
    tokens: int | None = None,
    max_length: int | None = None,
    max_positions: int | None = None,
    error: type[Exception] = BertError,
) -> None:
    """The one check that a tokenizer and a model belong together: `error` unless every id
    of a tokenizer of `tokens` ids has an embedding among the model's `vocab_size`, and
    `max_length` fits the model's `max_positions` (each where given). `source` names the
    model in the message."""
    if tokens is not None and tokens > vocab_size:
        raise error(
            f"{source}: the tokenizer has {tokens} tokens but the model embeds only {vocab_size}; the "
            "tokenizer belongs to another model"
        )
    if max_length is not None and max_positions is not None and max_length > max_positions:
        raise error(
            f"--max-length {max_length}: {source} has position embeddings for {max_positions} tokens; "
            f"use --max-length {max_positions} or less"
        )


def write_tokenizer(source: str, directory: str, max_length: int, vocab_size: int | None = None) -> list[str]:
    """Copy the tokenizer files of `source` into `directory` (what `preprocess` loads),
    check they load, and that every token id has an embedding."""

    try:
        written = save_tokenizer_files(source, directory)
    except (ValueError, OSError) as err:
        raise BertError(
            f"{source}: cannot write its tokenizer ({err}); the BERT checkpoint must come with "
            "its vocab.txt (or tokenizer.json); with export-bert, --tokenizer DIR names another folder "
            "that has them"
        ) from None
    tokenizer = load_tokenizer(directory, max_length, "the exported model")
    if vocab_size is not None:
        check_compatible(source, vocab_size, tokens=tokenizer.vocab_size)
    return written
