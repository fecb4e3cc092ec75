"""CLI: `health`, the probe that Docker's HEALTHCHECK and Kubernetes exec probes run.

It starts often (every 10 s in the image, every second in the image's tests), on a
machine that may be saturated, so `health --serve` imports nothing beyond the standard
library's HTTP client: 0.13-0.14 s of CPU per probe, where importing `serve`'s module (the
front door's aiohttp, NumPy, the server's management) made it 0.84 s, and a saturated
2-core host stretched that past Docker's 5 s timeout: the container turned unhealthy while
it served. The canary check without --serve imports the client it needs when it runs.
"""

from __future__ import annotations

import sys

from ..errors import CommandError
from ..repository.canary import Canary
from .common import connection_arguments, server_url


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "health",
        help="check a running ensemble (a canary inference) or a running serve's health endpoint",
        description="Without --serve: send the canary text through the 'readability' ensemble at --url and "
        "check the answer (finite; with --repository, equal to what assemble recorded). With "
        "--serve HOST:PORT: ask a running `readability-triton serve` for its liveness or "
        "readiness (GET /livez or /readyz). Exit status 0 (healthy) or 1 (not), with one line "
        "that says why: usable as a Docker HEALTHCHECK or a Kubernetes exec probe.",
    )
    connection_arguments(p)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the answer (default 10)")
    p.add_argument(
        "--repository",
        default=None,
        metavar="REPO",
        help="judge the canary's answer against the one recorded in this assembled repository",
    )
    p.add_argument(
        "--serve", default=None, metavar="HOST:PORT", help="ask serve's health endpoint instead (its --health-port)"
    )
    p.add_argument(
        "--check",
        choices=("live", "ready"),
        default="ready",
        help="with --serve: liveness or readiness (default ready)",
    )
    p.set_defaults(func=cmd_health)


def ask_serve(address: str, check: str, timeout: float) -> int:
    """GET /livez or /readyz of serve's health port: 0 and its answer on stdout when it
    says 200, else 1 and why on stderr."""
    import urllib.error
    import urllib.request

    url = f"http://{address}/{check}z"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            print(reply.read().decode("utf-8", "replace").strip())
            return 0
    except urllib.error.HTTPError as err:
        print(err.read().decode("utf-8", "replace").strip(), file=sys.stderr)
    except (urllib.error.URLError, OSError) as err:
        print(f"{url}: {err}", file=sys.stderr)
    return 1


def cmd_health(args) -> int:
    if args.serve:
        return ask_serve(args.serve, args.check, args.timeout)

    from ..server.canary_probe import check  # NumPy and the Triton client: not for a probe

    canary = Canary.load(args.repository) if args.repository else None
    if args.repository and canary is None:
        raise CommandError(f"{args.repository}: no recorded canary (readability/1/canary.json); assemble it again")
    health = check(server_url(args), args.protocol, args.timeout, canary)
    if health.ok:
        print(f"healthy: {health.message}")
        return 0
    print(f"unhealthy ({health.kind}): {health.message}", file=sys.stderr)
    return 1
