"""The GPU path's exactness by routing: texts the device engine (cuDF, or the CuPy array
engine where cuDF is missing) cannot match exactly are tokenized by the CPU path and
written into the device result.

Routed to the CPU path:

* texts holding an added token verbatim (`[CLS]`, `[SEP]`, `[PAD]`, `[UNK]`, `[MASK]`):
  Hugging Face matches them before normalizing, cuDF splits them;
* texts with a run of more than 100 bytes without ASCII whitespace (Hugging Face turns a
  word over `max_input_chars_per_word` = 100 characters into `[UNK]`; cuDF only words of
  200 bytes or more);
* texts with a code point whose cuDF normalization differs from Hugging Face's
  BertNormalizer + BertPreTokenizer. cuDF's normalizer is a fixed per-code-point table,
  so this is measured, not assumed: each code point is checked once (the common ranges
  when the path is built, any other on first sight) by normalizing `x<c>x` both ways and
  comparing the words (`calibrate_codepoints`).
"""

from __future__ import annotations

import logging
import re
import unicodedata
from typing import Callable, Iterable

import numpy as np

from ..texts import as_list, as_utf8
from .arrays import add_special_tokens

log = logging.getLogger(__name__)


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
    # The probes see the post-processor alone: a copy without the truncation and padding the
    # tokenizer was set up with (max_length 2 truncated "hello world" to [CLS] [SEP]).
    whole = type(backend).from_str(backend.to_str())
    whole.no_truncation()
    whole.no_padding()
    empty = whole.encode("", add_special_tokens=True).ids
    if len(empty) != 2:
        return "the post-processor is not [CLS] $A [SEP]"
    for probe in ("hello world", "unaffable, \u00e9t\u00e9!"):
        body = whole.encode(probe, add_special_tokens=False).ids
        if whole.encode(probe, add_special_tokens=True).ids != [empty[0], *body, empty[1]]:
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
    cps = np.where(
        b0 < 0xE0,
        ((b0 & 0x1F) << 6) | b1,
        np.where(b0 < 0xF0, ((b0 & 0x0F) << 12) | (b1 << 6) | b2, ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3),
    )
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
    return any(unicodedata.combining(d) and unicodedata.category(d) != "Mn" for d in unicodedata.normalize("NFD", char))


def reference_words(backend) -> Callable[[str], list[str]]:
    """Hugging Face's words of a text: `backend`'s normalizer, then its pre-tokenizer."""

    def words(text: str) -> list[str]:
        normalized = backend.normalizer.normalize_str(text)
        return [word for word, _ in backend.pre_tokenizer.pre_tokenize_str(normalized)]

    return words


def calibrate_codepoints(
    codepoints, reference_words: Callable[[str], list[str]], device_normalize: Callable[[str], str], chunk: int = 20000
) -> np.ndarray:
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
        part = codepoints[begin : begin + chunk]
        chars = [chr(int(c)) for c in part]
        text = f" {_MARKER} ".join(f"x{ch}x" for ch in chars)
        reference = _split_groups(reference_words(text))
        device = _split_groups(w for w in device_normalize(text).split(" ") if w)
        if len(reference) != len(chars) or len(device) != len(chars):
            continue  # a probe ate the marker: leave the whole chunk on the CPU path
        for i, ch in enumerate(chars):
            ref = reference[i]
            safe[begin + i] = (
                ref == device[i]
                and len("".join(ref).encode("utf-8")) - 2 <= len(ch.encode("utf-8"))
                and not _nfd_reorders(ch)
            )
    return safe


#: Ranges checked when a device path is built (ASCII, Latin-1, Latin Extended-A/B,
#: General Punctuation, currency symbols); other code points are checked on first sight.
CALIBRATE_AT_START = ((0x0000, 0x0250), (0x2000, 0x2070), (0x20A0, 0x20C1))
_UNKNOWN, _SAFE, _UNSAFE = 0, 1, 2


_BLANK = np.zeros(256, dtype=bool)
_BLANK[[ord(c) for c in " \t\n\r"]] = True


