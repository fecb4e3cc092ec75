"""Triton Python model `preprocess`: TEXT -> INPUT_IDS, ATTENTION_MASK (BERT WordPiece).

A thin adapter over `readability_triton.tokenization.WordPieceTokenizer`:

- parameters: `MAX_LENGTH` (default 256; must equal the dims of both outputs) and
  `MAX_TEXT_BYTES` (per-text limit; a longer text fails its own request);
- artifacts: the tokenizer files (`vocab.txt`, optionally `tokenizer.json`,
  `tokenizer_config.json`, `special_tokens_map.json`) in the version folder, checked
  against `manifest.json` there when it is present;
- one tokenizer pass over the texts of all requests of an `execute` call. On a GPU
  instance the ids are built on the GPU (cuDF + CuPy) and leave through DLPack; where
  cuDF is missing or too old, they are computed on the CPU, uploaded, and the reason is
  logged once at load.
"""
from __future__ import annotations

import os

import triton_python_backend_utils as pb_utils

from readability_triton import contracts, serving
from readability_triton.tokenization import TOKENIZER_FILES, WordPieceTokenizer


class TritonPythonModel:
    def initialize(self, args):
        config = serving.model_config(args)
        params = serving.parameters(config)
        name = args.get("model_name", contracts.PREPROCESS)
        self.max_length = serving.int_parameter(params, "MAX_LENGTH", contracts.DEFAULT_MAX_LENGTH, minimum=2)
        self.max_text_bytes = serving.int_parameter(params, "MAX_TEXT_BYTES", contracts.DEFAULT_MAX_TEXT_BYTES)
        for output in (contracts.INPUT_IDS, contracts.ATTENTION_MASK):
            dims = serving.output_dims(config, output)
            if dims != (self.max_length,):
                raise ValueError(
                    f"{name}: output {output} has dims {list(dims)} but parameter MAX_LENGTH is "
                    f"{self.max_length}; both outputs must have dims [{self.max_length}] (the sequence length "
                    "the bert model was exported with): fix config.pbtxt or re-render it with "
                    "`readability-triton assemble`")

        present = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(serving.version_dir(args), n))]
        directory, found = serving.checked_artifacts(args, present)  # the tokenizer names what is missing
        if found is not None and int(found["max_length"]) != self.max_length:
            raise ValueError(f"{name}: parameter MAX_LENGTH is {self.max_length} but the artifacts in "
                             f"{directory} were built for max_length {found['max_length']} "
                             "(manifest.json); re-assemble the repository")
        try:
            self.tokenizer = WordPieceTokenizer.from_directory(directory, self.max_length)
        except ValueError as err:
            raise ValueError(f"{name}: cannot load the tokenizer: {err}") from None

        self.device = serving.instance_device(args)
        self.xp = self.device.array_module()
        if self.device.is_gpu:
            on_gpu, reason = self.tokenizer.gpu_support(self.device.device_id)
            if on_gpu:
                pb_utils.Logger.log_info(f"{name}: WordPiece on GPU {self.device.device_id} with {reason}")
            else:
                pb_utils.Logger.log_warn(
                    f"{name}: GPU instance {self.device.device_id} tokenizes on the CPU (tokenizers) and "
                    f"uploads the ids: {reason}")

    def execute(self, requests):
        batch = serving.read_text_requests(pb_utils, requests, contracts.TEXT, self.max_text_bytes)
        return serving.run_batch(pb_utils, batch, self._tokenize, logger=pb_utils.Logger)

    def _tokenize(self, texts):
        ids, mask = self.tokenizer.encode(texts, device=self.device)
        return {contracts.INPUT_IDS: ids, contracts.ATTENTION_MASK: mask}

    def finalize(self):
        self.tokenizer = None
