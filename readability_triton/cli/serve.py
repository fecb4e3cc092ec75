"""CLI: `assemble`, `serve` and `health`."""
from __future__ import annotations

import os
import signal
import sys
import time

from .. import contracts
from ..errors import CommandError
from ..repository import releases
from ..repository.assemble import assemble, pick_bert_format
from ..repository.canary import Canary
from ..repository.profiles import DEFAULT_TENSORRT_CACHE, PROFILES
from ..scoring import blend_weights
from ..server.admin import ADMIN_HEADER, ADMIN_KEY_ENV
from ..server.backends import servable
from ..server.health import Supervisor, check
from ..server.processes import become_subreaper
from ..server.tritonserver import TritonServer


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "assemble", help="build a complete model repository for a profile from an artifact set",
        description="Write the configs of a profile (gpu, hybrid, cpu, portable, portable-gpu), the Python models' "
                    "model.py and the artifacts into a Triton model repository, after checking the "
                    "artifacts against their manifest.json and the tensor contracts.")
    p.add_argument("--profile", required=True, choices=PROFILES)
    p.add_argument("--artifacts", required=True, metavar="DIR",
                   help="artifact set (model.pt, tokenizer files, checkpoint.tl, vocabulary.json, manifest.json)")
    p.add_argument("--out", required=True, metavar="REPO", help="repository folder to write")
    p.add_argument("--bert-weight", type=float, default=None,
                   help="weight of BERT_SCORE in SCORE (default: the set's fitted weights, from train-blend or "
                        "build-demo; else 0.5)")
    p.add_argument("--forest-weight", type=float, default=None,
                   help="weight of FOREST_SCORE in SCORE (with --bert-weight)")
    p.add_argument("--max-text-bytes", type=int, default=None,
                   help="largest UTF-8 text the Python steps accept (default 100000)")
    p.add_argument("--bert-format", choices=("onnx", "torchscript"), default=None,
                   help="the BERT model to serve when the set holds both (default: onnx; torchscript for "
                        "portable-gpu, where torch runs it on the GPU)")
    p.add_argument("--tensorrt", action="store_true",
                   help="gpu/hybrid with ONNX: let the onnxruntime backend build a TensorRT FP16 engine (built on "
                        "the first requests, then cached)")
    p.add_argument("--tensorrt-cache", default=None, metavar="DIR",
                   help="where the TensorRT engines are cached on the server (default /tmp/readability-triton-trt)")
    p.add_argument("--triton-version", default=None, metavar="YY.MM",
                   help="the Triton release that will serve the repository (default 24.10, the release the "
                        "tests run): its configs differ, e.g. FIL's is_classifier from 25.09")
    p.add_argument("--response-cache", action="store_true",
                   help="let Triton's response cache keep bert's answers, so that texts seen before skip BERT "
                        "(serve it with `serve --cache-size`)")
    p.add_argument("--force", action="store_true", help="replace REPO if it exists")
    p.set_defaults(func=cmd_assemble)

    p = subparsers.add_parser(
        "serve", help="run the tritonserver of the nvidia-pytriton wheel on a repository, supervised",
        description="Run the official tritonserver binary shipped in the nvidia-pytriton wheel (python "
                    "backend and ensembles; it serves the 'portable' profiles) with its model-repository, "
                    "logging, trace and shared-memory APIs closed to clients without the admin key, forward "
                    "its log, restart it (drained) on evidence that it is dead, stuck or answering wrong, "
                    "answer liveness and readiness probes, and drain it then stop it on Ctrl-C or SIGTERM.")
    env = os.environ.get
    p.add_argument("--repository", required=True, metavar="REPO")
    p.add_argument("--http-port", type=int, default=int(env("READABILITY_TRITON_HTTP_PORT", "8000")))
    p.add_argument("--grpc-port", type=int, default=int(env("READABILITY_TRITON_GRPC_PORT", "8001")))
    p.add_argument("--metrics-port", type=int, default=int(env("READABILITY_TRITON_METRICS_PORT", "8002")))
    p.add_argument("--address", default=env("READABILITY_TRITON_ADDRESS", "127.0.0.1"),
                   help="where the endpoints listen (default 127.0.0.1; 0.0.0.0 in a container). Each port and "
                        "this default to $READABILITY_TRITON_<HTTP_PORT|GRPC_PORT|METRICS_PORT|HEALTH_PORT|ADDRESS>")
    p.add_argument("--tritonserver", default=None, metavar="HOME",
                   help="an installed tritonserver (HOME/bin/tritonserver, HOME/backends; an NGC image's "
                        "/opt/tritonserver; default $READABILITY_TRITON_HOME, else the one in the nvidia-pytriton "
                        "wheel)")
    p.add_argument("--log-file", default=None, help="write the server log here instead of stderr")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for readiness")
    p.add_argument("--health-interval", type=float, default=5.0,
                   help="seconds between checks of the processes, the queues' progress and a canary "
                        "inference (0: no supervision; default 5)")
    p.add_argument("--health-port", type=int, default=int(env("READABILITY_TRITON_HEALTH_PORT", "0")) or None,
                   help="answer GET /livez, /readyz and /healthz on this port (liveness never fails "
                        "because of load; readiness: serving right answers)")
    p.add_argument("--stall-timeout", type=float, default=120.0,
                   help="a step with requests queued that finishes nothing for this long counts as stuck "
                        "(default 120 s)")
    p.add_argument("--cache-size", type=int, default=0, metavar="BYTES",
                   help="the response cache's size (Triton's local cache) for a repository assembled with "
                        "--response-cache (default 0: no cache)")
    p.add_argument("--drain-timeout", type=float, default=30.0,
                   help="on SIGTERM, seconds to let requests in flight finish before the server is stopped "
                        "(default 30)")
    p.set_defaults(func=cmd_serve)

    p = subparsers.add_parser(
        "health", help="check a running ensemble (a canary inference) or a running serve's health endpoint",
        description="Without --serve: send the canary text through the 'readability' ensemble at --url and "
                    "check the answer (finite; with --repository, equal to what assemble recorded). With "
                    "--serve HOST:PORT: ask a running `readability-triton serve` for its liveness or "
                    "readiness (GET /livez or /readyz). Exit status 0 (healthy) or 1 (not), with one line "
                    "that says why: usable as a Docker HEALTHCHECK or a Kubernetes exec probe.")
    p.add_argument("--url", default="127.0.0.1:8000", help="server address (default 127.0.0.1:8000)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the answer (default 10)")
    p.add_argument("--repository", default=None, metavar="REPO",
                   help="judge the canary's answer against the one recorded in this assembled repository")
    p.add_argument("--serve", default=None, metavar="HOST:PORT",
                   help="ask serve's health endpoint instead (its --health-port)")
    p.add_argument("--check", choices=("live", "ready"), default="ready",
                   help="with --serve: liveness or readiness (default ready)")
    p.set_defaults(func=cmd_health)


