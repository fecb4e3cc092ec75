"""The pipeline's own cost, against Triton's floor, in one run.

Three things are measured side by side, in rotating rounds, one text per request over gRPC
(closed loops of 1 and 4 clients):

- `chain`: six trivial Python models in an ensemble chain (each returns its BYTES input),
  configured as the project's steps are (dynamic batching, no queue delay, one CPU
  instance): what six python-backend hops cost on this server, and nothing else;
- `ensemble`: the project's repository (the `portable` tiny set by default, whose BERT is
  almost free, so that what remains is the pipeline's plumbing);
- `in process`: the same runners on the same texts in this process (`pipeline`), one
  thread of calls, one text per call;
- with `--baseline REPO`, a fourth: another assembled repository (for example one built by
  an earlier commit, with the earlier wiring) served by the same code, side by side; with
  `--baseline-code DIR` as well, by the code in DIR (a checkout of an earlier commit, `git
  worktree add DIR <commit>`): its stubs import the package from there, and its own
  in-process rate is measured with that code too (in a child process), so that the table
  gives the baseline's own cost beside the ensemble's: then and now, on the same host, in
  one run;
- with `--bls`, the alternative to an ensemble: the same step models driven by a BLS
  orchestrator (a Python model that calls them with `InferenceRequest.async_exec`, once per
  step for the whole batch it was given), two ways: `bls`, the steps one after another in
  the ensemble's order; `bls dag`, each step as soon as its inputs
  are there (after the first step, which checks the text: the forest beside preprocess and
  BERT). Both are checked to answer what the ensemble answers before they are timed;
- with `--unbatched`, a copy of the repository whose steps have no dynamic batcher: each
  request goes straight to the step's instance (one thread hop less per step in
  tritonserver), and no step batches across requests;
- with `--steps`, where each step's time goes: Triton's statistics of every step of the
  ensemble, read around its rounds (queue and compute per request, requests per execution),
  beside the chain's steps read the same way (a bare hop: what a step costs that does
  nothing); and inside each step's `execute`, timed in its stub (`stub.phases`): the
  admission gate, reading the requests, the runner and answering, beside a bare hop's whole
  `execute` and Triton's compute outside it, per execution (the timing costs each execute
  a few microseconds, and writing the totals a fraction of a millisecond every 0.2 s, in the
  chain's steps as in the ensemble's; the other tables of a `--steps` run include both).

The pipeline's own cost per text is (1/served rate − 1/in-process rate) at each client
count; the chain's is 1/its rate (it does nothing else). Reported: texts/s, p50, the
served/in-process ratio, both costs and their ratio.

    python benchmarks/bench_overhead.py --artifacts .cache/test-artifacts/tiny --rounds 3 --duration 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from readability_triton import contracts as C
from readability_triton.client.readability import ThreadClients, text_input
from readability_triton.corpus import default_texts
from readability_triton.measure.bench import STEPS as GRAPH_STEPS
from readability_triton.measure.bench import breakdown, compute_ms, settled_statistics
from readability_triton.measure.load import closed_loop, percentiles
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server.tritonserver import TritonServer
from readability_triton.stub.phases import PHASES, PHASES_ENV, WRITE_EVERY_S, phase_rows, read_phases
from readability_triton.validation import checked_texts

STEPS = 6
_IDENTITY = """
import triton_python_backend_utils as pb_utils

from readability_triton.stub.phases import Phases


def answer(requests):
    return [
        pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
        for r in requests
    ]


class TritonPythonModel:
    def initialize(self, args):
        # with --steps: its execute, timed as the project's steps time theirs
        self.phases = Phases.from_environment(args["model_name"], args.get("model_instance_name", ""))

    def execute(self, requests):
        if self.phases is None:
            return answer(requests)
        return self.phases.measure(len(requests), lambda mark: answer(requests))
"""
_STEP_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 64
input {{ name: "IN" data_type: TYPE_STRING dims: 1 }}
output {{ name: "OUT" data_type: TYPE_STRING dims: 1 }}
dynamic_batching {{ max_queue_delay_microseconds: 0 }}
instance_group {{ count: 1 kind: KIND_CPU }}
"""


