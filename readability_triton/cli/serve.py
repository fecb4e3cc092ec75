"""CLI: `assemble`, `serve`, `score` and `demo`."""
from __future__ import annotations

import csv
import os
import signal
import sys
import time

from .. import contracts
from ..errors import CommandError
from .common import progress

#: Texts of clearly different difficulty, written for this demo.
DEMO_TEXTS = (
    "The cat sat on the mat. It was a warm day. The cat was happy and went to sleep in the sun.",
    "Tom and his sister ran down to the lake after lunch. They threw small stones into the water and "
    "counted the rings until their mother called them home for supper.",
    "The city council voted on Tuesday to extend the bus line to the new hospital, a change that "
    "officials said would shorten many patients' trips by half an hour.",
    "Photosynthesis converts light energy into chemical energy: chlorophyll absorbs photons, and the "
    "resulting electron transport drives the synthesis of ATP and NADPH, which the Calvin cycle then "
    "consumes to fix atmospheric carbon dioxide into carbohydrates.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor against "
    "any liability, howsoever arising, consequent upon the lessee's failure to observe covenants "
    "hereinbefore enumerated, save insofar as such liability proceeds from the lessor's negligence.",
)


#: The most texts one request may carry (the ensemble's max_batch_size).
BATCH_LIMIT = contracts.MAX_BATCH_SIZE[contracts.ENSEMBLE]


def register(subparsers) -> None:
    from ..triton.repository import PROFILES

    p = subparsers.add_parser(
        "assemble", help="build a complete model repository for a profile from an artifact set",
        description="Write the configs of a profile (gpu, hybrid, cpu, portable), the Python models' "
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
                   help="the BERT model to serve when the set holds both (default: torchscript for portable, "
                        "where it runs fastest on the CPU, onnx for gpu/hybrid/cpu)")
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

    p = subparsers.add_parser(
        "score", help="score texts through the readability ensemble of a running server",
        description="Send texts to the 'readability' ensemble and print (or write) SCORE, BERT_SCORE and "
                    "FOREST_SCORE. Texts come from the arguments, a CSV file (--csv), or standard input "
                    "(one text per line).")
    p.add_argument("texts", nargs="*", help="texts to score")
    p.add_argument("--csv", dest="csv_path", metavar="FILE", help="CSV with a text column")
    p.add_argument("--column", default="excerpt", help="text column of --csv (default: excerpt)")
    p.add_argument("--out", metavar="FILE", help="write a CSV with the scores here")
    p.add_argument("--url", default=None, help="server address (default 127.0.0.1:8000 http, :8001 grpc)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--batch-size", type=int, default=BATCH_LIMIT, help=f"texts per request (at most {BATCH_LIMIT})")
    p.add_argument("--outputs", default="SCORE,BERT_SCORE,FOREST_SCORE",
                   help="the ensemble outputs to ask for, comma-separated (default: all three)")
    p.set_defaults(func=cmd_score)

    p = subparsers.add_parser(
        "demo", help="build demo artifacts, serve them, score example texts, stop",
        description="Build (or reuse) demo artifacts, assemble the portable profile, start a real "
                    "tritonserver on 127.0.0.1, score example texts through the ensemble, print a table "
                    "and stop the server.")
    p.add_argument("--artifacts", default=".cache/demo-artifacts", metavar="DIR")
    p.add_argument("--repository", default=".cache/demo-repository", metavar="REPO")
    p.add_argument("--data", default=None, metavar="CSV",
                   help="training CSV (default: the shared CommonLit data if present, else a generated corpus)")
    p.add_argument("--bert", choices=("minilm", "tiny"), default="minilm")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.set_defaults(func=cmd_demo)


# ------------------------------------------------------------------------- assemble


def cmd_assemble(args) -> int:
    from ..triton import releases
    from ..triton.repository import DEFAULT_TENSORRT_CACHE, assemble, pick_bert_format

    triton_version = args.triton_version or releases.TESTED
    manifest = assemble(args.artifacts, args.out, args.profile, bert_weight=args.bert_weight,
                        forest_weight=args.forest_weight,
                        max_text_bytes=args.max_text_bytes or contracts.DEFAULT_MAX_TEXT_BYTES, force=args.force,
                        bert_format=args.bert_format, tensorrt=args.tensorrt,
                        tensorrt_cache=args.tensorrt_cache or DEFAULT_TENSORRT_CACHE,
                        triton_version=triton_version, response_cache=args.response_cache)
    chosen = pick_bert_format(args.artifacts, args.profile, args.bert_format)
    from ..scoring import blend_weights

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

    from ..triton.health import Canary, Supervisor
    from ..triton.server import ADMIN_HEADER, ADMIN_KEY_ENV, TritonServer, become_subreaper

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
    from ..triton.repository import servable

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
    from ..triton.health import Canary, check

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


def _read_texts(args) -> list[str]:
    from ..data import read_table

    if args.csv_path:
        return read_table(args.csv_path, args.column).texts
    if args.texts:
        return list(args.texts)
    if sys.stdin.isatty():
        raise CommandError("no texts: give them as arguments, with --csv FILE, or on standard input")
    texts = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise CommandError("standard input holds no text")
    return texts


#: Columns of `score`'s table and CSV: (ensemble output, Score attribute, CSV header, label).
_COLUMNS = (("BERT_SCORE", "bert", "bert_score", "BERT"), ("FOREST_SCORE", "forest", "forest_score", "forest"),
            ("SCORE", "score", "score", "score"))


