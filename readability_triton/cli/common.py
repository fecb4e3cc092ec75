"""What the sub-commands share: a progress bar and the `--data` arguments."""

from __future__ import annotations

import sys


def progress(iterable=None, **kwargs):
    """A tqdm progress bar on stderr (quiet when stderr is not a terminal and
    `disable` is not given: tqdm then prints nothing)."""
    from tqdm.auto import tqdm

    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("disable", None)  # None: off when not attached to a terminal
    return tqdm(iterable, **kwargs)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def data_arguments(p, required: bool = True, what: str = "training CSV") -> None:
    """--data, --column and --target: a CommonLit-style CSV with texts and targets."""
    p.add_argument(
        "--data",
        required=required,
        metavar="CSV",
        help=f"{what} with a text column and a numeric target column (CommonLit layout)",
    )
    p.add_argument("--column", default="excerpt", help="text column of --data (default: excerpt)")
    p.add_argument("--target", default="target", help="target column of --data (default: target; higher = easier)")