def write_chain(root: str) -> str:
    """The trivial chain: `chain` (an ensemble) over step0 ... step5."""
    steps = []
    for i in range(STEPS):
        name = f"step{i}"
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(_STEP_CONFIG.format(name=name))
        with open(os.path.join(root, name, "1", "model.py"), "w", encoding="utf-8") as handle:
            handle.write(_IDENTITY)
        source = C.TEXT if i == 0 else f"T{i}"
        target = "OUT" if i == STEPS - 1 else f"T{i + 1}"
        steps.append(
            f'step {{ model_name: "{name}" model_version: -1 input_map {{ key: "IN" value: "{source}" }} '
            f'output_map {{ key: "OUT" value: "{target}" }} }}'
        )
    os.makedirs(os.path.join(root, "chain", "1"))
    with open(os.path.join(root, "chain", "config.pbtxt"), "w", encoding="utf-8") as handle:
        handle.write(
            'name: "chain"\nplatform: "ensemble"\nmax_batch_size: 64\n'
            f'input {{ name: "{C.TEXT}" data_type: TYPE_STRING dims: 1 }}\n'
            'output { name: "OUT" data_type: TYPE_STRING dims: 1 }\n'
            "ensemble_scheduling {\n  " + "\n  ".join(steps) + "\n}\n"
        )
    return root


_BLS = """
import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils

#: [model, {{its input: tensor}}, {{its output: tensor}}] in the ensemble's step order
STEPS = json.loads({steps!r})
#: for each step, the steps after the first that it waits for (None: one after another)
DAG = {dag!r}
OUTPUTS = {outputs!r}


class TritonPythonModel:
    async def execute(self, requests):
        # one pass for the whole batch: the requests' texts go through the steps together
        sizes = [len(pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()) for r in requests]
        texts = np.concatenate([pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy() for r in requests])
        tensors = {{"TEXT": texts}}
        try:
            if DAG is None:  # one after another
                for index in range(len(STEPS)):
                    await self._step(index, tensors)
            else:  # the first step alone (it checks the text), then each step once its inputs are made
                await self._step(0, tensors)
                tasks = {{}}

                async def run(index):
                    await asyncio.gather(*(tasks[i] for i in DAG[index]))
                    await self._step(index, tensors)

                for index in range(1, len(STEPS)):
                    tasks[index] = asyncio.ensure_future(run(index))
                for outcome in await asyncio.gather(*tasks.values(), return_exceptions=True):
                    if isinstance(outcome, BaseException):
                        raise outcome
        except pb_utils.TritonModelException as exc:  # a step refused the batch: every request of it
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))) for _ in requests]
        responses, start = [], 0
        for request, size in zip(requests, sizes):
            wanted = request.requested_output_names() or OUTPUTS
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor(n, tensors[n][start : start + size]) for n in wanted])
            )
            start += size
        return responses

    async def _step(self, index, tensors):
        model, inputs, outputs = STEPS[index]
        request = pb_utils.InferenceRequest(
            model_name=model,
            requested_output_names=list(outputs),
            inputs=[pb_utils.Tensor(name, tensors[t]) for name, t in inputs.items() if t in tensors],
        )
        response = await request.async_exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        for name, t in outputs.items():
            tensors[t] = pb_utils.get_output_tensor_by_name(response, name).as_numpy()
"""


