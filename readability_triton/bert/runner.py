"""The BERT regressor of an artifact set: `TorchScriptRunner` (`model.pt`, torch.jit: what
the libtorch backend runs) or `OnnxRunner` (`model.onnx`, ONNX Runtime: what the
onnxruntime backend runs); `bert_runner(folder)` picks the one the set holds."""

from __future__ import annotations

import os

import numpy as np

from .. import contracts as C
from ..buckets import by_bucket, describe_buckets
from ..device import Device, as_device
from ..errors import RequestError
from ..layout import MODEL_ONNX, MODEL_PT, choose_bert_format
from .ragged import is_ragged, ragged_feed


def embedding_rows(module) -> int | None:
    """The number of token ids a BERT module embeds (rows of its word-embedding matrix),
    or None if it has none that can be found by name."""
    for name, parameter in module.named_parameters():
        if name.endswith("word_embeddings.weight") and parameter.dim() == 2:
            return int(parameter.shape[0])
    return None


def check_token_shapes(ids, mask, buckets=None) -> None:
    """RequestError (one line) unless the ids and the mask have one shape, with at least one
    column and no more than the largest of `buckets` (where given)."""
    if ids.shape != mask.shape:
        raise RequestError(f"input__0 {list(ids.shape)} and input__1 {list(mask.shape)} must have the same shape")
    most = buckets[-1] if buckets is not None else None
    if ids.ndim != 2 or not ids.shape[1] or (most is not None and ids.shape[1] > most):
        limit = f"1 to {most}" if most is not None else "at least 1"
        raise RequestError(f"input__0 has shape {list(ids.shape)}: the model takes rows of {limit} tokens")


def request_check(runner):
    """A Python bert's check of one request's {input__0, input__1} before requests of several
    widths are zero-padded together (`stub.runtime.PythonModel.check_requests`): its own
    shapes (`check_token_shapes`), which the padding would hide."""
    return lambda arrays: check_token_shapes(arrays[C.INPUT_0], arrays[C.INPUT_1], runner.buckets)


def check_token_ids(ids, mask, vocab_size: int | None, buckets=None) -> None:
    """RequestError (one line) unless the ids and the mask have one shape, with at least one
    column and no more than the largest of `buckets` (where given), every id is in
    [0, vocab_size) and the mask is 0/1."""
    check_token_shapes(ids, mask, buckets)
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

    def __init__(self, module, device: Device | str | None = None, threads: int = 0, buckets=None):
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
        self.buckets = tuple(buckets) if buckets is not None else None

    @classmethod
    def from_folder(
        cls, folder: str, device: Device | str | None = None, threads: int = 0, buckets=None
    ) -> "TorchScriptRunner":
        import torch

        return cls(torch.jit.load(os.path.join(folder, MODEL_PT), map_location="cpu"), device, threads, buckets)

    def describe(self) -> str:
        where = (
            f"torch on {self.device}, DLPack in and out" if self.device.is_gpu else f"the CPU, {self.threads} thread(s)"
        )
        return (
            f"TorchScript model.pt on {where}, {describe_buckets(self.buckets)} (vocabulary of {self.vocab_size} ids)"
        )

    def __call__(self, ids, mask):
        check_token_ids(ids, mask, self.vocab_size, self.buckets)
        return by_bucket(ids, mask, self.buckets, self._run, self.device.array_module())

    def _run(self, ids, mask):
        torch = self.torch
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


def length_dynamic(session) -> bool:
    """Whether an ONNX Runtime session's inputs take any length (`export-bert` writes them
    so; the ragged form, `bert.ragged`, takes rows of any width)."""
    if is_ragged(session):
        return True
    return all(not isinstance(tensor.shape[1], int) for tensor in session.get_inputs())


class OnnxRunner:
    """(input_ids, attention_mask) int64 `(n, L)` -> scores float32 `(n, 1)` with ONNX
    Runtime on the CPU; the same checks as `TorchScriptRunner`. Where the model's length
    dimension is dynamic (`export-bert` writes it so), rows run by bucket (`buckets`: the
    smallest of `buckets` that holds each row's text, one run per bucket present, each cut
    or padded to its bucket: what the native route runs after preprocess's cut); `buckets`
    None, or a model of fixed length (`dynamic` False): the batch as it came, in one run.
    A model in the ragged form (`bert.ragged`: what `assemble` serves on the onnxruntime
    backend) is fed each run as that backend feeds it (`ragged_feed`)."""

    FILES = (MODEL_ONNX,)

    def __init__(
        self,
        path: str,
        device: Device | str | None = None,
        threads: int = 0,
        buckets: tuple[int, ...] | None = None,
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
        #: False for a model of one fixed length (an old export): its rows run as they come
        self.dynamic = length_dynamic(self.session)
        self.ragged = is_ragged(self.session)
        if not self.dynamic:
            buckets = None
        self.buckets = tuple(buckets) if buckets is not None else None

    @classmethod
    def from_folder(
        cls, folder: str, device: Device | str | None = None, threads: int = 0, buckets=None
    ) -> "OnnxRunner":
        return cls(os.path.join(folder, MODEL_ONNX), device, threads, buckets)

    def describe(self) -> str:
        return (
            f"ONNX model.onnx{' (ragged form)' if self.ragged else ''} with ONNX Runtime {self.version} on the CPU, "
            f"{self.threads} thread(s), "
            f"{describe_buckets(self.buckets)} (vocabulary of {self.vocab_size} ids)"
        )

    def _run(self, ids, mask):
        if self.ragged:
            feed = ragged_feed(ids, mask)
        else:
            feed = {C.INPUT_0: np.ascontiguousarray(ids, dtype=np.int64)}
            feed[C.INPUT_1] = np.ascontiguousarray(mask, dtype=np.int64)
        out = self.session.run(None, feed)[0]
        return np.asarray(out, dtype=np.float32).reshape(-1, 1)

    def __call__(self, ids, mask):
        check_token_ids(ids, mask, self.vocab_size, self.buckets)
        return by_bucket(ids, mask, self.buckets, self._run)


def bert_runner(
    folder: str, device: Device | str | None = None, bert_format: str | None = None, threads: int = 0, buckets=None
):
    """The runner of the BERT model in `folder`: `bert_format`'s, or the one present (ONNX
    when both are), its intra-op pool sized to `threads` (0: the runtime's default, all cores),
    its rows run by bucket of `buckets` (None: as they come; `buckets.by_bucket`)."""
    chosen = choose_bert_format(folder, bert_format)
    if chosen == "onnx":
        return OnnxRunner.from_folder(folder, device, threads, buckets)
    return TorchScriptRunner.from_folder(folder, device, threads, buckets)
