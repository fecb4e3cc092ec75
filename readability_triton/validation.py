"""The checks every text gets before it is scored, in one place: the ensemble's first step
runs them on each request (`stub.requests.read_text_requests`; `featurize` as the serial
wiring's first step counts the words in its own pass, `NO_WORDS_AT`), the in-process
pipeline on the texts it is given (`pipeline.Pipeline`). A text fails when it is
over `max_text_bytes` bytes, is not valid UTF-8, or (`require_words`) holds no word.

A failed check is a `RequestError`: the client's input is at fault, and it is the only
error a model answers with INVALID_ARG (`triton.responses.run_batch`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .errors import RequestError
from .features import count_words
from .texts import as_utf8, first_invalid_utf8
from .triton_messages import IN_REQUEST

#: Why a text without words is refused.
NO_WORDS = "holds no words (it is empty, or only spaces, punctuation or control characters): there is nothing to score"
#: The same, for row {row} of a request (the first step's answer; the client reads its
#: place back, `triton_messages.refused_text`).
NO_WORDS_AT = "text {row}" + IN_REQUEST + " " + NO_WORDS


def size_and_encoding(rows: Sequence[bytes], max_text_bytes: int, where: str = "") -> str | None:
    """What is wrong with the first text of `rows` over `max_text_bytes` bytes or not valid
    UTF-8 (`where` follows "text N" in the message: a step's `triton_messages.IN_REQUEST`),
    or None."""
    if max(map(len, rows), default=0) > max_text_bytes:
        at = next(i for i, row in enumerate(rows) if len(row) > max_text_bytes)
        return (
            f"text {at}{where} has {len(rows[at])} bytes, over the limit of {max_text_bytes} (parameter MAX_TEXT_BYTES)"
        )
    bad = first_invalid_utf8(rows)
    if bad is not None:
        return f"text {bad}{where} is not valid UTF-8"
    return None


def without_words(groups: Sequence[Sequence[bytes]], where: str = "") -> list[str | None]:
    """For each group of texts (a request's), what is wrong with its first text that holds
    no word, or None; the words of all groups are counted in one pass."""
    words = count_words([row for rows in groups for row in rows])
    problems: list[str | None] = []
    start = 0
    for rows in groups:
        empty = np.flatnonzero(words[start : start + len(rows)] == 0)
        start += len(rows)
        problems.append(f"text {int(empty[0])}{where} {NO_WORDS}" if empty.size else None)
    return problems


def checked_texts(texts, max_text_bytes: int, require_words: bool = True) -> list[bytes]:
    """`texts` as UTF-8 bytes, or the `RequestError` the `validate` step would answer with."""
    rows = as_utf8(texts)
    problem = size_and_encoding(rows, max_text_bytes)
    if problem is None and require_words and rows:
        problem = without_words([rows])[0]
    if problem is not None:
        raise RequestError(problem)
    return rows