def cmd_score(args) -> int:
    from ..triton.client import ReadabilityClient, parse_outputs

    if not 1 <= args.batch_size <= BATCH_LIMIT:
        raise CommandError(f"--batch-size must be between 1 and {BATCH_LIMIT} (the ensemble's max_batch_size)")
    try:
        outputs = parse_outputs(args.outputs)
    except ValueError as err:
        raise CommandError(f"--outputs: {err}") from None
    texts = _read_texts(args)
    url = args.url or ("127.0.0.1:8000" if args.protocol == "http" else "127.0.0.1:8001")
    with ReadabilityClient(url, args.protocol, batch_size=args.batch_size) as client:
        if not client.ready():
            raise CommandError(f"no ready 'readability' model at {url} ({args.protocol}); start one "
                               "with `readability-triton serve --repository REPO`")
        with progress(total=len(texts), unit="text", desc="scoring") as bar:
            scores = client.score(texts, progress=bar, outputs=outputs)
    if args.out:
        # CSV columns: text, then the requested scores in the order score, bert_score, forest_score
        columns = [c for c in (_COLUMNS[2], _COLUMNS[0], _COLUMNS[1]) if c[0] in outputs]
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text"] + [c[2] for c in columns])
            for s in scores:
                writer.writerow([s.text] + [f"{getattr(s, c[1]):.6f}" for c in columns])
        print(f"wrote {len(scores)} scores to {args.out}", file=sys.stderr)
    else:
        print_table(scores, outputs=outputs)
    return 0


def print_table(scores, width: int = 60, latency: bool = False, outputs=contracts.OUTPUTS) -> None:
    columns = [c for c in _COLUMNS if c[0] in outputs]
    header = f"{'text':<{width}}" + "".join(f"  {c[3]:>7}" for c in columns)
    if latency:
        header += f"  {'latency':>9}"
    print(header)
    print("-" * len(header))
    for s in scores:
        text = " ".join(s.text.split())
        text = text if len(text) <= width else text[: width - 1] + "…"
        line = f"{text:<{width}}" + "".join(f"  {getattr(s, c[1]):>7.3f}" for c in columns)
        if latency:
            line += f"  {s.latency_ms:>6.1f} ms"
        print(line)


# ----------------------------------------------------------------------------- demo


def cmd_demo(args) -> int:
    from ..data import COMMONLIT_CSV
    from ..triton.client import ReadabilityClient
    from ..triton.repository import assemble, servable, served_bert
    from ..triton.server import TritonServer, native_backends
    from .training import ensure_demo_artifacts

    data = args.data
    if data is None and os.path.isfile(COMMONLIT_CSV):
        data = os.path.normpath(COMMONLIT_CSV)
    print(f"demo artifacts in {args.artifacts} (BERT branch: {args.bert}; training data: "
          f"{data or 'a corpus generated by readability-triton'})", file=sys.stderr, flush=True)
    built = ensure_demo_artifacts(args.artifacts, data=data, bert=args.bert)
    info = built.manifest.info
    # The fastest CPU profile where Triton's own backends are built here (`make
    # native-backends`): bert on the onnxruntime backend; else portable (README, "Measuring it").
    profile = "cpu" if native_backends() else "portable"
    assemble(args.artifacts, args.repository, profile, force=True)
    log_file = os.path.abspath(args.repository.rstrip("/") + ".server.log")
    open(log_file, "w").close()
    server = TritonServer(args.repository, log_file=log_file)
    try:
        served = servable(server, args.repository, lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as err:
        raise CommandError(str(err)) from None
    server.repository = served
    print(f"profile {profile}: bert {served_bert(args.repository)}; starting tritonserver on 127.0.0.1 (http "
          f"{server.http_port}, grpc {server.grpc_port}); log: {log_file}", file=sys.stderr, flush=True)
    server.start(timeout=300)
    try:
        url = server.http_url if args.protocol == "http" else server.grpc_url
        with ReadabilityClient(url, args.protocol) as client:
            client.score([DEMO_TEXTS[0]])  # warm-up: the first request pays one-time costs in each step
            scores = [client.score([text])[0] for text in DEMO_TEXTS]
    finally:
        code = server.stop()
        if served != args.repository:
            import shutil

            shutil.rmtree(served, ignore_errors=True)
    print(f"\nScores from the 'readability' ensemble ({args.protocol}, profile {profile}, one request per text; "
          "higher = easier, CommonLit scale):\n")
    print_table(scores, latency=True)
    bert, blend = info.get("bert", {}), info.get("blend", {})
    rmse = blend.get("rmse", {})
    print(f"\nBERT branch: {bert.get('encoder', args.bert)}. Out-of-fold RMSE on the {blend.get('n_texts')} training "
          f"texts ({bert.get('folds')} folds): BERT {rmse.get('bert', float('nan')):.3f}, forest "
          f"{rmse.get('forest', float('nan')):.3f}, SCORE {rmse.get('score', float('nan')):.3f} with the fitted "
          f"weights SCORE = {blend.get('bert_weight', 0.5):.3f} BERT + {blend.get('forest_weight', 0.5):.3f} forest "
          f"(at 0.5/0.5: {rmse.get('score_at_0.5', float('nan')):.3f}).")
    if not info.get("data", {}).get("calibrated", True):
        print("NOTE: trained on a corpus generated by readability-triton (no CommonLit data found): these "
              "scores are illustrative, not CommonLit-calibrated. Pass --data train.csv for real ones.")
    print(f"tritonserver (pid {server.pid}) stopped, status {code}.")
    return 0