# ------------------------------------------------------------------------- assemble


def cmd_assemble(args) -> int:
    triton_version = args.triton_version or releases.TESTED
    manifest = assemble(args.artifacts, args.out, args.profile, bert_weight=args.bert_weight,
                        forest_weight=args.forest_weight,
                        max_text_bytes=args.max_text_bytes or contracts.DEFAULT_MAX_TEXT_BYTES, force=args.force,
                        bert_format=args.bert_format, tensorrt=args.tensorrt,
                        tensorrt_cache=args.tensorrt_cache or DEFAULT_TENSORRT_CACHE,
                        triton_version=triton_version, response_cache=args.response_cache)
    chosen = pick_bert_format(args.artifacts, args.profile, args.bert_format)

    if args.bert_weight is not None:
        bert_w, forest_w = blend_weights(args.bert_weight, args.forest_weight)
        how = "as given"
    else:
        bert_w, forest_w = manifest.blend_weights or (0.5, 0.5)
        how = "fitted" if manifest.blend_weights else "default: no fitted weights in the set"
    print(f"assembled profile {args.profile!r} for Triton {releases.release(triton_version).version} in "
          f"{args.out} (max_length {manifest.max_length}, "
          f"{manifest.n_features} features, BERT {chosen}{' with TensorRT FP16' if args.tensorrt else ''}; "
          f"SCORE = {bert_w:.3f} BERT + {forest_w:.3f} forest, {how})")
    return 0


# ---------------------------------------------------------------------------- serve


