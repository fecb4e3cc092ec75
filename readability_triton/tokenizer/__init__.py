"""BERT WordPiece tokenization equal to Hugging Face's, on the CPU (tokenizers) and on the
GPU (cuDF + CuPy, exact by routing), and its runner.

- `files.py`: the tokenizer files of an artifact set, read and written;
- `wordpiece.py`: `WordPieceTokenizer` (both paths);
- `arrays.py`: special tokens, truncation, padding and the mask (NumPy and CuPy);
- `routing.py`: which texts the GPU engine cannot match (sent to the CPU path);
- `cudf_engine.py`: the only code that imports cuDF;
- `runner.py`: `TokenizerRunner`, what `preprocess` and the in-process pipeline run.
"""

from .arrays import add_special_tokens, pad_rows
from .files import load_backend, load_vocab, save_tokenizer_files
from .wordpiece import WordPieceTokenizer

__all__ = ["WordPieceTokenizer", "add_special_tokens", "load_backend", "load_vocab", "pad_rows", "save_tokenizer_files"]
