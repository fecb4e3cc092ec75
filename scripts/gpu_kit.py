"""The GPU kit: what a lent GPU machine runs, in two `device` calls, each self-contained, and
their dry runs on a CPU-only machine.

    python scripts/gpu_kit.py prepare              # here: builds .gpu-check/{p01,p2}
    python scripts/gpu_kit.py plan                 # the calls: phases, deadline, carry sizes
    bash scripts/gpu-check.sh --phase 0,1          # call 1 (carry .gpu-check/p01)
    bash scripts/gpu-check.sh --phase 2a,2         # call 2 (carry .gpu-check/p2), any time later
    bash scripts/gpu-check.sh --phase 0,1 --cpu-dry-run   # the same code here, without a GPU

Phases: 0 probes the machine (GPU, libpython, libcuda, packages, CUDA IPC between two
processes, and whether its torch runs the carried model.pt); 1 runs the `gpu` tests and
the featurize and tokenize benchmarks (the CUDA kernels against NumPy and `tokenizers`);
2a unpacks numpy 1.x and CuPy 13 for the server's stub and checks them as the stub will
use them (with the machine's torch: reductions, scans, DLPack both ways, and the project's
CUDA kernels compiled by CuPy 13's NVRTC); 2 serves the `portable-gpu` repository
(assembled here from the tiny artifact set: a random 2-layer BERT, so its numbers measure
the pipeline, not BERT) with the pytriton wheel's tritonserver, whose Python 3.12 stub
needs numpy < 2 and so CuPy 13, then the same repository with the Python steps on the CPU
(the `hybrid` split: BERT and the forest on the GPU), each at 1, 8 and 32 clients.

The machine it is sized for (issue 16): one H200, driver 580 (CUDA 13),
Python 3.12 with torch 2.11, CuPy 14, numpy 2, tokenizers and transformers; no cuDF,
Treelite or tritonclient; no network; at most 64 MiB carried and 600 s per call; files
survive between calls only while it stays warm (about 30 s). Each call has one deadline
(gpu_kit_common.DEADLINE_S) that its steps share out; every phase writes its result file
under $OUT (default .gpu-check/out), also when it fails, with the error in it: probe.json,
phase1.json (gpu-tests.xml, featurize.json, tokenize.json, summary.md), phase2a.json,
serve.json (server.log).

model.pt: the kit's artifact set is built here, where torch is the project's pinned 2.13
(CPU); the machine's torch is 2.11, and TorchScript files are not forward compatible in
general. A BERT trace records TorchScript file format 10, which torch 1.12 to 2.13 all read;
`prepare` refuses a model.pt of a newer format and records which torch wrote it and what it
computes on a fixed batch (p01/kit.json). Phase 0 runs that model.pt with the machine's
torch on the GPU, says which torch wrote it, and fails, naming the fix (build the set in a
venv with a torch no newer than the machine's), where it does not load or computes
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

from gpu_kit_common import (
    CALLS,
    CARRY,
    DEADLINE_S,
    RESULT_FILES,
    ROOT,
    SITE,
    Deadline,
    call_of,
    describe_call,
    out_dir,
    run_for,
    say,
    write_json,
)
from gpu_kit_probe import phase0
from gpu_kit_serve import REQUIRE_GPU_TOKENIZER, phase2, phase2a, stub_env

#: Modules the GPU machine lacks: blocked in a dry run, so that the dry run imports what
#: the machine can (rapidjson: tritonclient.grpc then raises RuntimeError, as it does there).
ABSENT_THERE = ("cudf", "treelite", "rapidjson", "gevent", "geventhttpclient", "sklearn")


# --------------------------------------------------------------------- phase 1


def gpu_test_files() -> list[str]:
    """Test modules holding `gpu`-marked tests (collected explicitly: the rest of the suite
    needs packages the GPU machine lacks)."""
    folder = os.path.join(ROOT, "tests")
    return sorted(
        os.path.join("tests", name)
        for name in os.listdir(folder)
        if name.startswith("test_")
        and name.endswith(".py")
        and "mark.gpu" in open(os.path.join(folder, name), encoding="utf-8").read()
    )


def phase1(result: dict, dry: bool, env, deadline: Deadline) -> None:
    """The `gpu` tests and the two benchmarks; fills `result` (phase1.json)."""
    result["dry_run"] = dry
    files = gpu_test_files()
    xml = os.path.join(out_dir(), "gpu-tests.xml")
    pytest = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rA", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    tests = run_for([*pytest, *files], deadline.share("1", "gpu tests"), env=env, cwd=ROOT)
    with open(os.path.join(out_dir(), "gpu-tests.log"), "w", encoding="utf-8") as handle:
        handle.write(tests.stdout + tests.stderr)
    last = [
        line
        for line in tests.stdout.splitlines()
        if " in " in line and ("passed" in line or "skipped" in line or "failed" in line or "error" in line)
    ]
    result["tests"] = {"files": files, "exit": tests.returncode, "summary": last[-1] if last else tests.stdout[-300:]}
    say(f"== phase 1: gpu tests ({len(files)} files): {result['tests']['summary']} (exit {tests.returncode})")
    data = _bench_data()
    featurize = [sys.executable, "benchmarks/bench_featurize.py", "--batch-sizes", "64,2048", "--rounds", "2"]
    featurize += ["--min-seconds", "0.3", "--json", os.path.join(out_dir(), "featurize.json"), "--data", data]
    tokenize = [sys.executable, "benchmarks/bench_tokenize.py", "--batch-sizes", "64,2048", "--min-time", "0.5"]
    tokenize += ["--paths", "cpu,gpu", "--json", os.path.join(out_dir(), "tokenize.json"), "--data", data]
    if env.get("READABILITY_TRITON_TOKENIZER_DIR"):
        tokenize += ["--tokenizer", env["READABILITY_TRITON_TOKENIZER_DIR"]]
    carried = os.path.join(CARRY, "p01", "vocabulary.json")  # no scikit-learn there to build one
    demo = os.path.join(ROOT, ".cache", "demo-artifacts", "vocabulary.json")
    vocabulary = next((v for v in (carried, demo) if os.path.isfile(v)), None)
    if vocabulary is None and deadline.left() >= 1:
        vocabulary = _build_vocabulary(data)
    if vocabulary:
        featurize += ["--vocabulary", vocabulary]
    featurize += ["--reference-texts", "50"]  # (the per-text reference is not what is new)
    if dry:
        featurize += ["--no-gpu"]
    for name, cmd in (("featurize", featurize), ("tokenize", tokenize)):
        run = run_for(cmd, deadline.share("1", f"{name} benchmark"), env=env, cwd=ROOT)
        result[name] = {"exit": run.returncode, "tail": (run.stdout + run.stderr)[-1500:]}
        say(f"== phase 1: {name} benchmark exit {run.returncode}")
        say((run.stdout + (run.stderr if run.returncode else ""))[-1200:])
    result["summary"] = summary_table()
    with open(os.path.join(out_dir(), "summary.md"), "w", encoding="utf-8") as handle:
        handle.write(result["summary"] + "\n")
    say(result["summary"])
    failed = [
        f"{name} exit {result[name]['exit']}" for name in ("tests", "featurize", "tokenize") if result[name]["exit"]
    ]
    result["ok"] = not failed
    if failed:
        result["error"] = "; ".join(failed) + " (124: out of time; the logs are in this file and gpu-tests.log)"


def _bench_data() -> str:
    """The benchmarks' texts: the carried or shared CommonLit excerpts, else a generated
    corpus (a clean clone has no data)."""
    from readability_triton.data import COMMONLIT_CSV

    for path in (os.path.join(CARRY, "p01", "train.csv"), COMMONLIT_CSV):
        if os.path.isfile(path):
            return os.path.normpath(path)
    import csv

    from readability_triton.corpus import generate_corpus

    path = os.path.join(out_dir(), "corpus.csv")
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["excerpt"])
        writer.writerows([t] for t in generate_corpus(600)[0])
    return path


def _build_vocabulary(data: str) -> str | None:
    """A vocabulary.json from `data`, built here (where scikit-learn's stop words are)."""
    try:
        from readability_triton import features
        from readability_triton.data import read_table

        path = os.path.join(out_dir(), "vocabulary.json")
        features.build_vocabulary(read_table(data).texts).save(path)
        return path
    except Exception as exc:  # noqa: BLE001 - the benchmark then builds its own, or says why not
        say(f"   (no vocabulary built for the featurize benchmark: {type(exc).__name__}: {exc})")
        return None


def summary_table() -> str:
    def load(name):
        path = os.path.join(out_dir(), f"{name}.json")
        return json.load(open(path, encoding="utf-8")) if os.path.isfile(path) else None

    lines = []
    f = load("featurize")
    if f:
        lines += [
            "| featurize batch | per-text reference | NumPy | CuPy | served step NumPy | served step CuPy | GPU/CPU |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in f.get("results", []):
            cells = [f"{r[k]:,.0f}" if r.get(k) else "–" for k in ("cupy", "served_numpy", "served_cupy")]
            ratio = f"{r['served_gpu_vs_cpu']:.2f}×" if r.get("served_gpu_vs_cpu") else "–"
            first = f"| {r['batch_size']} | {r['reference']:,.0f} | {r['numpy']:,.0f}"
            lines.append(f"{first} | {' | '.join(cells)} | {ratio} |")
    t = load("tokenize")
    if t:
        lines += ["", "| tokenize path | batch | texts/s | routed to the CPU path |", "|---|---|---|---|"]
        for r in t.get("runs", []):
            routed = f"{100 * r['routed_to_cpu']:.1f}%" if "routed_to_cpu" in r else "–"
            lines.append(f"| {r['path']} | {r['batch']} | {r['texts_per_s']:,.0f} | {routed} |")
    return "\n".join(lines)


# --------------------------------------------------------------------- running


def kit_env(dry: bool) -> dict:
    """The environment of the phases' subprocesses: the checkout and the carried files, the
    GPU tokenizer's CPU fallback refused; in a dry run, the GPU machine's missing modules
    blocked and no GPU."""
    env = dict(os.environ)
    p01 = os.path.join(CARRY, "p01")
    paths = [ROOT]
    if os.path.isdir(os.path.join(p01, "site")):
        paths.append(os.path.join(p01, "site"))
    if dry:
        blocker = tempfile.mkdtemp(prefix="kit-block-")
        with open(os.path.join(blocker, "sitecustomize.py"), "w", encoding="utf-8") as handle:
            handle.write(
                "import sys\nimport importlib.abc\n"
                f"BLOCKED = {ABSENT_THERE!r}\n"
                "class _Absent(importlib.abc.MetaPathFinder):\n"
                "    def find_spec(self, name, path=None, target=None):\n"
                "        if name.split('.')[0] in BLOCKED:\n"
                "            raise ModuleNotFoundError(f'No module named {name!r} (GPU kit dry run: absent there)')\n"
                "        return None\n"
                "sys.meta_path.insert(0, _Absent())\n"
            )
        paths.insert(0, blocker)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    env[REQUIRE_GPU_TOKENIZER] = "1"
    for name, var in (
        ("triton_python_backend_utils.py", "READABILITY_TRITON_PB_UTILS"),
        ("tokenizer", "READABILITY_TRITON_TOKENIZER_DIR"),
        ("tiny-artifacts", "READABILITY_TRITON_TINY_ARTIFACTS"),
        ("train.csv", "READABILITY_TRITON_COMMONLIT"),
    ):
        if os.path.exists(os.path.join(p01, name)):
            env[var] = os.path.join(p01, name)
    if dry:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_phase(phase: str, body, *args) -> bool:
    """Run one phase; its result file is written whatever happens, with the error in it."""
    result: dict = {"phase": phase, "ok": False}
    began = time.time()
    try:
        body(result, *args)
    except Exception as exc:  # noqa: BLE001 - any failure is this phase's result, and the next phase still runs
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-3000:])
        say(f"== phase {phase} FAILED: {result['error']}")
    finally:
        result["seconds"] = round(time.time() - began, 1)
        write_json(RESULT_FILES[phase], result)
    return bool(result["ok"])