def long_runs(buf: np.ndarray, longest: int) -> np.ndarray:
    """Where each run of more than `longest` bytes without ' ', \\t, \\n or \\r starts in
    `buf` (uint8): the gaps between blanks (bytes up to 32, then the four kept)."""
    low = np.flatnonzero(buf <= 32)
    blanks = low[_BLANK[buf[low]]]
    bounds = np.empty(blanks.shape[0] + 2, dtype=np.int64)
    bounds[0], bounds[1:-1], bounds[-1] = -1, blanks, buf.shape[0]
    long = np.flatnonzero(np.diff(bounds) > longest + 1)
    return bounds[long] + 1


class DevicePath:
    """Tokenization on a device engine (cuDF), exact by routing: rows it cannot match
    are computed by the CPU path and written into the device result.

    `engine` provides `max_word_bytes` (words of this many bytes or more become the
    unknown token), `normalize_text(str) -> str` and `wordpiece(data, starts, max_words)
    -> (values, counts)` (ragged ids as `xp` arrays) over the strings `data[starts[i]:
    starts[i+1]]`.
    """

    def __init__(self, tokenizer, engine, xp):
        backend = tokenizer.backend
        self.tokenizer = tokenizer
        self.engine = engine
        self.xp = xp
        empty = backend.encode("", add_special_tokens=True).ids
        self.cls_id, self.sep_id = int(empty[0]), int(empty[1])
        self.max_run = min(int(backend.model.max_input_chars_per_word), int(engine.max_word_bytes) - 1)
        added = sorted(
            {t.content.encode("utf-8") for t in backend.get_added_tokens_decoder().values()}, key=len, reverse=True
        )
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
            safe = calibrate_codepoints(codepoints, reference_words(self.tokenizer.backend), self.engine.normalize_text)
        except Exception as exc:  # noqa: BLE001 - keep serving: these go to the CPU path
            log.warning(
                "checking %d code points against cuDF failed (%s); texts with them use the CPU path",
                codepoints.size,
                exc,
            )
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
        return (
            f"{self.safe_codepoints().size} code points checked equal to Hugging Face, "
            f"{unsafe.size} differ and route their texts to the CPU path" + (f" ({shown})" if shown else "")
        )

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
        positions.append(long_runs(buf, self.max_run))
        if self._added is not None:
            found = [m.start() for m in self._added.finditer(data)]
            if found:
                positions.append(np.asarray(found, dtype=np.int64))
        if positions:
            hits = np.concatenate(positions)
            if hits.size:
                to_cpu[np.searchsorted(starts, hits, side="right") - 1] = True
        return to_cpu

    def encode(self, texts):
        xp = self.xp
        rows = as_utf8(as_list(texts))
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
        encode_rows = getattr(self.engine, "encode_rows", None)  # an engine that writes ids and mask itself
        if routed.size == n:
            ids, mask = self.tokenizer.encode_cpu(rows)
            ids, mask = xp.asarray(ids), xp.asarray(mask)
        elif encode_rows is not None:
            ids, mask = encode_rows(data, starts, to_cpu, length, self.cls_id, self.sep_id, self.tokenizer.pad_id)
            if routed.size:
                cpu_ids, cpu_mask = self.tokenizer.encode_cpu([rows[i] for i in routed])
                index = xp.asarray(routed)
                ids[index] = xp.asarray(cpu_ids)
                mask[index] = xp.asarray(cpu_mask)
        else:
            values, counts = self.engine.wordpiece(data, starts, max_words=length - 2)
            ids, mask = add_special_tokens(values, counts, length, self.cls_id, self.sep_id, self.tokenizer.pad_id, xp)
            take_rerouted = getattr(self.engine, "take_rerouted", None)  # rows the engine doubts
            if take_rerouted is not None:
                doubted = take_rerouted()
                if doubted.size:
                    to_cpu[doubted] = True
                    routed = np.flatnonzero(to_cpu)
            if routed.size:
                cpu_ids, cpu_mask = self.tokenizer.encode_cpu([rows[i] for i in routed])
                index = xp.asarray(routed)
                ids[index] = xp.asarray(cpu_ids)
                mask[index] = xp.asarray(cpu_mask)
        self.rows_cpu += int(routed.size)
        self.rows_device += n - int(routed.size)
        self.last_routed = routed
        return ids, mask
