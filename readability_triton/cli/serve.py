"""CLI: `assemble`, `serve` and `triton-command`."""

from __future__ import annotations

import argparse
import os

from .. import contracts
from ..buckets import describe_buckets
from ..errors import CommandError, ServerError
from ..frontdoor.clients import parse_prefixes
from ..frontdoor.door import DEFAULT_MAX_REQUEST_BYTES
from ..intervals import DEFAULT_LEVEL, for_blend
from ..repository import releases
from ..repository.assemble import assemble, packed_graph, pick_bert_format, repository_buckets
from ..repository.configs import read_config
from ..repository.options import AssemblyOptions
from ..repository.profiles import DEFAULT_TENSORRT_CACHE, PROFILES
from ..scoring import blend_weights
from ..server.plain import plain_command
from ..server.serve import ServeOptions, Service


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "assemble",
        help="build a complete model repository for a profile from an artifact set",
        description="Write the configs of a profile (gpu, hybrid, cpu, portable, portable-gpu), the Python models' "
        "model.py and the artifacts into a Triton model repository, after checking the "
        "artifacts against their manifest.json and the tensor contracts.",
    )
    p.add_argument("--profile", required=True, choices=PROFILES)
    p.add_argument(
        "--artifacts",
        required=True,
        metavar="DIR",
        help="artifact set (model.pt, tokenizer files, checkpoint.tl, vocabulary.json, manifest.json)",
    )
    p.add_argument("--out", required=True, metavar="REPO", help="repository folder to write")
    p.add_argument(
        "--bert-weight",
        type=float,
        default=None,
        help="weight of BERT_SCORE in SCORE (default: the set's fitted weights, from train-blend or "
        "build-demo; else 0.5)",
    )
    p.add_argument(
        "--forest-weight", type=float, default=None, help="weight of FOREST_SCORE in SCORE (with --bert-weight)"
    )
    p.add_argument(
        "--max-text-bytes", type=int, default=None, help="largest UTF-8 text the Python steps accept (default 100000)"
    )
    p.add_argument(
        "--bert-format",
        choices=("onnx", "torchscript"),
        default=None,
        help="the BERT model to serve when the set holds both (default: onnx; torchscript for "
        "portable-gpu, where torch runs it on the GPU)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_LEVEL,
        metavar="LEVEL",
        help=f"the level of SCORE_LOW..SCORE_HIGH, the share of texts whose target it should hold (default "
        f"{DEFAULT_LEVEL}; from the set's calibration: train-blend, build-demo)",
    )
    p.add_argument(
        "--buckets",
        default=None,
        metavar="L1,L2,...",
        help="the sequence lengths preprocess cuts each request's token ids to: the smallest that holds "
        "the request's longest text (default: 8 tokens apart where bert joins every bucket in one batch, i.e. "
        "the ragged graph or a Python bert on the CPU; else 16 apart up to 128, then doubling: 256, 512; "
        "the max_length alone pads every text to it, as before buckets)",
    )
    p.add_argument(
        "--ragged",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bert takes its ids ragged: Triton's dynamic batcher joins requests of every bucket and the graph "
        "pads a batch to its widest, on the CPU for attention only (--packed) (default: on where the "
        "onnxruntime backend serves BERT on the CPU; "
        "--ragged also on a GPU, not yet run on one; --no-ragged: only requests of one bucket batch together)",
    )
    p.add_argument(
        "--packed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the ragged graph runs BERT's token-wise layers on the batch's real tokens only, attention on "
        "the rows padded to the widest (default: on where the ragged graph serves on the CPU; --ragged --packed "
        "also on a GPU, not yet run on one; --no-packed: every row padded to the batch's widest)",
    )
    p.add_argument(
        "--tensorrt",
        action="store_true",
        help="gpu/hybrid with ONNX: let the onnxruntime backend build a TensorRT FP16 engine (built on "
        "the first requests, then cached)",
    )
    p.add_argument(
        "--tensorrt-cache",
        default=None,
        metavar="DIR",
        help="where the TensorRT engines are cached on the server (default /tmp/readability-triton-trt)",
    )
    p.add_argument(
        "--triton-version",
        default=None,
        metavar="YY.MM",
        help="the Triton release that will serve the repository (default 24.10, the release the "
        "tests run): its configs differ, e.g. FIL's is_classifier from 25.09",
    )
    p.add_argument(
        "--response-cache",
        action="store_true",
        help="let Triton's response cache keep bert's answers, so that texts seen before skip BERT "
        "(serve it with `serve --cache-size`)",
    )
    p.add_argument(
        "--fused",
        action="store_true",
        help="portable profiles: run BERT inside preprocess and the forest inside featurize, two Python "
        "models fewer (two python-backend hops less per text; no bert or forest model to "
        "call on its own)",
    )
    p.add_argument("--force", action="store_true", help="replace REPO if it exists")
    p.set_defaults(func=cmd_assemble)

    p = subparsers.add_parser(
        "serve",
        help="serve a repository: the front door in front of a supervised tritonserver",
        description="Run tritonserver (the nvidia-pytriton wheel's, or an installed one) on 127.0.0.1 with its "
        "model-repository, logging, trace and shared-memory APIs closed to clients without the admin "
        "key, and the front door on the published HTTP and gRPC ports: admission by work with a "
        "stated wait, fair shares per client network and client, abandoned requests dropped before compute, oversized "
        "bodies refused, and no cancellation ever reaching tritonserver. Restart tritonserver "
        "(drained) on evidence that it is dead, stuck or answering wrong, answer liveness and "
        "readiness probes, and drain then stop on Ctrl-C or SIGTERM.",
    )
    env = os.environ.get
    p.add_argument("--repository", required=True, metavar="REPO")
    p.add_argument("--http-port", type=int, default=int(env("READABILITY_TRITON_HTTP_PORT", "8000")))
    p.add_argument("--grpc-port", type=int, default=int(env("READABILITY_TRITON_GRPC_PORT", "8001")))
    p.add_argument("--metrics-port", type=int, default=int(env("READABILITY_TRITON_METRICS_PORT", "8002")))
    p.add_argument(
        "--address",
        default=env("READABILITY_TRITON_ADDRESS", "127.0.0.1"),
        help="where the published ports listen (default 127.0.0.1; 0.0.0.0 in a container). Each port "
        "and this default to "
        "$READABILITY_TRITON_<HTTP_PORT|GRPC_PORT|METRICS_PORT|HEALTH_PORT|ADDRESS>",
    )
    p.add_argument(
        "--tritonserver",
        default="",
        metavar="HOME",
        help="an installed tritonserver (HOME/bin/tritonserver, HOME/backends; an NGC image's "
        "/opt/tritonserver; default $READABILITY_TRITON_HOME, else the one in the nvidia-pytriton "
        "wheel)",
    )
    p.add_argument("--log-file", default=None, help="write the server log here instead of stderr")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for readiness")
    p.add_argument(
        "--health-interval",
        type=float,
        default=5.0,
        help="seconds between checks of the processes, the queues' progress and a canary "
        "inference (0: no supervision; default 5)",
    )
    p.add_argument(
        "--health-port",
        type=int,
        default=int(env("READABILITY_TRITON_HEALTH_PORT", "0")) or None,
        help="answer GET /livez, /readyz, /healthz and /metrics on this port (liveness never fails "
        "because of load; readiness: serving right answers)",
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=120.0,
        help="a step with requests queued that finishes nothing for this long counts as stuck (default 120 s)",
    )
    p.add_argument(
        "--cache-size",
        type=int,
        default=0,
        metavar="BYTES",
        help="the response cache's size (Triton's local cache) for a repository assembled with "
        "--response-cache (default 0: no cache)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM, seconds to let accepted requests finish before the server is stopped (default 30)",
    )
    p.add_argument(
        "--drain-grace",
        type=float,
        default=float(env("READABILITY_TRITON_DRAIN_GRACE", "2")),
        metavar="SECONDS",
        help="on SIGTERM, seconds during which readiness is already false but requests are still taken, "
        "before new ones are refused: load balancers take that long to stop sending here (default 2, or "
        "$READABILITY_TRITON_DRAIN_GRACE; Kubernetes: a little longer than its endpoints take to drop a "
        "terminating pod)",
    )
    p.add_argument(
        "--max-wait",
        type=float,
        default=float(env("READABILITY_TRITON_MAX_WAIT", "10")),
        help="the stated wait: a request is accepted only while the work ahead of it (in the fair order), "
        "at the rate the pipeline lately computed texts, is answered within this many seconds (admission fills "
        "three quarters of it; the rest is headroom for a pipeline that slows down, and a waiting request that "
        "a pipeline slowed down further could no longer answer in time is refused then, uncomputed); else it "
        "is refused at once as busy (default 10, or $READABILITY_TRITON_MAX_WAIT)",
    )
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        metavar="BYTES",
        help=f"the largest HTTP body or gRPC message accepted (default {DEFAULT_MAX_REQUEST_BYTES}); "
        "larger ones are refused (413, RESOURCE_EXHAUSTED) before they are read whole",
    )
    p.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="open the ports without first sending the pipeline 81 generated texts (by default the "
        "first clients do not pay a cold pipeline's start, and the front door starts from a measured rate)",
    )
    p.add_argument(
        "--client-header",
        default=env("READABILITY_TRITON_CLIENT_HEADER") or None,
        metavar="NAME",
        help="name clients by this header (HTTP) or metadata key (gRPC), e.g. X-Forwarded-For behind a "
        "proxy that sets it, instead of by their address (default: by address)",
    )
    p.add_argument(
        "--network-prefix",
        default=env("READABILITY_TRITON_NETWORK_PREFIX", "24,64"),
        metavar="V4,V6",
        help="fair shares go first to client networks of these prefix lengths, then to the clients of each, so "
        "that one sender with many addresses of a network gets one network's share (default 24,64, or "
        "$READABILITY_TRITON_NETWORK_PREFIX; 32,128: every address its own)",
    )
    p.add_argument(
        "--freeze-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="restart tritonserver when its own /v2/health/live has not answered for this long (a frozen "
        "server; it is not ready after 6 s of silence, and a stopped process is restarted at the next check; "
        "0: never for silence; default 20)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        metavar="N",
        help="connections each port keeps at most (default 4096, or fewer where the descriptor limit is "
        "lower); on the HTTP port, over it or over an eighth of it from one client network, an idle one is "
        "closed to make room",
    )
    p.add_argument(
        "--door-workers",
        type=int,
        default=int(env("READABILITY_TRITON_DOOR_WORKERS", "0")),
        metavar="N",
        help="front door processes, on the same ports, each gating the client networks the kernel steers to "
        "it (docs/operations.md); one passes at most about 4,100 HTTP or 1,500 gRPC requests a second (default: "
        "one per four CPUs, 1-8; $READABILITY_TRITON_DOOR_WORKERS)",
    )
    p.add_argument(
        "--allow-model-uploads",
        action="store_true",
        help="let holders of the admin key load models with file: content (python files the server then "
        "runs as its own user): refused by default",
    )
    p.set_defaults(func=cmd_serve)

    p = subparsers.add_parser(
        "triton-command",
        help="print the tritonserver command line that serves a repository without serve (a plain deployment)",
        description="Print, as one bash line, the command that starts this machine's tritonserver (the "
        "nvidia-pytriton wheel's, or --tritonserver HOME) on an assembled repository with no readability-triton "
        "process beside it: its environment (libraries, this Python's bin first on PATH for the python "
        "backend's stubs, the metrics URL the first step sheds load by), its backend folder (prepared now), and "
        "its model-repository, logging, trace and shared-memory APIs closed with the key in "
        "$READABILITY_TRITON_ADMIN_KEY, read when the line runs and handed over on no command line. Run it "
        "with bash; it execs tritonserver, so its PID is tritonserver's (SIGTERM stops it). No front door, "
        "supervisor or warm-up of serve's: the models warm up as they load (model_warmup).",
    )
    p.add_argument("--repository", required=True, metavar="REPO")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--address", default="127.0.0.1", help="where the ports listen (default 127.0.0.1)")
    p.add_argument(
        "--tritonserver",
        metavar="HOME",
        default=None,
        help="an installed tritonserver (an NGC image's /opt/tritonserver; default $READABILITY_TRITON_HOME, "
        "else the nvidia-pytriton wheel's)",
    )
    p.set_defaults(func=cmd_triton_command)


# ------------------------------------------------------------------------- assemble


def cmd_assemble(args) -> int:
    triton_version = args.triton_version or releases.TESTED
    options = AssemblyOptions(
        args.profile,
        bert_weight=args.bert_weight,
        forest_weight=args.forest_weight,
        max_text_bytes=args.max_text_bytes or contracts.DEFAULT_MAX_TEXT_BYTES,
        bert_format=args.bert_format,
        tensorrt=args.tensorrt,
        tensorrt_cache=args.tensorrt_cache or DEFAULT_TENSORRT_CACHE,
        triton_version=triton_version,
        response_cache=args.response_cache,
        interval_level=args.interval,
        fused=args.fused,
        buckets=args.buckets,
        ragged=args.ragged,
        packed=args.packed,
    )
    manifest = assemble(args.artifacts, args.out, options, force=args.force)
    chosen = pick_bert_format(args.artifacts, args.profile, args.bert_format)

    if args.bert_weight is not None:
        bert_w, forest_w = blend_weights(args.bert_weight, args.forest_weight)
        how = "as given"
    else:
        bert_w, forest_w = manifest.blend_weights or (0.5, 0.5)
        how = "fitted" if manifest.blend_weights else "default: no fitted weights in the set"
    fused = " fused (bert in preprocess, the forest in featurize)" if args.fused else ""
    bert_config = os.path.join(args.out, contracts.BERT, "config.pbtxt")
    ragged = os.path.isfile(bert_config) and bool(read_config(bert_config).batch_input)
    packed = ragged and packed_graph(args.out)
    print(
        f"assembled profile {args.profile!r}{fused} for Triton {releases.release(triton_version).version} in "
        f"{args.out} (max_length {manifest.max_length}, "
        f"ids {describe_buckets(repository_buckets(args.out))}, "
        f"{manifest.n_features} features, BERT {chosen}{' with TensorRT FP16' if args.tensorrt else ''}"
        f"{(', ragged, packed' if packed else ', ragged') if ragged else ''}; "
        f"SCORE = {bert_w:.3f} BERT + {forest_w:.3f} forest, {how}); SCORE_LOW..SCORE_HIGH: "
        f"{interval_words(manifest, (bert_w, forest_w), args.interval)}"
    )
    return 0


def interval_words(manifest, weights, level: float) -> str:
    """What SCORE_LOW..SCORE_HIGH will be, in words."""
    if not manifest.info.get("interval"):
        return "no interval calibration in the set (train-blend calibrates one): the interval is the whole range"
    if for_blend(manifest.info["interval"], weights) is None:
        return "the set's intervals were calibrated for other weights: the interval is the whole range"
    return f"a calibrated {level:g} interval"


# ---------------------------------------------------------------------------- serve


def cmd_serve(args) -> int:
    if args.door_workers < 0:
        raise CommandError(f"--door-workers {args.door_workers}: give 1 or more (0: one per four CPUs)")
    options = ServeOptions(
        args.repository,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        address=args.address,
        tritonserver=args.tritonserver,
        log_file=args.log_file,
        timeout=args.timeout,
        health_interval=args.health_interval,
        health_port=args.health_port,
        stall_timeout=args.stall_timeout,
        cache_size=args.cache_size,
        drain_timeout=args.drain_timeout,
        drain_grace=args.drain_grace,
        max_wait=args.max_wait,
        max_request_bytes=args.max_request_bytes,
        client_header=args.client_header,
        warm_up=args.warm_up,
        freeze_timeout=args.freeze_timeout,
        max_connections=args.max_connections,
        allow_model_uploads=args.allow_model_uploads,
        door_workers=args.door_workers,
    )
    try:
        options.network_prefix = parse_prefixes(args.network_prefix)
    except ValueError as err:
        raise CommandError(f"--network-prefix {err}") from None
    try:
        return Service(options).run()
    except (ServerError, ValueError) as err:
        raise CommandError(str(err)) from None


def cmd_triton_command(args) -> int:
    try:
        print(
            plain_command(
                args.repository,
                http_port=args.http_port,
                grpc_port=args.grpc_port,
                metrics_port=args.metrics_port,
                address=args.address,
                home=args.tritonserver or "",
            )
        )
    except (ServerError, ValueError) as err:
        raise CommandError(str(err)) from None
    except OSError as err:  # the backend folder or the shim cannot be written
        raise CommandError(f"{err.filename or 'a file'}: {err.strerror or err}") from None
    return 0


# ---------------------------------------------------------------------------- score
