"""Token-id rows to the fixed-length arrays of the `preprocess` contract: `[CLS] ids [SEP]`,
truncated to `max_length`, padded with `[PAD]`, and the attention mask. `pad_rows` packs
the CPU path's rows with NumPy; `add_special_tokens` does it on NumPy or CuPy for the GPU
path's ragged ids, without a host synchronisation.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np


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


# ------------------------------------------------------------------- tokenizer
