"""BERT WordPiece tokenization, identical to Hugging Face's, on the CPU and on the GPU.

`WordPieceTokenizer.from_directory(path, max_length)` reads the tokenizer files of an
artifact set (see `files.py`) and `.encode(texts)` returns `(input_ids, attention_mask)`,
int64 arrays of shape `(len(texts), max_length)`: `[CLS] ... [SEP]`, truncated to
`max_length`, padded with `[PAD]` (mask 0). The result is what
`transformers.BertTokenizerFast.from_pretrained(path)(texts, padding="max_length",
truncation=True, max_length=max_length)` gives.

Two paths, one result:

- CPU (`encode(texts)`): the `tokenizers` library, one batched call, packed with NumPy.
- GPU (`encode(texts, xp=cupy)` or `device="gpu"`): cuDF's `CharacterNormalizer` and
  `WordPieceVocabulary` (cuDF >= 25.04, `cudf_engine.py`), or where cuDF is missing the
  same steps in CuPy array code (`array_engine.py`), then [CLS]/[SEP], truncation,
  padding and the mask in CuPy (`arrays.add_special_tokens`); CuPy arrays out. cuDF's WordPiece
  does not match Hugging Face on every input, so `routing.DevicePath` sends the texts it
  cannot match to the CPU path and writes their rows into the device result. Where CuPy
  is missing, or the tokenizer is not a BERT WordPiece pipeline the GPU path
  can reproduce, `encode(..., xp=cupy)` tokenizes on the CPU, uploads the result and logs
  the reason once; with READABILITY_TRITON_REQUIRE_GPU_TOKENIZER=1 it raises instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re

import numpy as np

from .. import contracts
from ..device import Device
from ..texts import as_list, as_str, culprit
from . import cudf_engine
from .array_engine import ArrayEngine
from .arrays import add_special_tokens, pad_rows  # noqa: F401 - add_special_tokens: part of the API here
from .files import SPECIAL_DEFAULTS, load_backend
from .kernel_engine import KernelEngine
from .routing import DevicePath, device_incompatibility, device_vocabulary

log = logging.getLogger(__name__)
#: Set to 1 (the GPU kit does), a GPU request the GPU path cannot serve raises instead of
#: falling back to the CPU path.
REQUIRE_GPU_ENV = "READABILITY_TRITON_REQUIRE_GPU_TOKENIZER"


# ------------------------------------------------------------- array assembly


def _device_request(xp, device) -> tuple[bool, int | None]:
    """(GPU wanted, device id or None for the current one) from `xp` / `device`."""
    gpu_xp = xp is not None and xp is not np
    if device is None:
        return gpu_xp, None
    if isinstance(device, Device):
        gpu, device_id = bool(device.is_gpu), int(getattr(device, "device_id", 0))
    elif isinstance(device, int) and not isinstance(device, bool):
        gpu, device_id = True, device
    elif isinstance(device, str) and device.lower() == "cpu":
        gpu, device_id = False, None
    elif isinstance(device, str) and re.fullmatch(r"(gpu|cuda)(:\d+)?", device.lower()):
        gpu = True
        device_id = int(device.split(":")[1]) if ":" in device else None
    else:
        raise ValueError(f"device must be 'cpu', 'gpu', 'cuda[:N]', a GPU index or a Device, got {device!r}")
    if xp is not None and gpu != gpu_xp:
        raise ValueError(f"xp={getattr(xp, '__name__', xp)} contradicts device={device!r}")
    return gpu, device_id


class WordPieceTokenizer:
    """BERT WordPiece tokenization to fixed-length int64 arrays (see the module docstring)."""

    def __init__(
        self,
        backend,
        max_length: int = contracts.DEFAULT_MAX_LENGTH,
        special_tokens: dict[str, str] | None = None,
        directory: str | None = None,
    ):
        from tokenizers import Tokenizer

        self.max_length = contracts.check_max_length(max_length)
        self.directory = directory
        self.special_tokens = dict(SPECIAL_DEFAULTS, **(special_tokens or {}))
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
        `device="gpu"` / `"cuda:N"` / a GPU index / a GPU `Device` gives CuPy arrays (a
        `Device`'s own array module) from the GPU path, or, where it is unavailable, from
        the CPU path, uploaded.
        """
        texts = as_list(texts)
        gpu, device_id = _device_request(xp, device)
        if not gpu:
            return self.encode_cpu(texts)
        if xp is None and isinstance(device, Device):
            xp = device.array_module()  # bound to that GPU
        elif xp is None:
            try:
                import cupy
            except ImportError as exc:
                raise RuntimeError(
                    "GPU tokenization was requested but CuPy is not importable: install "
                    "readability-triton[gpu] or encode on the CPU"
                ) from exc
            xp = cupy
        if device_id is None:
            device_id = int(xp.cuda.runtime.getDevice())
        path = self.device_path(device_id)
        select = getattr(xp.cuda, "Device", None)
        with select(device_id) if select is not None else contextlib.nullcontext():
            if path is None:
                ids, mask = self.encode_cpu(texts)
                return xp.asarray(ids), xp.asarray(mask)
            return path.encode(texts)

    def encode_cpu(self, texts):
        """The CPU path: one `tokenizers` batch call, packed with NumPy."""
        strings = as_str(texts)
        encode_batch = getattr(self.backend, "encode_batch_fast", None) or self.backend.encode_batch  # < 0.20
        try:
            encodings = encode_batch(strings)
        except Exception:  # noqa: BLE001 - e.g. a str with a lone surrogate: name it
            raise culprit(strings) from None
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
            reason = f"the tokenizer cannot run on cuDF or CuPy: {incompatible}"
        else:
            ok, why = cudf_engine.cudf_support()
            if not ok:
                path, reason = self._array_path(device_id, why)
            else:
                try:
                    engine = cudf_engine.CudfEngine(
                        device_vocabulary(self.backend),
                        do_lower=bool(self.backend.normalizer.lowercase),
                        device_id=device_id,
                    )
                    path = DevicePath(self, engine, cudf_engine.cupy_module())
                    reason = f"{why}; {path.describe()}"
                except Exception as exc:  # noqa: BLE001 - any failure means: use the CPU path
                    path, reason = None, f"building the cuDF tokenizer failed ({type(exc).__name__}: {exc})"
        if path is None:
            if os.environ.get(REQUIRE_GPU_ENV) == "1":
                raise RuntimeError(
                    f"GPU {device_id}: WordPiece would run on the CPU, and {REQUIRE_GPU_ENV}=1 requires the GPU "
                    f"path: {reason}"
                )
            log.warning("GPU %d: WordPiece on the CPU (tokenizers), results uploaded to the GPU: %s", device_id, reason)
        self._device_paths[device_id] = path
        self._device_reasons[device_id] = reason
        return path

    def _array_path(self, device_id: int, why_not_cudf: str):
        """The CuPy array engine (`array_engine.py`) on GPU `device_id`: (path, reason)."""

        try:
            cupy = cudf_engine.cupy_module()
        except ImportError as exc:
            return None, f"{why_not_cudf}; CuPy is not importable either ({exc})"
        try:
            select = getattr(getattr(cupy, "cuda", None), "Device", None)
            with select(device_id) if select is not None else contextlib.nullcontext():
                # The WordPiece kernel where the module compiles CUDA (CuPy), else array code.
                args = (device_vocabulary(self.backend), bool(self.backend.normalizer.lowercase))
                unk = self.backend.model.unk_token
                engine: ArrayEngine | KernelEngine
                try:
                    if not hasattr(cupy, "RawModule"):
                        raise RuntimeError("no RawModule")
                    engine = KernelEngine(*args, unk_token=unk, xp=cupy)
                except Exception as exc:  # noqa: BLE001 - the array code then
                    log.warning("GPU %d: the WordPiece kernel is unavailable (%s); CuPy array code", device_id, exc)
                    engine = ArrayEngine(*args, unk_token=unk, xp=cupy)
                path = DevicePath(self, engine, cupy)
        except Exception as exc:  # noqa: BLE001 - any failure means: use the CPU path
            return None, f"{why_not_cudf}; building the CuPy WordPiece failed ({type(exc).__name__}: {exc})"
        how = "a CUDA kernel" if isinstance(path.engine, KernelEngine) else "CuPy array code"
        return path, f"WordPiece on CuPy, {how} ({why_not_cudf}); {path.describe()}"