def cmd_serve(args) -> int:
    import threading


    # Adopt what a dying tritonserver leaves (its stubs) to end and reap it; PID 1 in a
    # container does so anyway.
    become_subreaper()
    server = TritonServer(args.repository, args.http_port, args.grpc_port, args.metrics_port,
                          log_file=args.log_file, drain_timeout=args.drain_timeout, address=args.address,
                          home=args.tritonserver or "", cache_size=args.cache_size)
    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    def say(message: str) -> None:
        print(f"readability-triton serve: {message}", file=sys.stderr, flush=True)

    canary = Canary.load(args.repository) if os.path.isdir(args.repository) else None

    try:
        served = servable(server, args.repository, say)
    except ValueError as err:
        raise CommandError(str(err)) from None
    if served != args.repository:
        server.repository = served
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    supervisor = Supervisor(server, interval=args.health_interval or 1.0, canary=canary,
                            stall_timeout=args.stall_timeout, log=say)
    watcher = threading.Thread(target=supervisor.run, daemon=True)
    health_server = None
    try:
        if args.health_port:
            health_server = _health_endpoint(args.health_port, supervisor, args.address)
        server.start(timeout=args.timeout)
        supervisor.started()
        print(f"tritonserver ready (pid {server.pid}): http {server.http_url}, grpc {server.grpc_url}, "
              f"metrics {server.metrics_url}; Ctrl-C stops it", file=sys.stderr, flush=True)
        say(f"the model-repository, logging, trace and shared-memory APIs need the header '{ADMIN_HEADER}' with "
            f"the key in ${ADMIN_KEY_ENV}" + ("" if os.environ.get(ADMIN_KEY_ENV) else
                                              " (none set: a key was generated for this run; set it to use the APIs)"))
        if canary is None:
            say("the repository holds no recorded canary (assemble it again with this version): the health check "
                "can only see that SCORE is finite, not that it is right")
        if health_server is not None:
            say(f"GET /livez, /readyz and /healthz on port {args.health_port}")
        if args.health_interval > 0:
            watcher.start()
        while not stopping:
            if args.health_interval <= 0 and server.running.poll() is not None:
                break
            time.sleep(0.2)
    finally:
        supervisor.stop()
        if watcher.is_alive():
            watcher.join(timeout=60)  # a repair in progress finishes first
        if stopping:
            say(f"stopping: unloading the ensemble and letting the requests in flight finish (at most "
                f"{args.drain_timeout:g} s), then stopping tritonserver")
        code = server.stop()
        if health_server is not None:
            health_server.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if served != args.repository:
            import shutil

            shutil.rmtree(served, ignore_errors=True)
    report = server.last_stop
    if report.get("removed_shm"):
        say(f"removed {len(report['removed_shm'])} /dev/shm segment(s) the server left behind")
    if report.get("orphans"):
        say(f"ended {len(report['orphans'])} process(es) the server left behind")
    if not stopping:
        raise CommandError(f"tritonserver exited on its own with status {code}")
    if report.get("leaked"):
        say("every step finished its requests, but the ensemble still held requests tritonserver 2.51 lost track "
            "of (a gRPC cancellation racing with the answer; fixed in Triton 25.04/25.06): it was ended at once "
            "instead of after its exit timeout")
    detail = "" if report.get("drained") else " (not drained: " + (
        report.get("error") or f"still loaded after the drain timeout: {', '.join(report.get('still_loaded', []))}"
    ) + ")"
    print(f"tritonserver stopped (status {code}){detail}", file=sys.stderr)
    return 0 if report.get("drained") else 1


def _health_endpoint(port: int, supervisor, address: str = "127.0.0.1"):
    """A small HTTP server for probes: GET /livez (200 while serve supervises a running or
    restarting server; load never fails it), /readyz (200 while the server answers right:
    no repair under way, no dead stub, the last canary right or merely busy) and /healthz
    (the whole status as JSON, 200 when ready)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            path = self.path.rstrip("/")
            status = supervisor.status()
            if path == "/livez":
                ok, body = status["live"], ("live" if status["live"] else f"not live: {status['problem']}")
            elif path == "/readyz":
                ok = status["ready"]
                body = "ready" if ok else f"not ready ({status['phase']}): {status['problem'] or status['canary']}"
            elif path == "/healthz":
                ok, body = status["ready"], json.dumps(status)
            else:
                self.send_error(404, "GET /livez, /readyz or /healthz")
                return
            data = (body + "\n").encode("utf-8")
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json" if path == "/healthz" else "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet: probes come every few seconds
            pass

    httpd = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def cmd_health(args) -> int:
    if args.serve:
        import urllib.error
        import urllib.request

        url = f"http://{args.serve}/{args.check}z"
        try:
            with urllib.request.urlopen(url, timeout=args.timeout) as reply:
                print(reply.read().decode("utf-8", "replace").strip())
                return 0
        except urllib.error.HTTPError as err:
            print(err.read().decode("utf-8", "replace").strip(), file=sys.stderr)
        except (urllib.error.URLError, OSError) as err:
            print(f"{url}: {err}", file=sys.stderr)
        return 1

    canary = Canary.load(args.repository) if args.repository else None
    if args.repository and canary is None:
        raise CommandError(f"{args.repository}: no recorded canary (readability/1/canary.json); assemble it again")
    health = check(args.url, args.protocol, args.timeout, canary)
    if health.ok:
        print(f"healthy: {health.message}")
        return 0
    print(f"unhealthy ({health.kind}): {health.message}", file=sys.stderr)
    return 1


# ---------------------------------------------------------------------------- score
