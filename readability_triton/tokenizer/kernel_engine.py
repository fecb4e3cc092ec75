"""WordPiece on a GPU in one kernel (`kernels/wordpiece.cu`): the engine `routing.DevicePath`
uses on CuPy where cuDF is not installed.

`KernelEngine(vocabulary, do_lower, unk_token, xp)` uploads the array engine's character
tables and a hash table of the vocabulary's pieces once per device. `encode_rows` then
tokenizes a batch with one upload (the rows' offsets, which rows the routing sends to the CPU
path, and their bytes), one output array (ids and mask, as views) and one launch: one thread
per text normalizes, splits and matches it, and writes `[CLS] ids [SEP] [PAD]...` and the
mask itself. Every chosen piece is compared byte for byte with its vocabulary entry inside the
kernel, so a hash collision cannot change an id and no text has to be redone.

Exactness is the array engine's: the same character tables, the same greedy longest match,
so `normalize_text` (what the routing checks against Hugging Face) is the NumPy twin's; the
tests hold the kernel's CPU build equal to the twin and to Hugging Face.
"""

from __future__ import annotations

import numpy as np

from ..kernels.source import compiled
from .array_engine import MAX_WORD_BYTES, ArrayEngine, vocabulary_pieces

#: The hash unweakened (tests weaken it to force collisions).
ALL = (1 << 64) - 1
_PAD = bytes(8)


class KernelEngine:
    max_word_bytes = MAX_WORD_BYTES

    def __init__(self, vocabulary: list[str], do_lower: bool, unk_token: str = "[UNK]", xp=None, hash_mask=ALL):
        if xp is None:
            raise ValueError("KernelEngine runs on a GPU array module (CuPy): pass xp")
        self.xp = xp
        self.hash_mask = hash_mask
        found = vocabulary_pieces(vocabulary)
        if len({(piece, cont) for _, piece, cont in found}) != len(found):
            raise ValueError("the vocabulary holds a piece twice")
        ids, pieces, continuation = (list(column) for column in zip(*found))
        self.twin = ArrayEngine(vocabulary, do_lower, unk_token, xp=np)  # its normalize_text is the kernel's
        self.unk_id = self.twin.unk_id
        count = len(pieces)
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=count)
        at = np.zeros(count, dtype=np.int64)
        np.cumsum(lengths[:-1], out=at[1:])
        self.max_piece = int(min(lengths.max(), MAX_WORD_BYTES - 1))
        size = 1 << max(1, (2 * count).bit_length())
        self.slot_mask = size - 1
        kinds, replacements = self.twin.host_tables
        self.kinds, self.replacements = xp.asarray(kinds), xp.asarray(replacements)
        self.piece_bytes = xp.asarray(np.frombuffer(b"".join(pieces) + b"\0", dtype=np.uint8))
        self.piece_at = xp.asarray(at)
        self.piece_length = xp.asarray(lengths.astype(np.int32))
        self.piece_continuation = xp.asarray(np.asarray(continuation, dtype=np.uint8))
        self.piece_id = xp.asarray(np.asarray(ids, dtype=np.int32))
        self.piece_hash = xp.zeros(max(count, 1), dtype=xp.uint64)
        self.slots = xp.zeros(size, dtype=xp.int32)
        self.kernels = compiled(xp, "wordpiece.cu")
        self.kernels.launch(
            "build_pieces", count, self.piece_bytes, self.piece_at, self.piece_length, self.piece_continuation,
            count, hash_mask, self.piece_hash, self.slots, self.slot_mask,
        )  # fmt: skip
        xp.cuda.get_current_stream().synchronize()  # built before any stream uses it (once per device)

    def normalize_text(self, text: str) -> str:
        """What the kernel makes of `text` before splitting it into words: the twin's."""
        return self.twin.normalize_text(text)

    def encode_rows(self, data: bytes, starts: np.ndarray, skip: np.ndarray, length: int, cls_id, sep_id, pad_id):
        """(ids, mask), int64 `(n, length)` on the device, of the strings
        `data[starts[i]:starts[i+1]]` (each ending in a blank); rows where `skip` is True are
        left for the caller to fill."""
        xp = self.xp
        n = int(starts.shape[0]) - 1
        head = np.asarray(starts, dtype=np.int64).tobytes() + np.asarray(skip, dtype=np.uint8).tobytes()
        head += bytes(-len(head) % 8)
        blob = xp.asarray(np.frombuffer(b"".join([head, data, _PAD]), dtype=np.uint8))  # the only upload
        out = xp.empty(2 * n * length, dtype=xp.int64)
        ids, mask = out[: n * length].reshape(n, length), out[n * length :].reshape(n, length)
        self.kernels.launch(
            "wordpiece", n, blob[len(head) :], blob[: 8 * (n + 1)].view(xp.int64), blob[8 * (n + 1) : 9 * n + 8], n,
            self.kinds, self.replacements, self.slots, self.slot_mask, self.piece_bytes, self.piece_at,
            self.piece_length, self.piece_continuation, self.piece_hash, self.piece_id, self.max_piece,
            self.hash_mask, length, cls_id, sep_id, pad_id, self.unk_id, ids, mask,
        )  # fmt: skip
        return ids, mask