def _phase2_with_site(deadline: Deadline) -> int:
    """Phase 2 needs numpy < 2 in this process too (the server checks its own numpy before
    starting one): run it in a child with the stub's environment, on the same deadline."""
    if not os.path.isdir(SITE):
        problem = f"no {SITE}: phase 2 serves with what phase 2a unpacks there: run phases 2a,2 together"
        write_json(RESULT_FILES["2"], {"phase": "2", "ok": False, "error": problem})
        say(f"== phase 2 FAILED: {problem}")
        return 1
    env = dict(stub_env(), READABILITY_KIT_SITE_FIRST="1", **{Deadline.ENV: repr(deadline.at)})
    return subprocess.call([sys.executable, os.path.abspath(__file__), "run", "--phase", "2"], env=env)


def run(phases: list[str], dry: bool, deadline: Deadline) -> int:
    numbered = call_of(phases)
    if numbered and os.environ.get("READABILITY_KIT_SITE_FIRST") != "1":
        say("== " + describe_call(numbered[1], numbered[0])[0])
    say(f"== deadline: {deadline.left():.0f} s for phases {','.join(phases)}{' (cpu dry run)' if dry else ''}")
    if "2" in phases and not dry and os.environ.get("READABILITY_KIT_SITE_FIRST") != "1":
        rest = [p for p in phases if p != "2"]
        status = run(rest, dry, deadline) if rest else 0
        return status | _phase2_with_site(deadline)
    env = kit_env(dry)
    ok = True
    for phase in phases:
        if phase == "0":
            ok &= run_phase("0", phase0, dry, env, deadline)
        elif phase == "1":
            ok &= run_phase("1", phase1, dry, env, deadline)
        elif phase == "2a":
            ok &= run_phase("2a", phase2a, dry, deadline)
        elif phase == "2":
            ok &= run_phase("2", phase2, dry, deadline)
    say(f"== done: phases {','.join(phases)}, {'ok' if ok else 'FAILED'}, {deadline.left():.0f} s of the deadline left")
    say(f"   results in {out_dir()}")
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run")
    run_parser.add_argument("--phase", default="0,1", help="comma-separated: 0, 1, 2a, 2 (default 0,1)")
    run_parser.add_argument("--cpu-dry-run", action="store_true", help="the same steps on a machine without a GPU")
    run_parser.add_argument(
        "--deadline", type=float, default=DEADLINE_S, help=f"seconds for the whole call (default {DEADLINE_S})"
    )
    sub.add_parser("plan", help="the device calls: phases, deadline, what each carries")
    prepare = sub.add_parser("prepare")
    prepare.add_argument("--python-version", default="3.12")
    prepare.add_argument("--only", default="p01,p2", help="which carry folders (default all)")
    prepare.add_argument(
        "--no-server",
        action="store_true",
        help="p2 without the site and tritonserver archives (enough for phase 2's --cpu-dry-run)",
    )
    args = parser.parse_args(argv)
    if args.command == "prepare":
        from gpu_kit_prepare import prepare as do_prepare

        return do_prepare(args.python_version, tuple(p for p in args.only.split(",") if p), server=not args.no_server)
    if args.command == "plan":
        for number, call in enumerate(CALLS, 1):
            say(describe_call(call, number)[0])
        return 0
    phases = [p.strip() for p in args.phase.split(",") if p.strip()]
    unknown = [p for p in phases if p not in RESULT_FILES]
    if unknown:
        parser.error(f"unknown phase(s) {', '.join(unknown)}: the phases are {', '.join(RESULT_FILES)}")
    return run(phases, args.cpu_dry_run, Deadline.from_environment(args.deadline))


if __name__ == "__main__":
    sys.exit(main())
