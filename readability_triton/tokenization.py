"""BERT WordPiece tokenization, identical to Hugging Face's, on the CPU and on the GPU.

`WordPieceTokenizer.from_directory(path, max_length)` reads the tokenizer files of an
artifact set (`vocab.txt`, optionally `tokenizer.json`, `tokenizer_config.json`,
`special_tokens_map.json`) and `.encode(texts)` returns `(input_ids, attention_mask)`,
int64 arrays of shape `(len(texts), max_length)`: `[CLS] ... [SEP]`, truncated to
`max_length`, padded with `[PAD]` (mask 0). The result is what
`transformers.BertTokenizerFast.from_pretrained(path)(texts, padding="max_length",
truncation=True, max_length=max_length)` gives.

Two paths, one result:

- CPU (`encode(texts)`): the `tokenizers` library, one batched call, packed with NumPy.
- GPU (`encode(texts, xp=cupy)` or `device="gpu"`): cuDF's `CharacterNormalizer` and
  `WordPieceVocabulary` (cuDF >= 25.04, code in `_tokenization_gpu.py`), then [CLS]/[SEP],
  truncation, padding and the mask in CuPy (`add_special_tokens`); CuPy arrays out.
  cuDF's WordPiece does not match Hugging Face on every input, so `DevicePath` sends the
  texts it cannot match to the CPU path and writes their rows into the device result:
    * texts holding an added token verbatim (`[CLS]`, `[SEP]`, `[PAD]`, `[UNK]`,
      `[MASK]`): Hugging Face matches them before normalizing, cuDF splits them;
    * texts with a run of more than 100 bytes without ASCII whitespace (Hugging Face
      turns a word over `max_input_chars_per_word` = 100 characters into `[UNK]`; cuDF
      only words of 200 bytes or more);
    * texts with a code point whose cuDF normalization differs from Hugging Face's
      BertNormalizer + BertPreTokenizer. cuDF's normalizer is a fixed per-code-point
      table, so this is measured, not assumed: each code point is checked once (the
      common ranges when the path is built, any other on first sight) by normalizing
      `x<c>x` both ways and comparing the words (`calibrate_codepoints`).
  Where cuDF is missing or too old, or the tokenizer is not a BERT WordPiece pipeline
  the GPU path can reproduce, `encode(..., xp=cupy)` tokenizes on the CPU, uploads the
  result and logs the reason once.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import unicodedata
from typing import Callable, Iterable, Sequence

import numpy as np

from . import contracts

log = logging.getLogger(__name__)

VOCAB_TXT = "vocab.txt"
TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
#: The files a tokenizer folder may hold, in the order they are read.
TOKENIZER_FILES = (VOCAB_TXT, TOKENIZER_JSON, TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP)

_SPECIAL_DEFAULTS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}
#: Hugging Face's default for a WordPiece model built from vocab.txt.
_MAX_INPUT_CHARS_PER_WORD = 100


# ------------------------------------------------------------------------ inputs


def _as_list(texts) -> list:
    if isinstance(texts, (str, bytes, bytearray)):
        raise TypeError("encode() takes a sequence of texts, not a single text: wrap it in a list")
    return list(texts)


def _decode_error(texts: Sequence) -> Exception | None:
    """The error naming the first text that is not valid str / UTF-8 bytes (None: all are)."""
    for index, text in enumerate(texts):
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                return ValueError(f"text {index} is not valid Unicode ({err.reason} at character {err.start})")
        elif isinstance(text, (bytes, bytearray, memoryview)):
            try:
                bytes(text).decode("utf-8")
            except UnicodeDecodeError as err:
                return ValueError(f"text {index} is not valid UTF-8 ({err.reason} at byte {err.start})")
        else:
            return TypeError(f"text {index} is a {type(text).__name__}; texts must be str or UTF-8 bytes")
    return None


def decode_texts(texts: Sequence) -> list[str]:
    """`texts` as `str` (UTF-8 bytes decoded); invalid UTF-8 raises ValueError naming the index."""
    try:
        return [text if isinstance(text, str) else str(text, "utf-8") for text in texts]
    except (UnicodeDecodeError, TypeError):
        error = _decode_error(texts)
        if error is None:
            raise
        raise error from None


def utf8_rows(texts: Sequence) -> list[bytes]:
    """`texts` as valid UTF-8 `bytes`; a bad one raises ValueError (TypeError) naming its index."""
    try:
        rows = [text.encode("utf-8") if isinstance(text, str) else bytes(text) for text in texts]
    except (UnicodeEncodeError, TypeError):
        error = _decode_error(texts)
        if error is None:
            raise
        raise error from None
    if rows:
        try:
            b"\n".join(rows).decode("utf-8")  # one pass; "\n" cannot complete a sequence
        except UnicodeDecodeError:
            raise _decode_error(rows) from None
    return rows


# ------------------------------------------------------------- array assembly


def pad_rows(rows: Sequence[Sequence[int]], max_length: int, pad_id: int):
    """Token-id rows (special tokens included, at most `max_length` long) -> padded ids, mask."""
    n = len(rows)
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    if n and int(lengths.max()) > max_length:
        raise ValueError(f"a row has {int(lengths.max())} tokens, more than max_length {max_length}")
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    mask = np.arange(max_length, dtype=np.int64)[None, :] < lengths[:, None]
    ids = np.full((n, max_length), pad_id, dtype=np.int64)
    ids[mask] = flat
    return ids, mask.astype(np.int64)


def add_special_tokens(values, counts, max_length: int, cls_id: int, sep_id: int, pad_id: int, xp=np):
    """Ragged WordPiece ids -> `[CLS] first max_length-2 ids [SEP] [PAD]...` and the mask.

    `values` holds the ids of all rows back to back, `counts` the number of ids of each
    row (both `xp` arrays). No host synchronisation: gathers and `where`, no boolean
    indexing, so the same code runs on NumPy and CuPy.
    """
    counts = counts.astype(xp.int64)
    n = int(counts.shape[0])
    starts = xp.cumsum(counts) - counts
    keep = xp.minimum(counts, max_length - 2)
    cols = xp.arange(max_length, dtype=xp.int64)[None, :]
    body = (cols >= 1) & (cols <= keep[:, None])
    if values.shape[0] == 0:
        values = xp.zeros(1, dtype=xp.int64)
    source = xp.clip(starts[:, None] + cols - 1, 0, values.shape[0] - 1)
    ids = xp.where(body, values[source].astype(xp.int64), xp.asarray(pad_id, dtype=xp.int64))
    ids[:, 0] = cls_id
    ids[xp.arange(n), keep + 1] = sep_id
    mask = (cols < (keep + 2)[:, None]).astype(xp.int64)
    return ids, mask


# --------------------------------------------------------------- loading files


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
    return {key: _token_name(config.get(key, special_map.get(key)), default)
            for key, default in _SPECIAL_DEFAULTS.items()}


def _check_tokenizer_json(backend, config: dict, special: dict[str, str], where: str) -> None:
    """Refuse a tokenizer.json that transformers 4 and 5 would read differently.

    transformers 5 builds a BERT tokenizer's normalizer, pre-tokenizer and WordPiece
    limit itself (from tokenizer_config.json, defaults where a key is missing) and takes
    only the vocabulary and post-processor from tokenizer.json; transformers 4 loaded
    tokenizer.json and rebuilt the normalizer when tokenizer_config.json (or its
    defaults) disagreed. Where the two files agree, all of them give the same tokens.
    """
    def refuse(what: str) -> None:
        raise ValueError(f"{where}: {what}; Hugging Face's BertTokenizer would not follow {TOKENIZER_JSON} "
                         "there: re-save the tokenizer (save_pretrained) so that the files agree")

    normalizer = backend.normalizer
    if type(normalizer).__name__ != "BertNormalizer":
        refuse(f"{TOKENIZER_JSON} has a {type(normalizer).__name__} normalizer, not BertNormalizer")
    expected = {"do_lower_case": True, "strip_accents": None, "tokenize_chinese_chars": True}
    for key, attribute in (("do_lower_case", "lowercase"), ("strip_accents", "strip_accents"),
                           ("tokenize_chinese_chars", "handle_chinese_chars")):
        want = config.get(key, expected[key])
        if want != getattr(normalizer, attribute):
            source = f"{TOKENIZER_CONFIG} has" if key in config else "the default (no key in tokenizer_config.json) is"
            refuse(f"{source} {key}={want!r} but {TOKENIZER_JSON}'s normalizer has "
                   f"{attribute}={getattr(normalizer, attribute)!r}")
    if not normalizer.clean_text:
        refuse(f"{TOKENIZER_JSON}'s normalizer has clean_text=false")
    if type(backend.pre_tokenizer).__name__ != "BertPreTokenizer":
        refuse(f"{TOKENIZER_JSON} has a {type(backend.pre_tokenizer).__name__} pre-tokenizer, not BertPreTokenizer")
    model = backend.model
    if type(model).__name__ != "WordPiece":
        refuse(f"{TOKENIZER_JSON} has a {type(model).__name__} model, not WordPiece")
    if model.max_input_chars_per_word != _MAX_INPUT_CHARS_PER_WORD:
        refuse(f"{TOKENIZER_JSON} has max_input_chars_per_word={model.max_input_chars_per_word}, "
               f"not {_MAX_INPUT_CHARS_PER_WORD}")
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
    from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers, processors
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
                raise ValueError(f"{directory}: {VOCAB_TXT} and {TOKENIZER_JSON} hold different vocabularies; "
                                 "they must come from the same tokenizer")
        return backend, special
    if not os.path.isfile(vocab_path):
        raise ValueError(f"{directory}: no {VOCAB_TXT} (nor {TOKENIZER_JSON}); the preprocess model needs the "
                         "BERT tokenizer files in its version folder")
    vocab = load_vocab(vocab_path)
    for key in ("unk_token", "cls_token", "sep_token", "pad_token"):
        if special[key] not in vocab:
            raise ValueError(f"{vocab_path}: no {special[key]} token ({key}); is this a BERT vocabulary?")
    backend = Tokenizer(WordPiece(vocab, unk_token=special["unk_token"],
                                  max_input_chars_per_word=_MAX_INPUT_CHARS_PER_WORD))
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
    backend.add_special_tokens([AddedToken(special[key], special=True, normalized=False)
                                for key in ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")])
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
            raise ValueError(f"{directory}: the tokenizer's vocabulary ids are not 0..{len(tokens) - 1}; "
                             f"it cannot be written as {VOCAB_TXT}")
        with open(vocab_path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write("".join(t + "\n" for t in tokens))
    WordPieceTokenizer.from_directory(directory)  # check that it loads (and that the files agree)
    return [name for name in TOKENIZER_FILES if os.path.isfile(os.path.join(directory, name))]


# ------------------------------------------------------------------- tokenizer


def _device_request(xp, device) -> tuple[bool, int | None]:
    """(GPU wanted, device id or None for the current one) from `xp` / `device`."""
    gpu_xp = xp is not None and getattr(xp, "__name__", "") == "cupy"
    if xp is not None and not gpu_xp and xp is not np:
        raise ValueError(f"xp must be numpy or cupy, got {xp!r}")
    if device is None:
        return gpu_xp, None
    if hasattr(device, "is_gpu"):  # readability_triton.serving.Device
        gpu, device_id = bool(device.is_gpu), int(getattr(device, "device_id", 0))
    elif isinstance(device, int) and not isinstance(device, bool):
        gpu, device_id = True, device
    elif isinstance(device, str) and device.lower() == "cpu":
        gpu, device_id = False, None
    elif isinstance(device, str) and re.fullmatch(r"(gpu|cuda)(:\d+)?", device.lower()):
        gpu = True
        device_id = int(device.split(":")[1]) if ":" in device else None
    else:
        raise ValueError(f"device must be 'cpu', 'gpu', 'cuda[:N]', a GPU index or a serving.Device, got {device!r}")
    if xp is not None and gpu != gpu_xp:
        raise ValueError(f"xp={getattr(xp, '__name__', xp)} contradicts device={device!r}")
    return gpu, device_id


class WordPieceTokenizer:
    """BERT WordPiece tokenization to fixed-length int64 arrays (see the module docstring)."""

    def __init__(self, backend, max_length: int = contracts.DEFAULT_MAX_LENGTH,
                 special_tokens: dict[str, str] | None = None, directory: str | None = None):
        from tokenizers import Tokenizer

        if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 2:
            raise ValueError(f"max_length must be an integer of at least 2 ([CLS] and [SEP]), got {max_length!r}")
        self.max_length = int(max_length)
        self.directory = directory
        self.special_tokens = dict(_SPECIAL_DEFAULTS, **(special_tokens or {}))
        # A private copy: truncation and padding are ours to set.
        self.backend = Tokenizer.from_str(backend.to_str())
        self.backend.no_padding()
        self.backend.enable_truncation(self.max_length)
        pad_id = self.backend.token_to_id(self.special_tokens["pad_token"])
        if pad_id is None:
            raise ValueError(f"the vocabulary has no padding token {self.special_tokens['pad_token']}")
        self.pad_id = int(pad_id)
        self._device_paths: dict[int, object] = {}
        self._device_reasons: dict[int, str] = {}

    @classmethod
    def from_directory(cls, path: str, max_length: int = contracts.DEFAULT_MAX_LENGTH) -> "WordPieceTokenizer":
        """The tokenizer in folder `path` (`vocab.txt`, optionally `tokenizer.json` & co.)."""
        backend, special = load_backend(os.fspath(path))
        return cls(backend, max_length, special, directory=os.fspath(path))

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    # ---------------------------------------------------------------- encode

    def encode(self, texts, xp=None, device=None):
        """`(input_ids, attention_mask)`, int64 `(len(texts), max_length)`.

        `texts`: `str` or UTF-8 `bytes` items. CPU (NumPy) by default; `xp=cupy` or
        `device="gpu"` / `"cuda:N"` / a GPU index / a GPU `serving.Device` gives CuPy
        arrays from the GPU path (or, where it is unavailable, from the CPU path).
        """
        texts = _as_list(texts)
        gpu, device_id = _device_request(xp, device)
        if not gpu:
            return self.encode_cpu(texts)
        try:
            import cupy
        except ImportError as exc:
            raise RuntimeError("GPU tokenization was requested but CuPy is not importable: install "
                               "readability-triton[gpu] or encode on the CPU") from exc
        if device_id is None:
            device_id = cupy.cuda.Device().id
        path = self.device_path(device_id)
        with cupy.cuda.Device(device_id):
            if path is None:
                ids, mask = self.encode_cpu(texts)
                return cupy.asarray(ids), cupy.asarray(mask)
            return path.encode(texts)

    def encode_cpu(self, texts):
        """The CPU path: one `tokenizers` batch call, packed with NumPy."""
        texts = _as_list(texts)
        strings = decode_texts(texts)
        encode_batch = getattr(self.backend, "encode_batch_fast", None) or self.backend.encode_batch  # < 0.20
        try:
            encodings = encode_batch(strings)
        except Exception:  # noqa: BLE001 - e.g. a str with a lone surrogate: name it
            error = _decode_error(strings)
            if error is None:
                raise
            raise error from None
        return pad_rows([e.ids for e in encodings], self.max_length, self.pad_id)

    # ---------------------------------------------------------------- GPU path

    def gpu_support(self, device_id: int = 0) -> tuple[bool, str]:
        """Whether `encode(..., device=device_id)` runs on cuDF, and why (not)."""
        path = self.device_path(device_id)
        if path is None:
            return False, self._device_reasons[device_id]
        return True, self._device_reasons[device_id]

    def device_path(self, device_id: int = 0):
        """The `DevicePath` on GPU `device_id`, built on first use; None where unavailable."""
        if device_id in self._device_paths:
            return self._device_paths[device_id]
        path, reason = None, None
        incompatible = device_incompatibility(self.backend)
        if incompatible:
            reason = f"the tokenizer cannot run on cuDF: {incompatible}"
        else:
            from . import _tokenization_gpu

            ok, why = _tokenization_gpu.cudf_support()
            if not ok:
                reason = why
            else:
                try:
                    engine = _tokenization_gpu.CudfEngine(device_vocabulary(self.backend),
                                                          do_lower=bool(self.backend.normalizer.lowercase),
                                                          device_id=device_id)
                    path = DevicePath(self, engine, _tokenization_gpu.cupy_module())
                    reason = f"{why}; {path.describe()}"
                except Exception as exc:  # noqa: BLE001 - any failure means: use the CPU path
                    path, reason = None, f"building the cuDF tokenizer failed ({type(exc).__name__}: {exc})"
        if path is None:
            log.warning("GPU %d: WordPiece on the CPU (tokenizers), results uploaded to the GPU: %s",
                        device_id, reason)
        self._device_paths[device_id] = path
        self._device_reasons[device_id] = reason
        return path


# ------------------------------------------------------------- device path


def device_incompatibility(backend) -> str | None:
    """Why cuDF's normalizer + WordPiece cannot reproduce `backend` at all (None: it can,
    up to the per-text routing of `DevicePath`)."""
    if type(backend.normalizer).__name__ != "BertNormalizer":
        return f"normalizer {type(backend.normalizer).__name__} (only BertNormalizer)"
    if type(backend.pre_tokenizer).__name__ != "BertPreTokenizer":
        return f"pre-tokenizer {type(backend.pre_tokenizer).__name__} (only BertPreTokenizer)"
    model = backend.model
    if type(model).__name__ != "WordPiece":
        return f"model {type(model).__name__} (only WordPiece)"
    if model.continuing_subword_prefix != "##":
        return f"continuing-subword prefix {model.continuing_subword_prefix!r} (cuDF uses '##')"
    vocab = backend.get_vocab(with_added_tokens=False)
    if model.unk_token not in vocab:
        return f"unknown token {model.unk_token!r} not in the vocabulary"
    if model.unk_token != "[UNK]" and not (model.unk_token == "[unk]" and "[UNK]" not in vocab):
        return f"unknown token {model.unk_token!r} (cuDF looks up [UNK], then [unk])"
    if sorted(vocab.values()) != list(range(len(vocab))):
        return "vocabulary ids are not 0..n-1"
    if any(t.normalized for t in backend.get_added_tokens_decoder().values()):
        return "an added token is matched after normalization (normalized=true)"
    if backend.num_special_tokens_to_add(False) != 2:
        return "the post-processor does not add exactly two special tokens"
    empty = backend.encode("", add_special_tokens=True).ids
    if len(empty) != 2:
        return "the post-processor is not [CLS] $A [SEP]"
    for probe in ("hello world", "unaffable, \u00e9t\u00e9!"):
        body = backend.encode(probe, add_special_tokens=False).ids
        if backend.encode(probe, add_special_tokens=True).ids != [empty[0], *body, empty[1]]:
            return "the post-processor is not [CLS] $A [SEP]"
    return None


def device_vocabulary(backend) -> list[str]:
    """The WordPiece vocabulary as a list, index = id (cuDF's token ids are row numbers)."""
    vocab = backend.get_vocab(with_added_tokens=False)
    return sorted(vocab, key=vocab.__getitem__)


def decode_non_ascii(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Code points and byte positions of the multi-byte characters of valid UTF-8 `buf`."""
    lead = np.flatnonzero(buf >= 0xC0)
    b0 = buf[lead].astype(np.int64)
    b1 = buf.take(lead + 1, mode="clip").astype(np.int64) & 0x3F
    b2 = buf.take(lead + 2, mode="clip").astype(np.int64) & 0x3F
    b3 = buf.take(lead + 3, mode="clip").astype(np.int64) & 0x3F
    cps = np.where(b0 < 0xE0, ((b0 & 0x1F) << 6) | b1,
                   np.where(b0 < 0xF0, ((b0 & 0x0F) << 12) | (b1 << 6) | b2,
                            ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3))
    return cps, lead


_MARKER = "qzq"


def _split_groups(words: Iterable[str]) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    for word in words:
        if word == _MARKER:
            groups.append([])
        else:
            groups[-1].append(word)
    return groups


def _nfd_reorders(char: str) -> bool:
    """Whether NFD could move a mark of `char` that is not removed (canonical reordering)."""
    return any(unicodedata.combining(d) and unicodedata.category(d) != "Mn"
               for d in unicodedata.normalize("NFD", char))


def reference_words(backend) -> Callable[[str], list[str]]:
    """Hugging Face's words of a text: `backend`'s normalizer, then its pre-tokenizer."""
    def words(text: str) -> list[str]:
        normalized = backend.normalizer.normalize_str(text)
        return [word for word, _ in backend.pre_tokenizer.pre_tokenize_str(normalized)]

    return words


def calibrate_codepoints(codepoints, reference_words: Callable[[str], list[str]],
                         device_normalize: Callable[[str], str], chunk: int = 20000) -> np.ndarray:
    """Which code points the device normalizer handles exactly as the reference.

    For each code point c, the probe `x<c>x` is split into words by the reference
    (`reference_words`: Hugging Face's normalizer + pre-tokenizer) and by the device
    (`device_normalize`, then split on ' ' as cuDF's WordPiece does). c is safe when the
    words are equal, the normalized c takes no more UTF-8 bytes than c (so word-length
    limits hold), and NFD cannot reorder a kept mark of c. Both normalizers map one code
    point at a time, so equality on every code point of a text gives equal words for the
    whole text. Probes are joined with a marker word and normalized in a few calls.
    """
    codepoints = np.asarray(codepoints, dtype=np.int64)
    safe = np.zeros(codepoints.shape[0], dtype=bool)
    for begin in range(0, codepoints.shape[0], chunk):
        part = codepoints[begin:begin + chunk]
        chars = [chr(int(c)) for c in part]
        text = f" {_MARKER} ".join(f"x{ch}x" for ch in chars)
        reference = _split_groups(reference_words(text))
        device = _split_groups(w for w in device_normalize(text).split(" ") if w)
        if len(reference) != len(chars) or len(device) != len(chars):
            continue  # a probe ate the marker: leave the whole chunk on the CPU path
        for i, ch in enumerate(chars):
            ref = reference[i]
            safe[begin + i] = (ref == device[i]
                               and len("".join(ref).encode("utf-8")) - 2 <= len(ch.encode("utf-8"))
                               and not _nfd_reorders(ch))
    return safe


#: Ranges checked when a device path is built (ASCII, Latin-1, Latin Extended-A/B,
#: General Punctuation, currency symbols); other code points are checked on first sight.
CALIBRATE_AT_START = ((0x0000, 0x0250), (0x2000, 0x2070), (0x20A0, 0x20C1))
_UNKNOWN, _SAFE, _UNSAFE = 0, 1, 2


class DevicePath:
    """Tokenization on a device engine (cuDF), exact by routing: rows it cannot match
    are computed by the CPU path and written into the device result.

    `engine` provides `max_word_bytes` (words of this many bytes or more become the
    unknown token), `normalize_text(str) -> str` and `wordpiece(data, starts, max_words)
    -> (values, counts)` (ragged ids as `xp` arrays) over the strings `data[starts[i]:
    starts[i+1]]`.
    """

    def __init__(self, tokenizer: WordPieceTokenizer, engine, xp):
        backend = tokenizer.backend
        self.tokenizer = tokenizer
        self.engine = engine
        self.xp = xp
        empty = backend.encode("", add_special_tokens=True).ids
        self.cls_id, self.sep_id = int(empty[0]), int(empty[1])
        self.max_run = min(int(backend.model.max_input_chars_per_word), int(engine.max_word_bytes) - 1)
        self._long_run = re.compile(rb"[^ \t\n\r]{%d,}" % (self.max_run + 1))
        added = sorted({t.content.encode("utf-8") for t in backend.get_added_tokens_decoder().values()},
                       key=len, reverse=True)
        self._added = re.compile(b"|".join(map(re.escape, added))) if added else None
        self._state = np.zeros(0x110000, dtype=np.int8)
        self._state[0xD800:0xE000] = _UNSAFE
        self.rows_device = 0
        self.rows_cpu = 0
        self.last_routed = np.zeros(0, dtype=np.int64)
        self.calibrate(np.concatenate([np.arange(a, b) for a, b in CALIBRATE_AT_START]))
        ascii_state = self._state[:128]
        self._ascii_unsafe = np.zeros(256, dtype=bool)
        self._ascii_unsafe[:128] = ascii_state != _SAFE

    def calibrate(self, codepoints) -> None:
        codepoints = np.asarray(codepoints, dtype=np.int64)
        codepoints = codepoints[self._state[codepoints] == _UNKNOWN]
        if codepoints.size == 0:
            return
        try:
            safe = calibrate_codepoints(codepoints, reference_words(self.tokenizer.backend),
                                        self.engine.normalize_text)
        except Exception as exc:  # noqa: BLE001 - keep serving: these go to the CPU path
            log.warning("checking %d code points against cuDF failed (%s); texts with them use the CPU path",
                        codepoints.size, exc)
            safe = np.zeros(codepoints.shape[0], dtype=bool)
        self._state[codepoints] = np.where(safe, _SAFE, _UNSAFE)

    def safe_codepoints(self) -> np.ndarray:
        """The code points checked and found safe so far."""
        return np.flatnonzero(self._state == _SAFE)

    def unsafe_codepoints(self) -> np.ndarray:
        """The code points checked and found to differ (surrogates excluded)."""
        unsafe = self._state == _UNSAFE
        unsafe[0xD800:0xE000] = False
        return np.flatnonzero(unsafe)

    def describe(self) -> str:
        unsafe = self.unsafe_codepoints()
        shown = ", ".join(f"U+{int(c):04X}" for c in unsafe[:12]) + (", ..." if unsafe.size > 12 else "")
        return (f"{self.safe_codepoints().size} code points checked equal to Hugging Face, "
                f"{unsafe.size} differ and route their texts to the CPU path" + (f" ({shown})" if shown else ""))

    def route(self, data: bytes, starts: np.ndarray) -> np.ndarray:
        """Boolean per string: True where the engine cannot match the CPU path."""
        n = starts.shape[0] - 1
        to_cpu = np.zeros(n, dtype=bool)
        buf = np.frombuffer(data, dtype=np.uint8)
        positions = []
        cps, lead = decode_non_ascii(buf)
        if cps.size:
            unknown = cps[self._state[cps] == _UNKNOWN]
            if unknown.size:
                self.calibrate(np.unique(unknown))
            positions.append(lead[self._state[cps] != _SAFE])
        if self._ascii_unsafe.any():
            positions.append(np.flatnonzero(self._ascii_unsafe[buf]))
        for pattern in (self._long_run, self._added):
            if pattern is not None:
                found = [m.start() for m in pattern.finditer(data)]
                if found:
                    positions.append(np.asarray(found, dtype=np.int64))
        if positions:
            hits = np.concatenate(positions)
            if hits.size:
                to_cpu[np.searchsorted(starts, hits, side="right") - 1] = True
        return to_cpu

    def encode(self, texts):
        xp = self.xp
        rows = utf8_rows(_as_list(texts))
        n = len(rows)
        length = self.tokenizer.max_length
        if n == 0:
            return xp.zeros((0, length), dtype=xp.int64), xp.zeros((0, length), dtype=xp.int64)
        # Each string is a text plus "\n": the separator keeps runs and matches within a
        # text and normalizes to a trailing space, which adds no token.
        data = b"\n".join(rows) + b"\n"
        sizes = np.fromiter(map(len, rows), dtype=np.int64, count=n) + 1
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        to_cpu = self.route(data, starts)
        routed = np.flatnonzero(to_cpu)
        if routed.size == n:
            ids, mask = self.tokenizer.encode_cpu(rows)
            ids, mask = xp.asarray(ids), xp.asarray(mask)
        else:
            values, counts = self.engine.wordpiece(data, starts, max_words=length - 2)
            ids, mask = add_special_tokens(values, counts, length, self.cls_id, self.sep_id,
                                           self.tokenizer.pad_id, xp)
            if routed.size:
                cpu_ids, cpu_mask = self.tokenizer.encode_cpu([rows[i] for i in routed])
                index = xp.asarray(routed)
                ids[index] = xp.asarray(cpu_ids)
                mask[index] = xp.asarray(cpu_mask)
        self.rows_cpu += int(routed.size)
        self.rows_device += n - int(routed.size)
        self.last_routed = routed
        return ids, mask
