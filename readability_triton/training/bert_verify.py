"""How an export is verified against eager PyTorch before anything is written: random
token ids with [CLS]/[SEP] and padding at several batch sizes, real texts' tokens, the
tolerances, and the staging folder the file is written and checked in before it replaces
the target (`staged`).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile

import numpy as np
import torch

from ..errors import ExportError

#: Texts whose real token ids the export is checked on too (with padding, in one batch).
SAMPLE_TEXTS = (
    "The cat sat on the mat.",
    "Photosynthesis converts light energy into chemical energy, which the Calvin cycle then uses.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor against any "
    "liability, howsoever arising, consequent upon the lessee's failure to observe covenants.",
    "Tom ran. He was late!",
)

#: Largest |traced - eager| accepted for a float32 export.
FP32_TOLERANCE = 1e-4
#: Largest |traced - eager| accepted for a float16 export (both run in float16).
FP16_TOLERANCE = 1e-2
#: Batch sizes the traced module is checked at (it is traced at batch size 2).
VERIFY_BATCH_SIZES = (1, 2, 5, 8)


def verification_inputs(batch_size: int, max_length: int, vocab_size: int, ids: dict[str, int], generator):
    """Random token ids with [CLS]/[SEP], a full-length row, a 2-token row and random
    padding in between."""
    low = min(1000, max(vocab_size // 2, 1))
    tokens = torch.randint(low, vocab_size, (batch_size, max_length), generator=generator, dtype=torch.int64)
    lengths = torch.randint(2, max_length + 1, (batch_size,), generator=generator)
    lengths[0] = max_length
    if batch_size > 1:
        lengths[-1] = 2
    positions = torch.arange(max_length).unsqueeze(0)
    mask = (positions < lengths.unsqueeze(1)).to(torch.int64)
    tokens[:, 0] = ids["cls_token"]
    tokens[torch.arange(batch_size), lengths - 1] = ids["sep_token"]
    tokens = torch.where(mask.bool(), tokens, torch.full_like(tokens, ids["pad_token"]))
    return tokens, mask


def compare(
    candidate,
    reference,
    max_length: int,
    vocab_size: int,
    ids: dict[str, int],
    batch_sizes=VERIFY_BATCH_SIZES,
    seed: int = 1,
    device=None,
) -> dict[int, float]:
    """max |candidate - reference| per batch size, on the same random batches."""
    generator = torch.Generator().manual_seed(seed)
    diffs = {}
    with torch.no_grad():
        for batch_size in batch_sizes:
            tokens, mask = verification_inputs(batch_size, max_length, vocab_size, ids, generator)
            if device is not None:
                tokens, mask = tokens.to(device), mask.to(device)
            got = candidate(tokens, mask)
            want = reference(tokens, mask)
            if tuple(got.shape) != (batch_size, 1) or got.dtype != torch.float32:
                raise ExportError(
                    f"the traced module returns {got.dtype} {tuple(got.shape)} for a batch of "
                    f"{batch_size}; the bert contract is float32 [{batch_size}, 1]"
                )
            diff = (got.float() - want.float()).abs().max().item()
            diffs[batch_size] = diff if math.isfinite(diff) else float("inf")
    return diffs


def device_constants(traced) -> list[str]:
    """Graph lines that pin a device (such a module only runs on that device)."""
    found = []
    for line in str(traced.inlined_graph).splitlines():
        if "prim::Constant" in line and ('value="cpu"' in line or 'value="cuda' in line):
            found.append(line.strip())
    return found


def real_inputs(tokenizer, texts=SAMPLE_TEXTS):
    """Token ids and mask of `texts` (padded to the tokenizer's max_length), as torch tensors."""
    ids, mask = tokenizer.encode(list(texts))
    return torch.as_tensor(np.asarray(ids, dtype=np.int64)), torch.as_tensor(np.asarray(mask, dtype=np.int64))


@contextlib.contextmanager
def staged(out_path: str):
    """A temporary path beside `out_path` (same name, in a staging folder of the same
    directory) to write and check the file in; `os.replace` it onto `out_path` once good.
    The staging folder is removed whatever happens."""
    directory = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".export-", dir=directory)
    try:
        yield os.path.join(staging, os.path.basename(out_path))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
