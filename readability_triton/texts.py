"""Texts in, as valid UTF-8: the one validation every part uses.

- `as_utf8(texts)`: the texts (`str` or UTF-8 `bytes`) as valid UTF-8 `bytes`; a text that
  is not (invalid bytes, a `str` holding a lone surrogate) is a `RequestError` (a `ValueError`) naming
  its index, a text of another type a `TypeError`;
- `as_str(texts)`: the same texts as `str`;
- `first_invalid_utf8(rows)`: the index of the first of `rows` (bytes) that is not valid
  UTF-8, with one decode for all of them;
- `to_rows(texts)`: texts as the `[n, 1]` object array of a BYTES tensor (the `validate`
  step's runner: it passes what it accepted on unchanged).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .errors import RequestError


def as_list(texts) -> list:
    if isinstance(texts, (str, bytes, bytearray)):
        raise TypeError("expected a sequence of texts, not a single text: wrap it in a list")
    return list(texts)


def culprit(texts: Sequence) -> Exception:
    """The error naming the first text that is not a valid str / UTF-8 bytes."""
    for index, text in enumerate(texts):
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                return RequestError(
                    f"text {index} is not valid Unicode: it holds the lone surrogate "
                    f"U+{ord(text[err.start]):04X} at {err.start}, which has no UTF-8 form"
                )
        elif isinstance(text, (bytes, bytearray, memoryview)):
            try:
                bytes(text).decode("utf-8")
            except UnicodeDecodeError as err:
                return RequestError(f"text {index} is not valid UTF-8 ({err.reason} at byte {err.start})")
        else:
            return TypeError(f"text {index} is a {type(text).__name__}; texts must be str or UTF-8 bytes")
    return RequestError("the texts are not valid UTF-8")  # not reached


def first_invalid_utf8(rows: Sequence[bytes]) -> int | None:
    """Index of the first row that is not valid UTF-8, or None; one decode for all.

    Rows are joined with a newline: an ASCII byte is never part of a multi-byte sequence,
    so a truncated sequence at the end of one row, or a stray continuation byte at the
    start of the next, is still an error and cannot merge into a valid one.
    """
    if not rows:
        return None
    joined = b"\n".join(rows)
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError as err:
        ends = np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)) + 1)
        return int(np.searchsorted(ends, err.start, side="right"))
    return None


def as_utf8(texts) -> list[bytes]:
    """`texts` as valid UTF-8 `bytes` (see the module doc)."""
    texts = as_list(texts)
    kinds = set(map(type, texts))
    if not kinds <= {str, bytes, bytearray, memoryview}:
        raise culprit(texts)
    try:
        if kinds <= {str}:
            return [text.encode("utf-8") for text in texts]
        if kinds <= {bytes}:
            if first_invalid_utf8(texts) is None:
                return texts
            raise culprit(texts)
        rows = [text.encode("utf-8") if isinstance(text, str) else bytes(text) for text in texts]
    except (UnicodeEncodeError, TypeError):
        raise culprit(texts) from None
    if first_invalid_utf8(rows) is not None:
        raise culprit(texts)
    return rows


def as_str(texts) -> list[str]:
    """`texts` as `str`, UTF-8 bytes decoded (see the module doc)."""
    texts = as_list(texts)
    if not set(map(type, texts)) <= {str, bytes, bytearray, memoryview}:
        raise culprit(texts)
    try:
        return [text if isinstance(text, str) else str(text, "utf-8") for text in texts]
    except (UnicodeDecodeError, TypeError):
        raise culprit(texts) from None


def to_rows(texts) -> np.ndarray:
    """`texts` as the `[n, 1]` object array of a BYTES tensor."""
    rows = np.empty((len(texts), 1), dtype=np.object_)
    rows[:, 0] = list(texts)
    return rows


class TextRows:
    """`validate`'s runner: the texts its reading accepted, passed on unchanged as the
    `[n, 1]` BYTES rows of VALID_TEXT."""

    def describe(self) -> str:
        return "passes every accepted text on unchanged (VALID_TEXT)"

    def __call__(self, texts) -> np.ndarray:
        return to_rows(texts)
