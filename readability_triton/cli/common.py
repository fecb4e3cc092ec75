"""What the sub-commands share: a progress bar, the `--data` arguments, and `--url` and
`--protocol` (one declaration, one default)."""

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


#: The protocols a client speaks, and where `serve` listens for each by default.
PROTOCOLS = ("http", "grpc")
DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}


def protocol_argument(p) -> None:
    p.add_argument("--protocol", choices=PROTOCOLS, default="http", help="KServe v2 over http or grpc (default: http)")


def connection_arguments(p, url_group=None, what: str = "the server to ask") -> None:
    """--url (in `url_group` where it excludes other sources) and --protocol; `server_url`
    resolves the default."""
    (url_group or p).add_argument(
        "--url",
        default=None,
        metavar="HOST:PORT",
        help=f"{what} (default {DEFAULT_URLS['http']} over http, {DEFAULT_URLS['grpc']} over grpc: serve's ports)",
    )
    protocol_argument(p)


def server_url(args) -> str:
    """--url, or serve's default port of --protocol."""
    return args.url or DEFAULT_URLS[args.protocol]
