"""The BERT regressor of an artifact set: `TorchScriptRunner` (`model.pt`, torch.jit: what
the libtorch backend runs) or `OnnxRunner` (`model.onnx`, ONNX Runtime: what the
onnxruntime backend runs); `bert_runner(folder)` picks the one the set holds."""

from __future__ import annotations

import os

import numpy as np

from ..device import Device, as_device
from ..errors import RequestError
from ..layout import MODEL_ONNX, MODEL_PT, choose_bert_format


def embedding_rows(module) -> int | None:
    """The number of token ids a BERT module embeds (rows of its word-embedding matrix),
    or None if it has none that can be found by name."""
    for name, parameter in module.named_parameters():
        if name.endswith("word_embeddings.weight") and parameter.dim() == 2:
            return int(parameter.shape[0])
    return None


def check_token_ids(ids, mask, vocab_size: int | None) -> None:
    """RequestError (one line) unless every id is in [0, vocab_size) and the mask is 0/1."""
    if ids.size:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or (vocab_size is not None and high >= vocab_size):
            where = f"[0, {vocab_size})" if vocab_size is not None else "[0, ...)"
            raise RequestError(
                f"input__0 holds the token id {low if low < 0 else high}, outside the model's vocabulary {where}"
            )
    if mask.size and not bool(((mask == 0) | (mask == 1)).all()):
        raise RequestError("input__1 (the attention mask) must hold only 0 and 1")


class TorchScriptRunner:
    """(input_ids, attention_mask) int64 `(n, L)` -> scores float32 `(n, 1)`: NumPy in and out
    on the CPU; on a GPU (the portable-gpu profile) CuPy in and out, handed to and from torch
    through DLPack without a copy or a trip to the host. A batch whose ids fall outside the
    vocabulary, or whose mask is not 0/1, is a RequestError (the module would fail with a
    TorchScript traceback)."""

    FILES = (MODEL_PT,)

    def __init__(self, module, device: Device | str | None = None, threads: int = 0):
        import torch

        self.torch = torch
        self.device = as_device(device)
        if threads > 0:  # the thread plan (`threads`): intra-op pool; no inter-op parallelism to share cores with
            torch.set_num_threads(threads)
            try:
                torch.set_num_interop_threads(1)
            except RuntimeError:  # already started (torch allows setting it once)
                pass
        self.threads = torch.get_num_threads()
        self.module = module.eval()
        if self.device.is_gpu:
            self.module = self.module.to(f"cuda:{self.device.device_id}")
        self.vocab_size = embedding_rows(self.module)

    @classmethod
    def from_folder(cls, folder: str, device: Device | str | None = None, threads: int = 0) -> "TorchScriptRunner":
        import torch

        return cls(torch.jit.load(os.path.join(folder, MODEL_PT), map_location="cpu"), device, threads)

    def describe(self) -> str:
        where = (
            f"torch on {self.device}, DLPack in and out" if self.device.is_gpu else f"the CPU, {self.threads} thread(s)"
        )
        return f"TorchScript model.pt on {where} (vocabulary of {self.vocab_size} ids)"

    def __call__(self, ids, mask):
        torch = self.torch
        check_token_ids(ids, mask, self.vocab_size)
        if self.device.is_gpu:
            xp = self.device.array_module()
            ids, mask = (xp.ascontiguousarray(a, dtype=xp.int64) for a in (ids, mask))
            with torch.inference_mode():
                scores = self.module(torch.from_dlpack(ids), torch.from_dlpack(mask))
            return xp.from_dlpack(scores.reshape(-1, 1).to(torch.float32).contiguous())
        with torch.inference_mode():
            scores = self.module(
                torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)),
                torch.from_numpy(np.ascontiguousarray(mask, dtype=np.int64)),
            )
        return scores.reshape(-1, 1).to(torch.float32).numpy()