def write_bls(repo: str, root: str) -> str:
    """A copy of the assembled repository `repo` at `root`, with two BLS orchestrators of its
    ensemble's steps beside the ensemble: `bls` (one step after another) and `bls_dag`."""
    import shutil

    from google.protobuf import json_format, text_format

    from readability_triton.repository.configs import read_config

    shutil.copytree(repo, root)
    ensemble = read_config(os.path.join(root, C.ENSEMBLE, "config.pbtxt"))
    steps = [
        [step.model_name, dict(step.input_map), dict(step.output_map)] for step in ensemble.ensemble_scheduling.step
    ]
    maker = {t: i for i, (_, _, outputs) in enumerate(steps) for t in outputs.values()}
    # a step waits for the steps whose tensors it reads, but not for the serial wiring's
    # ordering input (AFTER, optional: the DAG leaves it out)
    dag = {
        i: sorted({maker[t] for name, t in inputs.items() if t in maker and name != C.AFTER} - {0})
        for i, (_, inputs, _) in enumerate(steps)
    }
    for i, (_, inputs, _) in enumerate(steps):
        if i:
            steps[i][1] = {name: t for name, t in inputs.items() if name != C.AFTER}
    outputs = [o.name for o in ensemble.output]
    for name, order in (("bls", None), ("bls_dag", dag)):
        config = json_format.MessageToDict(ensemble, preserving_proto_field_name=True)
        config.pop("ensemble_scheduling", None)
        config.pop("platform", None)
        config.update(
            name=name,
            backend="python",
            dynamic_batching={},
            instance_group=[{"count": 1, "kind": "KIND_CPU"}],
        )
        message = json_format.ParseDict(config, type(ensemble)())
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(text_format.MessageToString(message))
        source = _BLS.format(
            steps=json.dumps(steps),
            dag=order,
            outputs=outputs,
        )
        with open(os.path.join(root, name, "1", "model.py"), "w", encoding="utf-8") as handle:
            handle.write(source)
    return root


def write_unbatched(repo: str, root: str) -> str:
    """A copy of the assembled repository `repo` at `root` whose steps have no
    dynamic_batching (the ensemble is left as it is)."""
    import shutil

    from readability_triton.repository.configs import edit_config, present_models

    shutil.copytree(repo, root)
    for model in present_models(root):
        if model != C.ENSEMBLE:
            edit_config(os.path.join(root, model, "config.pbtxt"), lambda config: config.ClearField("dynamic_batching"))
    return root


def same_answers(url: str, models: list[str], texts: list[str]) -> None:
    """Every model answers every text with the same outputs (the BLS orchestrators against
    the ensemble), or SystemExit says where they differ."""
    import numpy as np

    pool = ThreadClients(url, "grpc")
    try:
        module, triton = pool.get()
        for text in texts:
            answers = []
            for model in models:
                result = triton.infer(model, [text_input(module, [text])])
                outputs = [o["name"] for o in result.get_response(as_json=True)["outputs"]]
                answers.append({name: result.as_numpy(name) for name in outputs})
            for model, answer in zip(models[1:], answers[1:]):
                if sorted(answer) != sorted(answers[0]) or not all(
                    np.array_equal(answer[n], answers[0][n]) for n in answer
                ):
                    raise SystemExit(f"{model} answered {text[:40]!r} differently from {models[0]}")
    finally:
        pool.close()


@contextlib.contextmanager
def environment(name: str, value: str | None):
    """`name` set to `value` in this process's environment (none: left as it is) for the
    block: what a server started in it inherits."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def phase_snapshot(folder: str, url: str, model: str, text: str) -> dict[str, dict]:
    """The stubs' phase totals (`stub.phases`), all written: one more request once their
    write interval has passed (each step writes before it answers)."""
    import tritonclient.grpc as grpcclient

    time.sleep(WRITE_EVERY_S + 0.05)
    client = grpcclient.InferenceServerClient(url)
    try:
        client.infer(model, [text_input(grpcclient, [text])])
    finally:
        client.close()
    return read_phases(folder)


def median_phases(samples: list[dict[str, dict]]) -> dict[str, dict[str, float]]:
    """{step: medians over the rounds} of `phase_rows`' rows."""
    steps = [step for step in samples[0]] if samples else []
    return {
        step: {
            key: statistics.median(s[step][key] for s in samples if step in s)
            for key in ("execute", *PHASES, "write", "requests_per_execute")
        }
        for step in steps
    }


