"""`readability-triton`: the parser and `main`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .. import __version__
from ..errors import ReadabilityError

_COMMAND_MODULES = (
    "readability_triton.cli.features",
    "readability_triton.cli.training",
    "readability_triton.cli.serve",
    "readability_triton.cli.score",
    "readability_triton.cli.evaluate",
    "readability_triton.cli.bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="readability-triton",
        description="Train, export, assemble, serve and query the readability ensemble on Triton.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def configure_logging(command: str) -> None:
    """The library logs through `logging` (each module's logger); the command line prints
    its INFO and above on stderr, `serve`'s lines named as serve's."""
    handler = logging.StreamHandler(sys.stderr)
    prefix = "readability-triton serve: " if command == "serve" else ""
    handler.setFormatter(logging.Formatter(prefix + "%(message)s"))
    root = logging.getLogger(__package__.rpartition(".")[0])
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    configure_logging(args.command)
    try:
        return int(args.func(args) or 0)
    except ReadabilityError as err:
        print(f"readability-triton {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"readability-triton {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
