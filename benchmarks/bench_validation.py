"""What validating before the fan-out costs, measured on the real tritonserver.

Only the ensemble's first step may refuse a request (see `contracts.ENSEMBLE_STEPS`).
Two ways to honour that, and the unsafe graph they replace, on the same artifacts:

- `validate-step`: a `validate` model checks TEXT and both branches read its output (the
  shipped design);
- `preprocess-validates`: no extra model: `preprocess` checks TEXT, tokenizes it and
  passes it on, and `featurize` reads that copy (so featurize waits for tokenization);
- `unsafe`: no validation step: both branches read the client's TEXT and each refuses bad
  text itself (what corrupted requests under load).

For each, good requests of one CommonLit excerpt: the median latency with one client
and the throughput with 16 clients, over gRPC, in interleaved rounds (medians over
rounds). Run:

    python benchmarks/bench_validation.py [--artifacts DIR] [--seconds 10] [--rounds 2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import numpy as np

from readability_triton import contracts as C
from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.triton import configs, load, repository
from readability_triton.triton.server import TritonServer

VARIANTS = ("validate-step", "preprocess-validates", "unsafe")

#: preprocess for `preprocess-validates`: the shipped adapter (base_model.py beside it),
#: with validate's check and TEXT passed on as VALID_TEXT.
PASSING_PREPROCESS = '''
import importlib.util
import os

import numpy as np
import triton_python_backend_utils as pb_utils

from readability_triton import contracts, serving

_spec = importlib.util.spec_from_file_location("preprocess_base", os.path.join(os.path.dirname(__file__),
                                                                              "base_model.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)


class TritonPythonModel(_base.TritonPythonModel):
    def execute(self, requests):
        batch = serving.read_text_requests(pb_utils, requests, contracts.TEXT, self.max_text_bytes,
                                           require_words=True)
        return serving.run_batch(pb_utils, batch, self._tokenize_and_pass, logger=pb_utils.Logger)

    def _tokenize_and_pass(self, texts):
        out = self._tokenize(texts)
        rows = np.empty((len(texts), 1), dtype=np.object_)
        rows[:, 0] = texts
        out[contracts.VALID_TEXT] = rows
        return out
'''


def _replace_scheduling(repo: str, wiring) -> None:
    path = os.path.join(repo, C.ENSEMBLE, "config.pbtxt")
    with open(path, encoding="utf-8") as handle:
        config = handle.read()
    config = config[:config.index("ensemble_scheduling")] + configs.ensemble_scheduling(wiring)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(config)


def make_variant(artifacts: str, out: str, variant: str) -> str:
    repository.assemble(artifacts, out, "portable")
    steps = {step[0]: step for step in C.ENSEMBLE_STEPS}
    if variant == "validate-step":
        return out
    shutil.rmtree(os.path.join(out, C.VALIDATE))
    if variant == "unsafe":
        wiring = [(m, {k: (C.TEXT if v == C.VALID_TEXT else v) for k, v in i.items()}, o)
                  for m, i, o in C.ENSEMBLE_STEPS if m != C.VALIDATE]
    else:
        version = os.path.join(out, C.PREPROCESS, "1")
        os.replace(os.path.join(version, "model.py"), os.path.join(version, "base_model.py"))
        with open(os.path.join(version, "model.py"), "w", encoding="utf-8") as handle:
            handle.write(PASSING_PREPROCESS)
        config_path = os.path.join(out, C.PREPROCESS, "config.pbtxt")
        with open(config_path, encoding="utf-8") as handle:
            config = handle.read()
        config = config.replace("output [\n", f'output [\n  {{\n    name: "{C.VALID_TEXT}"\n    data_type: '
                                               f'TYPE_STRING\n    dims: [ 1 ]\n  }},\n', 1)
        with open(config_path, "w", encoding="utf-8") as handle:
            handle.write(config)
        _, _, pre_out = steps[C.PREPROCESS]
        wiring = [(C.PREPROCESS, {C.TEXT: C.TEXT}, {**pre_out, C.VALID_TEXT: C.VALID_TEXT})]
        wiring += [step for step in C.ENSEMBLE_STEPS if step[0] not in (C.VALIDATE, C.PREPROCESS)]
    _replace_scheduling(out, wiring)
    return out


def measure(server: TritonServer, texts, expected, clients: int, seconds: float) -> dict:
    work, close = load.mixed_worker(server.grpc_url, "grpc", texts, expected, [], bad_every=0, tolerance=1e-3)
    try:
        outcomes = load.closed_loop(work, clients, seconds)
    finally:
        close()
    good = [o for o in outcomes if o.ok and not o.wrong]
    return {"texts_per_s": len(good) / seconds, "p50_ms": load.percentiles([o.latency for o in good])["p50"],
            "failed": len(outcomes) - len(good)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", help="artifact set (default: build the small test set: a 2-layer BERT, "
                                            "where the steps' own cost shows most)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    texts = read_table(COMMONLIT_CSV).texts[:200] if os.path.isfile(COMMONLIT_CSV) else None
    with tempfile.TemporaryDirectory(prefix="bench-validation-") as tmp:
        artifacts = args.artifacts
        if artifacts is None:
            from readability_triton.artifacts.demo import build_demo, generate_corpus

            artifacts = os.path.join(tmp, "artifacts")
            build_demo(artifacts, bert="tiny", max_length=64, folds=2, corpus_size=240,
                       forest_params={"n_estimators": 12, "max_depth": 8})
            texts = texts or generate_corpus(200)[0]
        results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for round_ in range(args.rounds):
            order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                repo = make_variant(artifacts, os.path.join(tmp, f"{variant}-{round_}"), variant)
                with TritonServer(repo, log_file=os.path.join(tmp, f"{variant}-{round_}.log")) as server:
                    expected = _scores(server, texts)
                    measure(server, texts, expected, 1, 2.0)  # warm-up
                    one = measure(server, texts, expected, 1, args.seconds)
                    many = measure(server, texts, expected, 16, args.seconds)
                results[variant].append({"c1": one, "c16": many})
                print(f"round {round_ + 1} {variant}: 1 client p50 {one['p50_ms']:.1f} ms; 16 clients "
                      f"{many['texts_per_s']:.1f} texts/s", file=sys.stderr, flush=True)
    print(f"\n{'variant':<22} {'p50, 1 client':>14} {'texts/s, 16 clients':>20} {'vs validate-step':>17}")
    base = statistics.median(r["c16"]["texts_per_s"] for r in results["validate-step"])
    for variant in VARIANTS:
        p50 = statistics.median(r["c1"]["p50_ms"] for r in results[variant])
        rate = statistics.median(r["c16"]["texts_per_s"] for r in results[variant])
        failed = sum(r["c1"]["failed"] + r["c16"]["failed"] for r in results[variant])
        print(f"{variant:<22} {p50:>11.1f} ms {rate:>20.1f} {rate / base:>16.2f}x"
              + (f"  ({failed} failed)" if failed else ""))
    return 0


def _scores(server, texts) -> np.ndarray:
    """Each text's SCORE, asked for alone (what the load's answers are checked against)."""
    from readability_triton.triton.client import ReadabilityClient

    with ReadabilityClient(server.grpc_url, "grpc") as client:
        return np.array([client.score([text], outputs=(C.SCORE,))[0].score for text in texts])


if __name__ == "__main__":
    sys.exit(main())
