"""BERT's sequence-length buckets: what preprocess cuts a request's token ids to.

BERT's work grows with the sequence length, and the padding after a text's last token is
pure waste (the attention mask hides it from every real token). preprocess therefore sends
each request's ids and mask cut to the smallest bucket that holds the request's longest
text, and the BERT runners run rows of one bucket together. Triton's dynamic batcher
batches only requests of equal shape, so a few fixed lengths, not each text's own, keep
requests of similar length batching together. `contracts.default_buckets` is the default
set; one bucket, the sequence length itself, is the padded route.

Array code here takes its array module as a parameter (NumPy or CuPy); lengths come to the
host once per batch (one small copy on a GPU instance).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import contracts as C
from .device import host


def real_lengths(mask, xp=np):
    """Per row, the column after its last real token (0 for a row without one): the width
    that drops only trailing padding."""
    if not mask.shape[1]:
        return xp.zeros(len(mask), dtype=xp.int64)
    last = mask.shape[1] - xp.argmax(mask[:, ::-1] != 0, axis=1)
    return xp.where((mask != 0).any(axis=1), last, 0)


def bucket_widths(lengths, buckets) -> np.ndarray:
    """Per row, the smallest bucket that holds `lengths` (host integers); a length past the
    largest bucket gets its own (the runner then runs it as it came)."""
    edges = np.asarray(buckets, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    where = np.searchsorted(edges, lengths, side="left")
    return np.where(where < len(edges), edges[np.minimum(where, len(edges) - 1)], lengths)


def describe_buckets(buckets) -> str:
    """How ids are cut, or rows run, in words (None: as they come)."""
    if buckets is None:
        return "rows as they come"
    if len(buckets) == 1:
        return f"padded to {buckets[0]} tokens"
    steps = {b - a for a, b in zip(buckets, buckets[1:])}
    if len(buckets) > 4 and len(steps) == 1:  # an even set: its ends and step
        return f"rows by bucket of {buckets[0]} to {buckets[-1]} tokens, {steps.pop()} apart"
    return f"rows by bucket of {', '.join(map(str, buckets))} tokens"


def fit_width(array, width: int, xp=np):
    """`array` (2-D) cut or zero-padded on the right to `width` columns."""
    have = array.shape[1]
    if have == width:
        return array
    if have > width:
        return array[:, :width]
    out = xp.zeros((array.shape[0], width), dtype=array.dtype)
    out[:, :have] = array
    return out


def bucket_groups(widths) -> list[tuple[int, np.ndarray]]:
    """(width, row indices) per bucket present in `widths` (host integers), narrowest first."""
    present = np.unique(widths)
    return [(int(width), np.flatnonzero(widths == width)) for width in present]


def by_bucket(ids, mask, buckets, run: Callable[[Any, Any], Any], xp=np):
    """`run(ids, mask)` once per bucket of the rows' real lengths, each group cut or padded
    to its bucket; the scores (`(n, 1)`) back in row order. `buckets` None: one run as given."""
    if buckets is None or not len(ids):
        return run(ids, mask)
    widths = bucket_widths(host(real_lengths(mask, xp)), buckets)
    groups = bucket_groups(widths)
    if len(groups) == 1:
        width = groups[0][0]
        return run(fit_width(ids, width, xp), fit_width(mask, width, xp))
    scores = None
    for width, rows in groups:  # one run per bucket: at most len(buckets) of them
        index = rows if xp is np else xp.asarray(rows)
        part = run(fit_width(ids[index], width, xp), fit_width(mask[index], width, xp))
        if scores is None:
            scores = xp.empty((len(ids), *part.shape[1:]), dtype=part.dtype)
        scores[index] = part
    return scores


def request_cutter(buckets, names=(C.INPUT_IDS, C.ATTENTION_MASK), mask_name: str = C.ATTENTION_MASK, xp=np):
    """preprocess's per-request step (`stub.responses.split`'s `per_request`): from the
    batch's outputs, a function that gives one request's rows with `names` cut to the
    smallest bucket that holds the request's longest text."""

    def per_request(outputs: dict[str, Any]):
        widths = bucket_widths(host(real_lengths(outputs[mask_name], xp)), buckets)

        def take(rows: slice) -> dict[str, Any]:
            width = int(widths[rows].max(initial=buckets[0]))
            return {name: array[rows, :width] if name in names else array[rows] for name, array in outputs.items()}

        return take

    return per_request
