"""`TokenizerRunner`: an artifact set's WordPiece tokenizer at a fixed sequence length."""

from __future__ import annotations

import os

from ..device import Device, as_device
from ..layout import MANIFEST, TOKENIZER_FILES, Manifest, load_manifest
from .wordpiece import WordPieceTokenizer


class TokenizerRunner:
    """texts -> (input_ids, attention_mask), int64 `(len(texts), max_length)`: NumPy on the
    CPU; CuPy on a GPU (the cuDF path where it is installed, else the CPU path, uploaded)."""

    FILES = TOKENIZER_FILES  # vocab.txt is required; the others are read where present

    def __init__(self, tokenizer: WordPieceTokenizer, device: Device | str | None = None):
        self.tokenizer = tokenizer
        self.device = as_device(device)
        self.on_gpu, self.reason = (
            self.tokenizer.gpu_support(self.device.device_id) if self.device.is_gpu else (False, "a CPU instance")
        )

    @classmethod
    def from_folder(
        cls, folder: str, max_length: int, device: Device | str | None = None, manifest: Manifest | None = None
    ) -> "TokenizerRunner":
        """The tokenizer files in `folder`; when the folder has a manifest (`manifest`, where
        the caller read it already), `max_length` must be the one the artifacts were built for."""
        if manifest is None and os.path.isfile(os.path.join(folder, MANIFEST)):
            manifest = load_manifest(folder)
        if manifest is not None:
            built = manifest.max_length
            if built != max_length:
                raise ValueError(
                    f"the artifacts in {folder} were built for max_length {built} (manifest.json), "
                    f"not {max_length}; re-assemble the repository"
                )
        try:
            tokenizer = WordPieceTokenizer.from_directory(folder, max_length)
        except ValueError as err:
            raise ValueError(f"cannot load the tokenizer: {err}") from None
        return cls(tokenizer, device)

    @property
    def max_length(self) -> int:
        return self.tokenizer.max_length

    def describe(self) -> str:
        if not self.device.is_gpu:
            return f"WordPiece on the CPU (tokenizers), max_length {self.max_length}"
        if self.on_gpu:
            return f"WordPiece on {self.device} with {self.reason}"
        return f"{self.device} tokenizes on the CPU (tokenizers) and uploads the ids: {self.reason}"

    def __call__(self, texts):
        return self.tokenizer.encode(texts, device=self.device)
