"""The tokenizer files of an artifact set, read the way Hugging Face reads them.

`vocab.txt`, optionally `tokenizer.json`, `tokenizer_config.json` and
`special_tokens_map.json`: `load_backend(directory)` gives the `tokenizers.Tokenizer`
Hugging Face builds from them (and refuses files that transformers 4 and 5 would read
differently); `save_tokenizer_files(source, directory)` writes them for the `preprocess`
model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from ..layout import (
    SPECIAL_TOKENS_MAP,
    TOKENIZER_CONFIG,
    TOKENIZER_FILES,
    TOKENIZER_JSON,
    VOCAB_TXT,
)

SPECIAL_DEFAULTS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}
#: Hugging Face's default for a WordPiece model built from vocab.txt.
_MAX_INPUT_CHARS_PER_WORD = 100


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return value


def _token_name(value, default: str) -> str:
    if value is None:
        return default
    if isinstance(value, dict):
        return str(value.get("content", default))
    return str(value)


def load_vocab(path: str) -> dict[str, int]:
    """`vocab.txt` the way transformers reads it: one token per line, the line number is the id."""
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as handle:
        for index, line in enumerate(handle.readlines()):
            vocab[line.rstrip("\n")] = index
    return vocab


def _special_names(config: dict, special_map: dict) -> dict[str, str]:
    return {
        key: _token_name(config.get(key, special_map.get(key)), default) for key, default in SPECIAL_DEFAULTS.items()
    }


def _check_tokenizer_json(backend, config: dict, special: dict[str, str], where: str) -> None:
    """Refuse a tokenizer.json that transformers 4 and 5 would read differently.

    transformers 5 builds a BERT tokenizer's normalizer, pre-tokenizer and WordPiece
    limit itself (from tokenizer_config.json, defaults where a key is missing) and takes
    only the vocabulary and post-processor from tokenizer.json; transformers 4 loaded
    tokenizer.json and rebuilt the normalizer when tokenizer_config.json (or its
    defaults) disagreed. Where the two files agree, all of them give the same tokens.
    """

    def refuse(what: str) -> None:
        raise ValueError(
            f"{where}: {what}; Hugging Face's BertTokenizer would not follow {TOKENIZER_JSON} "
            "there: re-save the tokenizer (save_pretrained) so that the files agree"
        )

    normalizer = backend.normalizer
    if type(normalizer).__name__ != "BertNormalizer":
        refuse(f"{TOKENIZER_JSON} has a {type(normalizer).__name__} normalizer, not BertNormalizer")
    expected = {"do_lower_case": True, "strip_accents": None, "tokenize_chinese_chars": True}
    for key, attribute in (
        ("do_lower_case", "lowercase"),
        ("strip_accents", "strip_accents"),
        ("tokenize_chinese_chars", "handle_chinese_chars"),
    ):
        want = config.get(key, expected[key])
        if want != getattr(normalizer, attribute):
            source = f"{TOKENIZER_CONFIG} has" if key in config else "the default (no key in tokenizer_config.json) is"
            refuse(
                f"{source} {key}={want!r} but {TOKENIZER_JSON}'s normalizer has "
                f"{attribute}={getattr(normalizer, attribute)!r}"
            )
    if not normalizer.clean_text:
        refuse(f"{TOKENIZER_JSON}'s normalizer has clean_text=false")
    if type(backend.pre_tokenizer).__name__ != "BertPreTokenizer":
        refuse(f"{TOKENIZER_JSON} has a {type(backend.pre_tokenizer).__name__} pre-tokenizer, not BertPreTokenizer")
    model = backend.model
    if type(model).__name__ != "WordPiece":
        refuse(f"{TOKENIZER_JSON} has a {type(model).__name__} model, not WordPiece")
    if model.max_input_chars_per_word != _MAX_INPUT_CHARS_PER_WORD:
        refuse(
            f"{TOKENIZER_JSON} has max_input_chars_per_word={model.max_input_chars_per_word}, "
            f"not {_MAX_INPUT_CHARS_PER_WORD}"
        )
    if model.continuing_subword_prefix != "##":
        refuse(f"{TOKENIZER_JSON} has the subword prefix {model.continuing_subword_prefix!r}, not '##'")
    if model.unk_token != special["unk_token"]:
        refuse(f"{TOKENIZER_JSON}'s unknown token is {model.unk_token!r}, the configured one {special['unk_token']!r}")


def load_backend(directory: str):
    """The `tokenizers.Tokenizer` Hugging Face builds from the files in `directory`.

    With `tokenizer.json`, that file (checked against `vocab.txt` and
    `tokenizer_config.json` when they are there); with `vocab.txt` alone, the BERT
    pipeline transformers builds from it (BertNormalizer, BertPreTokenizer, WordPiece,
    `[CLS] $A [SEP]`), with `do_lower_case`, `strip_accents`, `tokenize_chinese_chars`
    and the special tokens from `tokenizer_config.json` / `special_tokens_map.json`.
    Returns `(backend, special token names)`.
    """
    from tokenizers import (
        AddedToken,
        Tokenizer,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from tokenizers.models import WordPiece

    if not os.path.isdir(directory):
        raise ValueError(f"{directory}: no such tokenizer folder")
    config = _read_json(os.path.join(directory, TOKENIZER_CONFIG))
    special = _special_names(config, _read_json(os.path.join(directory, SPECIAL_TOKENS_MAP)))
    vocab_path = os.path.join(directory, VOCAB_TXT)
    json_path = os.path.join(directory, TOKENIZER_JSON)
    if os.path.isfile(json_path):
        try:
            backend = Tokenizer.from_file(json_path)
        except Exception as err:  # noqa: BLE001 - the library raises plain Exceptions
            raise ValueError(f"{json_path}: not a tokenizers file ({err})") from None
        _check_tokenizer_json(backend, config, special, directory)
        if os.path.isfile(vocab_path):
            vocab = load_vocab(vocab_path)
            if vocab != backend.get_vocab(with_added_tokens=False):
                raise ValueError(
                    f"{directory}: {VOCAB_TXT} and {TOKENIZER_JSON} hold different vocabularies; "
                    "they must come from the same tokenizer"
                )
        return backend, special
    if not os.path.isfile(vocab_path):
        raise ValueError(
            f"{directory}: no {VOCAB_TXT} (nor {TOKENIZER_JSON}); the preprocess model needs the "
            "BERT tokenizer files in its version folder"
        )
    vocab = load_vocab(vocab_path)
    for key in ("unk_token", "cls_token", "sep_token", "pad_token"):
        if special[key] not in vocab:
            raise ValueError(f"{vocab_path}: no {special[key]} token ({key}); is this a BERT vocabulary?")
    backend = Tokenizer(
        WordPiece(vocab, unk_token=special["unk_token"], max_input_chars_per_word=_MAX_INPUT_CHARS_PER_WORD)
    )
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=bool(config.get("tokenize_chinese_chars", True)),
        strip_accents=config.get("strip_accents"),
        lowercase=bool(config.get("do_lower_case", True)),
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = special["cls_token"], special["sep_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])],
    )
    backend.add_special_tokens(
        [
            AddedToken(special[key], special=True, normalized=False)
            for key in ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
        ]
    )
    return backend, special


def save_tokenizer_files(source, directory: str) -> list[str]:
    """Write the tokenizer files the `preprocess` model loads into `directory`.

    `source` is a folder (its tokenizer files are copied) or a Hugging Face tokenizer
    (anything with `save_pretrained`). transformers 5 no longer writes `vocab.txt`; it
    is then written from `tokenizer.json` (line = id). Tokenizer files already in
    `directory` that the source lacks are removed. The result is loaded once to check
    it. Returns the names of the tokenizer files now in `directory`.
    """
    os.makedirs(directory, exist_ok=True)

    def copy_from(folder: str) -> None:
        if os.path.abspath(folder) == os.path.abspath(directory):
            return
        for name in TOKENIZER_FILES:  # the set replaces whatever tokenizer files were there
            path, target = os.path.join(folder, name), os.path.join(directory, name)
            if os.path.isfile(path):
                shutil.copyfile(path, target)
            elif os.path.isfile(target):
                os.remove(target)

    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        if not any(os.path.isfile(os.path.join(source, n)) for n in (VOCAB_TXT, TOKENIZER_JSON)):
            raise ValueError(f"{source}: no {VOCAB_TXT} or {TOKENIZER_JSON} to copy")
        copy_from(source)
    elif hasattr(source, "save_pretrained"):
        with tempfile.TemporaryDirectory() as tmp:
            source.save_pretrained(tmp)
            copy_from(tmp)
    else:
        raise TypeError(f"save_tokenizer_files takes a folder or a Hugging Face tokenizer, got {type(source).__name__}")
    vocab_path = os.path.join(directory, VOCAB_TXT)
    if not os.path.isfile(vocab_path):
        backend, _ = load_backend(directory)
        vocab = backend.get_vocab(with_added_tokens=False)
        tokens = sorted(vocab, key=vocab.__getitem__)
        if [vocab[t] for t in tokens] != list(range(len(tokens))) or any("\n" in t for t in tokens):
            raise ValueError(
                f"{directory}: the tokenizer's vocabulary ids are not 0..{len(tokens) - 1}; "
                f"it cannot be written as {VOCAB_TXT}"
            )
        with open(vocab_path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write("".join(t + "\n" for t in tokens))
    load_backend(directory)  # check that it loads (and that the files agree)
    return [name for name in TOKENIZER_FILES if os.path.isfile(os.path.join(directory, name))]
