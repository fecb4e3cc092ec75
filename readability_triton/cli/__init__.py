"""The `readability-triton` command line: `main(argv)`; one module per area
(`features.py`, `training.py`, `serve.py`, `evaluate.py`), each with `register(subparsers)`.

Heavy imports (torch, scikit-learn, tritonclient) happen inside the commands, so `--help`
stays fast. Every problem a user can fix is a `ReadabilityError`: `main` prints it in one
line (exit status 2), without a traceback.
"""

from .app import build_parser, main

__all__ = ["build_parser", "main"]