def served_row(url: str, model: str, texts: list[str], clients: int, seconds: float) -> dict:
    pool = ThreadClients(url, "grpc")

    def work(client: int, i: int):
        from readability_triton.measure.load import Outcome

        module, triton = pool.get()
        text = texts[(client * 7919 + i) % len(texts)]
        started = time.perf_counter()
        triton.infer(model, [text_input(module, [text])])
        return Outcome(started, time.perf_counter() - started, "good", True)

    try:
        closed_loop(work, clients, min(2.0, seconds / 4))  # warm-up
        outcomes = closed_loop(work, clients, seconds)
    finally:
        pool.close()
    return {"texts_per_s": len(outcomes) / seconds, "p50_ms": percentiles([o.latency for o in outcomes])["p50"]}


def medians(samples: dict, name: str, clients: int) -> tuple[float, float]:
    """The medians of a served variant's rounds at `clients`: texts/s and p50 ms."""
    rows = samples[(name, clients)]
    return statistics.median(r["texts_per_s"] for r in rows), statistics.median(r["p50_ms"] for r in rows)


def step_rows(samples: list[dict[str, dict]]) -> dict[str, dict[str, float]]:
    """{step: medians over the rounds} of `breakdown`'s rows (one dict per round): queue and
    compute (input + infer + output) per request in ms, and requests per execution."""
    out: dict[str, dict[str, float]] = {}
    for step in samples[0] if samples else {}:
        rows = [s[step] for s in samples if s.get(step, {}).get("requests")]
        if not rows:
            continue
        out[step] = {
            "queue_ms": statistics.median(r["queue_ms_per_request"] or 0.0 for r in rows),
            "compute_ms": statistics.median(compute_ms(r) for r in rows),
            "compute_ms_per_execution": statistics.median(compute_ms(r, "execution") for r in rows),
            "requests_per_execution": statistics.median(r["requests"] / max(r["executions"], 1) for r in rows),
        }
    return out


def runner_times(pipeline, texts: list[str], seconds: float, fused: bool = False) -> dict[str, float]:
    """{step: ms per text} of each step's runner in this process, one text at a time through
    all of them in the ensemble's order (what `in process` runs), timed runner by runner;
    `fused`: by the steps of the fused repository (bert's time in preprocess's, the forest's
    in featurize's: `contracts.FUSED_INTO`)."""
    spent = dict.fromkeys(C.step_models(False), 0.0)
    done, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        chunk = [texts[done % len(texts)]]
        t0 = time.perf_counter()
        rows = checked_texts(chunk, C.DEFAULT_MAX_TEXT_BYTES)  # the entrance's check, as featurize runs it
        features, words, *_ = pipeline.features(rows)
        t1 = time.perf_counter()
        forest = pipeline.forest(features).reshape(-1)
        t2 = time.perf_counter()
        ids, mask = pipeline.tokenizer(rows)
        t3 = time.perf_counter()
        bert = pipeline.bert(ids, mask).reshape(-1)
        t4 = time.perf_counter()
        pipeline.blender(bert, forest, words.reshape(-1).astype(np.float32))
        t5 = time.perf_counter()
        for step, (a, b) in zip(spent, ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5))):
            spent[step] += b - a
        done += 1
    times = {step: total * 1e3 / done for step, total in spent.items()}
    if fused:
        for model, home in C.FUSED_INTO.items():
            times[home] += times.pop(model)
    return times


def in_process_rate(pipeline, texts: list[str], seconds: float) -> float:
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        pipeline([texts[done % len(texts)]], validate=True)
        done += 1
    return done / (time.perf_counter() - started)


#: What a child process runs to time another checkout's code in process: its
#: `repository_pipeline` over the given repository, one text per call, as `in_process_rate`.
_CHILD_RATE = """
import json, sys, time
from readability_triton.repository.assemble import repository_pipeline
repo, seconds, texts = sys.argv[1], float(sys.argv[2]), json.load(sys.stdin)
pipeline = repository_pipeline(repo)
pipeline([texts[0]], validate=True)
done, started = 0, time.perf_counter()
while time.perf_counter() - started < seconds:
    pipeline([texts[done % len(texts)]], validate=True)
    done += 1
import readability_triton
print(json.dumps({"texts_per_s": done / (time.perf_counter() - started), "package": readability_triton.__file__}))
"""