def onnx_session(path: str, threads: int = 0):
    """An ONNX Runtime session on the CPU for `path` that logs errors only; with `threads`
    (the thread plan) an intra-op pool of that size, one inference at a time, and threads
    that sleep when idle (READABILITY_TRITON_ORT_SPIN=1: ONNX Runtime's spinning)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if threads > 0:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        if os.environ.get("READABILITY_TRITON_ORT_SPIN", "0") == "0":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


#: Rows whose real lengths fall in the same band of this many tokens run together, padded to
#: the longest of them; rows of other bands run apart (`OnnxRunner`; 0: one run per batch).
LENGTH_BAND = 8


def real_lengths(mask):
    """Per row, the column after its last real token (0 for a row without one)."""
    if not mask.shape[1]:
        return np.zeros(len(mask), dtype=np.int64)
    last = mask.shape[1] - np.argmax(mask[:, ::-1] != 0, axis=1)
    return np.where(mask.any(axis=1), last, 0)


def length_bands(lengths, band: int) -> list:
    """Row indices grouped by the band of `band` tokens their real length (`real_lengths`)
    falls in (1..band, band+1..2*band, ...: at most max_length / band bands), shortest band
    first (one group, all rows, where they share a band)."""
    keys = np.maximum(lengths - 1, 0) // band
    bands, inverse = np.unique(keys, return_inverse=True)
    if len(bands) < 2:
        return [np.arange(len(lengths))]
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse))[:-1])


def trimmed(ids, mask, lengths=None):
    """`ids`, `mask` without the columns after the batch's last real token (at least 2
    columns are kept; `lengths`: the rows' `real_lengths`, where known): pure padding, which
    a BERT's attention mask hides from every real token, so the scores are the same (up to
    float rounding) for less compute."""
    lengths = real_lengths(mask) if lengths is None else lengths
    keep = max(int(lengths.max(initial=0)), 2)
    if keep >= mask.shape[1]:
        return ids, mask
    return ids[:, :keep], mask[:, :keep]


class OnnxRunner:
    """(input_ids, attention_mask) int64 `(n, L)` -> scores float32 `(n, 1)` with ONNX
    Runtime on the CPU; the same checks as `TorchScriptRunner`. Where the model's length
    dimension is dynamic (`export-bert` writes it so), a batch's trailing padding is cut
    off before it runs (`trimmed`; the CommonLit excerpts average 216 of 256 tokens), and
    rows of different lengths run apart, one run per band of `band` tokens
    (`length_bands`), so a short text is not padded to a long one's length; `trim=False`
    feeds the padded batch as it came, in one run."""

    FILES = (MODEL_ONNX,)

    def __init__(
        self,
        path: str,
        device: Device | str | None = None,
        threads: int = 0,
        trim: bool = True,
        band: int = LENGTH_BAND,
    ):
        if as_device(device).is_gpu:
            raise ValueError(
                "the ONNX Runtime runner runs on the CPU (KIND_CPU); on a GPU use the gpu or hybrid "
                "profile, where the onnxruntime backend serves model.onnx (optionally with TensorRT)"
            )
        try:
            import onnxruntime
        except ImportError as exc:  # an ImportError still: `assemble` then takes the set's recorded canary
            raise ImportError(
                f"model.onnx needs ONNX Runtime in this environment ({exc}): pip install 'readability-triton[portable]'"
            ) from None
        self.threads = threads or (os.cpu_count() or 1)
        self.session = onnx_session(path, threads)
        declared = self.session.get_modelmeta().custom_metadata_map.get("vocab_size")
        self.vocab_size = int(declared) if declared else None
        self.version = onnxruntime.__version__
        self.trim = trim and all(not isinstance(tensor.shape[1], int) for tensor in self.session.get_inputs())
        self.band = band if self.trim else 0

    @classmethod
    def from_folder(
        cls, folder: str, device: Device | str | None = None, threads: int = 0, trim: bool = True
    ) -> "OnnxRunner":
        return cls(os.path.join(folder, MODEL_ONNX), device, threads, trim)

    def describe(self) -> str:
        padding = "padded length"
        if self.trim:
            padding = f"padding cut off, rows in bands of {self.band} tokens" if self.band > 0 else "padding cut off"
        return (
            f"ONNX model.onnx with ONNX Runtime {self.version} on the CPU, {self.threads} thread(s), {padding} "
            f"(vocabulary of {self.vocab_size} ids)"
        )

    def _run(self, ids, mask, lengths=None):
        if self.trim:
            ids, mask = trimmed(ids, mask, lengths)
        out = self.session.run(
            None,
            {
                "input__0": np.ascontiguousarray(ids, dtype=np.int64),
                "input__1": np.ascontiguousarray(mask, dtype=np.int64),
            },
        )[0]
        return np.asarray(out, dtype=np.float32).reshape(-1, 1)

    def __call__(self, ids, mask):
        check_token_ids(ids, mask, self.vocab_size)
        if not self.trim:
            return self._run(ids, mask)
        lengths = real_lengths(mask)
        groups = length_bands(lengths, self.band) if self.band > 0 and len(ids) > 1 else []
        if len(groups) < 2:
            return self._run(ids, mask, lengths)
        scores = np.empty((len(ids), 1), dtype=np.float32)
        for rows in groups:  # one run per band: at most max_length / band of them
            scores[rows] = self._run(ids[rows], mask[rows], lengths[rows])
        return scores


def bert_runner(
    folder: str, device: Device | str | None = None, bert_format: str | None = None, threads: int = 0, trim: bool = True
):
    """The runner of the BERT model in `folder`: `bert_format`'s, or the one present (ONNX
    when both are), its intra-op pool sized to `threads` (0: the runtime's default, all cores);
    `trim=False`: an ONNX model is fed the padded batch (as Triton's onnxruntime backend is)."""
    chosen = choose_bert_format(folder, bert_format)
    if chosen == "onnx":
        return OnnxRunner.from_folder(folder, device, threads, trim)
    return TorchScriptRunner.from_folder(folder, device, threads)
