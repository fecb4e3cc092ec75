"""The shape of the code: layering that runs one way, and no import cycles.

- nothing outside `readability_triton.cli` imports the CLI;
- the serving side (the adapters in backends/ and everything they import) imports no
  training code, and runs with scikit-learn and transformers absent;
- no two modules import each other, directly or through others (imports inside
  functions count too).
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "readability_triton"
TRAINING = {f"{PACKAGE}.bert.training", f"{PACKAGE}.bert.export", f"{PACKAGE}.bert.ridge_head",
            f"{PACKAGE}.forest.training", f"{PACKAGE}.artifacts.demo", f"{PACKAGE}.artifacts.corpus"}


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _sources() -> dict[str, str]:
    out = {}
    for folder in (PACKAGE, "backends"):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    out[_module_name(os.path.join(base, name))] = os.path.join(base, name)
    return out


SOURCES = _sources()


def _imports(module: str) -> set[str]:
    """The project modules `module` imports (anywhere in its code), resolved."""
    path = SOURCES[module]
    tree = ast.parse(open(path, encoding="utf-8").read())
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in SOURCES:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):  # a parent package: see _parents
                found.add(name)
    return found


def _parents(module: str) -> set[str]:
    """The packages whose __init__ runs before `module` (importing a.b.c runs a and a.b)."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in SOURCES}


GRAPH = {module: _imports(module) for module in SOURCES}


def _closure(start, with_parents: bool = True) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(GRAPH[module] | (_parents(module) if with_parents else set()))
    return seen


def test_nothing_outside_the_cli_imports_the_cli():
    offenders = {m: sorted(i for i in imports if i.startswith(f"{PACKAGE}.cli"))
                 for m, imports in GRAPH.items() if not m.startswith(f"{PACKAGE}.cli")}
    assert not {m: i for m, i in offenders.items() if i}


def test_the_serving_side_imports_no_training_code():
    adapters = [m for m in SOURCES if m.startswith("backends.")] + [f"{PACKAGE}.triton.runtime"]
    reached = _closure(adapters)
    assert not reached & TRAINING, sorted(reached & TRAINING)
    assert not [m for m in reached if m.startswith(f"{PACKAGE}.cli")]


def test_no_import_cycles():
    """(A package's __init__ importing its own submodules is not a cycle.)"""
    cycles = []
    for module in GRAPH:
        reach = _closure(GRAPH[module], with_parents=False)
        if module in reach:
            cycles.append(module)
    assert not cycles, f"modules on an import cycle: {sorted(cycles)}"


@pytest.mark.parametrize("model", ["validate", "preprocess", "featurize", "postprocess", "bert_portable",
                                   "forest_portable"])
def test_every_adapter_serves_without_scikit_learn_or_transformers(model, tiny_artifacts, tmp_path):
    """Each Python model loads and answers a request in a process where scikit-learn and
    transformers cannot be imported (what the serving environment needs is `serve` +
    `portable`)."""
    code = f"""
import sys
sys.modules['sklearn'] = None
sys.modules['transformers'] = None
sys.path[:0] = [{os.path.join(ROOT, 'tests')!r}, {os.path.join(ROOT, 'tests', 'stubs')!r}]
import numpy as np
from harness import array_request, load_model, make_model_dir, text_request
from readability_triton import contracts as C
from readability_triton.triton import repository
name = {model!r}
target = {{'bert_portable': C.BERT, 'forest_portable': C.FOREST}}.get(name, name)
files = {{C.PREPROCESS: ['vocab.txt', 'tokenizer.json', 'manifest.json'], C.FEATURIZE: ['vocabulary.json'],
          C.BERT: ['model.pt'], C.FOREST: ['checkpoint.tl']}}.get(target, [])
model = load_model(make_model_dir({str(tmp_path)!r}, target, files={{f: {tiny_artifacts!r} + '/' + f for f in files}},
                                  max_length=64))
if target in (C.VALIDATE, C.PREPROCESS, C.FEATURIZE):
    request = text_request(['A short text.'])
elif target == C.BERT:
    request = array_request(input__0=np.array([[101, 2000, 102] + [0] * 61]), input__1=np.array([[1, 1, 1] + [0] * 61]))
elif target == C.FOREST:
    request = array_request(input__0=np.zeros((1, C.N_FEATURES), np.float32))
else:
    request = array_request(BERT_OUTPUT=np.ones((1, 1), np.float32), FOREST_OUTPUT=np.zeros((1, 1), np.float32))
(response,) = model.execute([request])
assert not response.has_error(), response.error().message()
assert 'sklearn' not in [m for m in sys.modules if sys.modules[m] is not None]
print('ok')
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