def code_rate(code: str, repo: str, texts: list[str], seconds: float) -> float:
    """Texts per second of the package in `code` (a checkout), in process over `repo`, one
    text per call: in a child process whose imports come from `code` first."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (code, os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run(
        [sys.executable, "-P", "-c", _CHILD_RATE, repo, str(seconds)],  # -P: no cwd first on sys.path
        input=json.dumps(texts),
        env=env,
        capture_output=True,
        text=True,
        timeout=seconds + 300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the code in {code} could not run {repo} in process: {done.stderr.strip()[-600:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if not _inside(answer["package"], code):
        raise RuntimeError(f"the child timed the package in {answer['package']}, not the one in {code}")
    return float(answer["texts_per_s"])


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(folder)]) == os.path.realpath(folder)


def stub_environment(server_pid: int, name: str) -> dict[int, str | None]:
    """{pid: the value of `name` in its environment (None: unset)} for each python-backend
    stub of the tritonserver `server_pid` (its child processes)."""
    found: dict[int, str | None] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            if parent != server_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                pairs = dict(item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        value = pairs.get(name.encode())
        found[int(entry)] = None if value is None else value.decode()
    return found


def check_baseline_code(server_pid: int, code: str) -> None:
    """RuntimeError unless every stub of the baseline server imports from `code` first (its
    PYTHONPATH begins there: PYTHONPATH comes before the editable install's finder)."""
    stubs = stub_environment(server_pid, "PYTHONPATH")
    wrong = {pid: value for pid, value in stubs.items() if not value or not _inside(value.split(os.pathsep)[0], code)}
    if not stubs or wrong:
        raise RuntimeError(f"the baseline's stubs do not import from {code}: PYTHONPATH {wrong or 'no stub found'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", required=True, help="the set to serve (portable)")
    parser.add_argument("--repository", default=None, help="serve this assembled repository instead")
    parser.add_argument(
        "--baseline", default=None, help="also serve this assembled repository, side by side (e.g. an earlier wiring)"
    )
    parser.add_argument(
        "--baseline-code",
        default=None,
        help="with --baseline: serve it (and time it in process) with the package in this checkout",
    )
    parser.add_argument(
        "--bls", action="store_true", help="also serve the steps driven by BLS orchestrators (bls, bls dag)"
    )
    parser.add_argument(
        "--unbatched", action="store_true", help="also serve a copy whose steps have no dynamic batcher"
    )
    parser.add_argument(
        "--steps", action="store_true", help="also show each step's queue and compute beside a bare hop's"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.baseline_code and not args.baseline:
        parser.error("--baseline-code needs --baseline (the repository that code serves)")
    if args.baseline_code and not os.path.isdir(os.path.join(args.baseline_code, "readability_triton")):
        parser.error(f"--baseline-code {args.baseline_code}: no readability_triton package there")
    if args.baseline_code:
        args.baseline_code = os.path.abspath(args.baseline_code)
    texts = default_texts()[0][:400]
    clients = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        repo = args.repository or os.path.join(tmp, "repository")
        if not args.repository:
            repository.assemble(args.artifacts, repo, AssemblyOptions("portable"))
        pipeline = repository.repository_pipeline(repo)
        chain = TritonServer(write_chain(os.path.join(tmp, "chain")), log_file=os.path.join(tmp, "chain.log"))
        served = TritonServer(repo, log_file=os.path.join(tmp, "ensemble.log"))
        baseline = TritonServer(args.baseline, log_file=os.path.join(tmp, "baseline.log")) if args.baseline else None
        bls = (
            TritonServer(write_bls(repo, os.path.join(tmp, "bls")), log_file=os.path.join(tmp, "bls.log"))
            if args.bls
            else None
        )
        unbatched = (
            TritonServer(
                write_unbatched(repo, os.path.join(tmp, "unbatched")), log_file=os.path.join(tmp, "unbatched.log")
            )
            if args.unbatched
            else None
        )
        servers = [s for s in (chain, served, baseline, bls, unbatched) if s is not None]
        # with --steps, the chain's and the ensemble's stubs time their executes (stub.phases)
        phase_dirs = {}
        if args.steps:
            phase_dirs = {name: os.path.join(tmp, f"phases-{name}") for name in ("chain", "ensemble")}
            for folder in phase_dirs.values():
                os.makedirs(folder)
        samples: dict = {}
        step_samples: dict = {}  # (name, clients): [breakdown of one round]
        phase_samples: dict = {}  # (name, clients): [phase_rows of one round]
        hot: list[dict[str, float]] = []  # each round's runner_times
        chain_steps = tuple(f"step{i}" for i in range(STEPS))
        try:
            for each in servers:
                timed_in = phase_dirs.get("chain" if each is chain else "ensemble" if each is served else "")
                code = args.baseline_code if each is baseline else None
                with environment(PHASES_ENV, timed_in), environment("PYTHONPATH", code):
                    each.start(timeout=300)
                if code:
                    check_baseline_code(each.pid, code)
            if bls is not None:
                same_answers(bls.grpc_url, [C.ENSEMBLE, "bls", "bls_dag"], texts[:20])
            for round_ in range(args.rounds):
                for c in clients:
                    order = [("chain", chain, "chain"), ("ensemble", served, C.ENSEMBLE), ("in process", None, None)]
                    if baseline is not None:
                        order.append(("baseline", baseline, C.ENSEMBLE))
                    if args.baseline_code:
                        order.append(("baseline in process", None, None))
                    if bls is not None:
                        order += [("bls", bls, "bls"), ("bls dag", bls, "bls_dag")]
                    if unbatched is not None:
                        order.append(("unbatched", unbatched, C.ENSEMBLE))
                    order = order[round_ % len(order) :] + order[: round_ % len(order)]
                    for name, server, model in order:
                        if name == "baseline in process":
                            rate = code_rate(args.baseline_code, args.baseline, texts, args.duration / 2)
                            row = {"texts_per_s": rate}
                        elif server is None or model is None:
                            row = {"texts_per_s": in_process_rate(pipeline, texts, args.duration / 2)}
                            if args.steps:
                                hot.append(runner_times(pipeline, texts, args.duration / 4, configs.is_fused(repo)))
                        else:
                            watched = args.steps and name in ("chain", "ensemble")
                            if watched:
                                phases_before = phase_snapshot(phase_dirs[name], server.grpc_url, model, texts[0])
                                before = settled_statistics(server.grpc_url, "grpc")
                            row = served_row(server.grpc_url, model, texts, c, args.duration)
                            if watched:  # both sides count both flush requests (phase_snapshot)
                                phases_after = phase_snapshot(phase_dirs[name], server.grpc_url, model, texts[0])
                                after = settled_statistics(server.grpc_url, "grpc")
                                models = chain_steps if name == "chain" else GRAPH_STEPS
                                step_samples.setdefault((name, c), []).append(breakdown(before, after, models))
                                phase_samples.setdefault((name, c), []).append(phase_rows(phases_before, phases_after))
                        samples.setdefault((name, c), []).append(row)
                        print(f"round {round_ + 1}, {c} client(s), {name}: {row}", file=sys.stderr, flush=True)
        finally:
            for each in servers:
                each.stop()
    report: dict = {"cpus": os.cpu_count(), "rounds": args.rounds, "duration_s": args.duration, "rows": []}
    print(f"\n{args.rounds} rounds x {args.duration:g} s, 1 text per request over gRPC, {os.cpu_count()} CPUs\n")
    print(
        "| clients | chain texts/s (p50 ms) | ensemble texts/s (p50 ms) | in process texts/s | served / in process "
        "| own cost ms/text | chain ms/text | own / chain |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for c in clients:
        measured = {name: medians(samples, name, c) for name in ("chain", "ensemble")}
        med = {name: rate for name, (rate, _) in measured.items()}
        med["in process"] = statistics.median(r["texts_per_s"] for r in samples[("in process", c)])
        p50 = {name: latency for name, (_, latency) in measured.items()}
        own = 1e3 / med["ensemble"] - 1e3 / med["in process"]
        floor = 1e3 / med["chain"]
        row = {
            "clients": c,
            **{f"{k}_texts_per_s": v for k, v in med.items()},
            "chain_p50_ms": p50["chain"],
            "ensemble_p50_ms": p50["ensemble"],
            "served_vs_in_process": med["ensemble"] / med["in process"],
            "own_cost_ms": own,
            "chain_cost_ms": floor,
            "own_vs_chain": own / floor,
        }
        report["rows"].append(row)
        print(
            f"| {c} | {med['chain']:.1f} ({p50['chain']:.2f}) | {med['ensemble']:.1f} ({p50['ensemble']:.2f}) | "
            f"{med['in process']:.1f} | {row['served_vs_in_process']:.2f} | {own:.2f} | {floor:.2f} | "
            f"{row['own_vs_chain']:.2f} |"
        )
    if baseline is not None:
        by = f" by the code in {args.baseline_code}" if args.baseline_code else ""
        print(f"\nbaseline: {args.baseline}, served{by} side by side\n")
        head = "| clients | baseline texts/s (p50 ms) | ensemble texts/s (p50 ms) | ensemble / baseline (texts/s) |"
        if args.baseline_code:
            head += (
                " baseline in process | baseline served / in process | baseline own cost ms/text | own cost ms/text |"
            )
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for c in clients:
            (base, base_p50), (new, new_p50) = medians(samples, "baseline", c), medians(samples, "ensemble", c)
            entry = {"clients": c, "baseline_texts_per_s": base, "baseline_p50_ms": base_p50, "vs_baseline": new / base}
            line = f"| {c} | {base:.1f} ({base_p50:.2f}) | {new:.1f} ({new_p50:.2f}) | {new / base:.2f} |"
            if args.baseline_code:
                base_in = statistics.median(r["texts_per_s"] for r in samples[("baseline in process", c)])
                now_in = statistics.median(r["texts_per_s"] for r in samples[("in process", c)])
                entry.update(
                    baseline_in_process_texts_per_s=base_in,
                    baseline_served_vs_in_process=base / base_in,
                    baseline_own_cost_ms=1e3 / base - 1e3 / base_in,
                    ensemble_own_cost_ms=1e3 / new - 1e3 / now_in,
                )
                line += (
                    f" {base_in:.1f} | {base / base_in:.2f} | {entry['baseline_own_cost_ms']:.2f} |"
                    f" {entry['ensemble_own_cost_ms']:.2f} |"
                )
            report.setdefault("baseline", []).append(entry)
            print(line)
    if bls is not None:
        print("\nthe same steps driven by a BLS orchestrator instead of the ensemble, side by side\n")
        print("| clients | ensemble texts/s (p50 ms) | bls | bls dag | bls / ensemble | bls dag / ensemble |")
        print("|---|---|---|---|---|---|")
        for c in clients:
            pair = {name: medians(samples, name, c) for name in ("ensemble", "bls", "bls dag")}
            ratios = {name: pair[name][0] / pair["ensemble"][0] for name in ("bls", "bls dag")}
            report.setdefault("bls", []).append(
                {
                    "clients": c,
                    **{f"{name.replace(' ', '_')}_texts_per_s": pair[name][0] for name in ("bls", "bls dag")},
                    **{f"{name.replace(' ', '_')}_p50_ms": pair[name][1] for name in ("bls", "bls dag")},
                    **{f"{name.replace(' ', '_')}_vs_ensemble": r for name, r in ratios.items()},
                }
            )
            cells = " | ".join(f"{pair[n][0]:.1f} ({pair[n][1]:.2f})" for n in ("ensemble", "bls", "bls dag"))
            print(f"| {c} | {cells} | {ratios['bls']:.2f} | {ratios['bls dag']:.2f} |")
    if unbatched is not None:
        print("\nthe steps without dynamic batchers, side by side\n")
        print("| clients | ensemble texts/s (p50 ms) | unbatched texts/s (p50 ms) | unbatched / ensemble |")
        print("|---|---|---|---|")
        for c in clients:
            (rate, rate_p50), (un_rate, un_p50) = medians(samples, "ensemble", c), medians(samples, "unbatched", c)
            report.setdefault("unbatched", []).append(
                {
                    "clients": c,
                    "unbatched_texts_per_s": un_rate,
                    "unbatched_p50_ms": un_p50,
                    "vs_ensemble": un_rate / rate,
                }
            )
            print(f"| {c} | {rate:.1f} ({rate_p50:.2f}) | {un_rate:.1f} ({un_p50:.2f}) | {un_rate / rate:.2f} |")
    if args.steps:
        print("\nwhere each step's time goes (Triton's statistics, per request, medians of the rounds)\n")
        print(
            "| clients | step | requests per execution | queue ms | compute ms | compute beyond a bare hop ms "
            "| its runner in process ms |"
        )
        print("|---|---|---|---|---|---|---|")
        in_process = {step: statistics.median(h[step] for h in hot) for step in hot[0]}
        report["runner_in_process_ms"] = in_process
        for c in clients:
            bare = step_rows(step_samples[("chain", c)])
            hop = statistics.median(r["compute_ms"] for r in bare.values())
            hop_queue = statistics.median(r["queue_ms"] for r in bare.values())
            hop_batch = statistics.median(r["requests_per_execution"] for r in bare.values())
            rows = step_rows(step_samples[("ensemble", c)])
            report.setdefault("steps", []).append({"clients": c, "bare_hop_compute_ms": hop, "steps": rows})
            print(f"| {c} | a bare hop (chain) | {hop_batch:.2f} | {hop_queue:.2f} | {hop:.2f} | | |")
            for step, r in rows.items():
                runner = f"{in_process[step]:.2f}" if step in in_process else ""
                print(
                    f"| {c} | {step} | {r['requests_per_execution']:.2f} | {r['queue_ms']:.2f} | "
                    f"{r['compute_ms']:.2f} | {r['compute_ms'] - hop:.2f} | {runner} |"
                )
        print(
            "\ninside each step's execute (timed in its stub, ms per execute, medians of the rounds: "
            "each column its own median, so a row's phases need not add up to its execute)\n"
        )
        print(
            "| clients | step | requests per execute | execute | gate | read | runner | answer "
            "| beyond a bare hop's execute | Triton's compute outside execute |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for c in clients:
            bare_phases = median_phases(phase_samples[("chain", c)])
            bare_execute = statistics.median(r["execute"] for r in bare_phases.values())
            bare_batch = statistics.median(r["requests_per_execute"] for r in bare_phases.values())
            # Triton's compute of an execution is the stub's execute, the phase totals'
            # writing, and the python backend's hand-over (the inputs into the stub's shared
            # memory, the outputs back out)
            bare_outside = statistics.median(
                r["compute_ms_per_execution"] - bare_phases[step]["execute"] - bare_phases[step]["write"]
                for step, r in step_rows(step_samples[("chain", c)]).items()
                if step in bare_phases
            )
            computes = step_rows(step_samples[("ensemble", c)])
            rows = median_phases(phase_samples[("ensemble", c)])
            for step, r in rows.items():
                if step in computes:
                    r["outside_execute"] = computes[step]["compute_ms_per_execution"] - r["execute"] - r["write"]
            report.setdefault("phases", []).append(
                {
                    "clients": c,
                    "bare_hop_execute_ms": bare_execute,
                    "bare_hop_outside_execute_ms": bare_outside,
                    "steps": rows,
                }
            )
            print(
                f"| {c} | a bare hop (chain) | {bare_batch:.2f} | {bare_execute:.3f} | | | | | | {bare_outside:.3f} |"
            )
            for step in GRAPH_STEPS:
                if step in rows:
                    r = rows[step]
                    cells = " | ".join(f"{r[k]:.3f}" for k in ("execute", *PHASES))
                    outside = f"{r['outside_execute']:.3f}" if "outside_execute" in r else ""
                    print(
                        f"| {c} | {step} | {r['requests_per_execute']:.2f} | {cells} | "
                        f"{r['execute'] - bare_execute:.3f} | {outside} |"
                    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
