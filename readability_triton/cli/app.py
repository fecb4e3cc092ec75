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
    "readability_triton.cli.health",
    "readability_triton.cli.score",
    "readability_triton.cli.demo",
    "readability_triton.cli.evaluate",
    "readability_triton.cli.bench",
)
#: The module that registers each command: a command imports only its own module (a
#: `score` job starts in about 0.3 s of CPU, not the 0.8 s that importing every command's
#: module, the front door's aiohttp and gRPC servers included, took). `build_parser()`
#: with no command registers them all (for --help); tests check the two agree.
COMMANDS = {
    "vocabulary": "readability_triton.cli.features",
    "features": "readability_triton.cli.features",
    "train-forest": "readability_triton.cli.training",
    "train-bert": "readability_triton.cli.training",
    "export-bert": "readability_triton.cli.training",
    "train-blend": "readability_triton.cli.training",
    "build-demo": "readability_triton.cli.training",
    "assemble": "readability_triton.cli.serve",
    "serve": "readability_triton.cli.serve",
    "triton-command": "readability_triton.cli.serve",
    "health": "readability_triton.cli.health",
    "score": "readability_triton.cli.score",
    "demo": "readability_triton.cli.demo",
    "evaluate": "readability_triton.cli.evaluate",
    "bench": "readability_triton.cli.bench",
    "perf-input": "readability_triton.cli.bench",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given a `command` this CLI knows, of that one only."""
    parser = argparse.ArgumentParser(
        prog="readability-triton",
        description="Train, export, assemble, serve and query the readability ensemble on Triton.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: tuple[str, ...] = _COMMAND_MODULES
    if command in COMMANDS and COMMANDS[command] in modules:
        modules = (COMMANDS[command],)
    for name in modules:
        importlib.import_module(name).register(subparsers)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command named in `argv` (its first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


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
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(argv))
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
