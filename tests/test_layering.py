"""The shape of the code: layering that runs one way, and no import cycles.

- nothing outside `readability_triton.cli` imports the CLI;
- nothing outside `readability_triton.measure` and the CLI imports `measure` (the tools of
  people measuring and testing: the serving side never needs them);
- the serving side (the adapters in backends/ and everything they import) imports no
  training code, and runs with torch, scikit-learn and transformers absent;
- no two modules import each other, directly or through others (imports inside
  functions count too), and no two packages either; nor do the scripts under scripts/;
- no module imports another module's private name;
- an import inside a function is only there to put off an optional heavy dependency
  (torch, CuPy, cuDF, ONNX Runtime, ...), never to dodge a cycle;
- no library module is over 450 lines.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "readability_triton"
#: The package of training and building artifact sets (`readability_triton.training`).
TRAINING = f"{PACKAGE}.training"


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
    def cli(module: str) -> bool:
        return module == f"{PACKAGE}.cli" or module.startswith(f"{PACKAGE}.cli.")

    offenders = {m: sorted(i for i in imports if cli(i)) for m, imports in GRAPH.items() if not cli(m)}
    assert not {m: i for m, i in offenders.items() if i}


def test_nothing_but_the_cli_imports_the_measuring_tools():
    """`measure` (load, bench, perf_analyzer, the abusive and honest clients, `launch_serve`)
    is for people measuring and testing a served pipeline: the serving side (the adapters,
    stub, server, front door, repository, client, ...) never imports it; of the library,
    only the CLI (`bench`) does."""

    def inside(module: str, package: str) -> bool:
        return module == f"{PACKAGE}.{package}" or module.startswith(f"{PACKAGE}.{package}.")

    offenders = {
        m: sorted(i for i in imports if inside(i, "measure"))
        for m, imports in GRAPH.items()
        if not inside(m, "measure") and not inside(m, "cli")
    }
    assert not {m: i for m, i in offenders.items() if i}
    assert any(inside(m, "measure") for m in GRAPH), "no module of measure: this test must see them"


def _training(module: str) -> bool:
    return module == TRAINING or module.startswith(TRAINING + ".")


def test_the_serving_side_imports_no_training_code():
    adapters = [m for m in SOURCES if m.startswith("backends.")] + [f"{PACKAGE}.stub.runtime"]
    reached = _closure(adapters)
    assert not [m for m in reached if _training(m)], sorted(m for m in reached if _training(m))
    assert not [m for m in reached if m == f"{PACKAGE}.cli" or m.startswith(f"{PACKAGE}.cli.")]


def test_only_the_cli_imports_the_training_package():
    """Training is fenced by its package: of the library, only the CLI's commands (train-*,
    export-bert, build-demo, demo) import `readability_triton.training`; the serve process,
    the front door, the repository, the client and the measuring tools never do."""
    offenders = {
        m: sorted(i for i in imports if _training(i))
        for m, imports in GRAPH.items()
        if not _training(m) and not (m == f"{PACKAGE}.cli" or m.startswith(f"{PACKAGE}.cli."))
    }
    assert not {m: i for m, i in offenders.items() if i}
    assert any(_training(m) for m in GRAPH), "no module of training: this test must see them"


def test_in_stub_code_imports_neither_server_nor_client_code():
    """What runs inside Triton's python-backend stub (the adapters and `stub/`, and all they
    import) needs none of the code that manages a server, assembles a repository, stands in
    front of one or talks to one."""
    adapters = [m for m in SOURCES if m.startswith("backends.") or m.startswith(f"{PACKAGE}.stub")]
    outside = ("server", "client", "measure", "frontdoor", "repository", "cli")
    reached = _closure(adapters)
    assert not [m for m in reached if m.split(".")[1:2] and m.split(".")[1] in outside and m.startswith(PACKAGE)], (
        sorted(m for m in reached if m.startswith(PACKAGE) and m.split(".")[1] in outside)
    )


def test_no_package_holds_more_than_a_fifth_of_the_library():
    lines: dict[str, int] = {}
    for module, path in SOURCES.items():
        parts = module.split(".")
        if parts[0] == PACKAGE and len(parts) > 1:
            key = parts[1] if len(parts) > 2 or path.endswith("__init__.py") else "(top-level modules)"
            lines[key] = lines.get(key, 0) + sum(1 for _ in open(path, encoding="utf-8"))
    total = sum(lines.values())
    assert max(lines.values()) <= 0.2 * total, {k: round(v / total, 3) for k, v in lines.items()}


def test_the_cli_holds_no_server_lifecycle():
    """The CLI parses and calls: no process of its own, no tritonserver started or stopped
    by hand (`server.serve.Service` and `server.serve.local_server` do it)."""
    offenders = []
    for module, path in SOURCES.items():
        if not module.startswith(f"{PACKAGE}.cli.") and module != f"{PACKAGE}.cli":
            continue
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n in ("subprocess", "threading", "signal") or n.endswith("tritonserver") for n in names):
                    offenders.append(f"{module}:{node.lineno} imports {', '.join(n for n in names if n)}")
            elif isinstance(node, ast.Attribute) and node.attr in ("start", "stop") and isinstance(node.ctx, ast.Load):
                offenders.append(f"{module}:{node.lineno} calls .{node.attr}")
    assert not offenders, offenders


def test_no_import_cycles():
    """(A package's __init__ importing its own submodules is not a cycle.)"""
    cycles = []
    for module in GRAPH:
        reach = _closure(GRAPH[module], with_parents=False)
        if module in reach:
            cycles.append(module)
    assert not cycles, f"modules on an import cycle: {sorted(cycles)}"


def _script_imports() -> dict[str, set[str]]:
    """scripts/*.py: the other scripts each one imports (anywhere in its code), as a script
    beside it (`import gpu_kit_common`) or through the folder (`from scripts import ...`)."""
    folder = os.path.join(ROOT, "scripts")
    names = {name[:-3] for name in os.listdir(folder) if name.endswith(".py")}
    graph = {}
    for name in names:
        found = set()
        for node in ast.walk(ast.parse(open(os.path.join(folder, f"{name}.py"), encoding="utf-8").read())):
            if isinstance(node, ast.Import):
                dotted = [alias.name.split(".") for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                module = (node.module or "").split(".")
                dotted = [module + [alias.name] for alias in node.names] if module == ["scripts"] else [module]
            else:
                continue
            found |= {parts[1] if parts[0] == "scripts" and len(parts) > 1 else parts[0] for parts in dotted}
        graph[name] = (found & names) - {name}
    return graph


def test_no_import_cycles_among_the_scripts():
    graph = _script_imports()
    assert graph.get("gpu_kit"), "the GPU kit's modules import one another: this test must see them"

    def reach(start):
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(graph[name])
        return seen

    cycles = sorted(name for name in graph if name in reach(name))
    assert not cycles, f"scripts on an import cycle: {cycles}"


def _node(module: str) -> str:
    """A module's node in the package graph: its sub-package (`readability_triton.bert`), or
    itself for the top-level modules and the adapters."""
    parts = module.split(".")
    if parts[0] == PACKAGE and len(parts) > 2:
        return ".".join(parts[:2])
    if parts[0] == "backends":
        return ".".join(parts[:2])
    return module


def test_no_import_cycles_between_packages():
    graph: dict[str, set[str]] = {}
    for module, imports in GRAPH.items():
        for target in imports:
            if _node(target) != _node(module):
                graph.setdefault(_node(module), set()).add(_node(target))

    def reach(start):
        seen, todo = set(), list(graph.get(start, ()))
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return seen

    cycles = sorted(node for node in graph if node in reach(node))
    assert not cycles, f"packages on an import cycle: {cycles}"


def _project_aliases(tree) -> dict[str, str]:
    """Names bound to project modules by `import` statements (alias -> module)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
    return aliases


#: Private names the standard library documents for use (namedtuple's methods, os._exit).
STDLIB_PRIVATE = {"_replace", "_asdict", "_fields", "_make", "_exit"}


def _private_names(tree) -> set[str]:
    """The private names a module defines: functions, classes, module names and the
    attributes it sets."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if name.startswith("_")}


def test_no_private_name_crosses_a_module():
    """Neither `from x import _name` nor `something._name` where `_name` is not this
    module's own (another module's object's private state is that module's business)."""
    offenders = []
    for module, path in SOURCES.items():
        tree = ast.parse(open(path, encoding="utf-8").read())
        modules = {
            alias
            for alias, name in _project_aliases(tree).items()
            if any(m == name or m.endswith("." + name) for m in SOURCES)
        }
        own = _private_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE)):
                offenders += [
                    f"{module}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
            ):
                if node.value.id in modules or (
                    node.value.id not in ("self", "cls", "other")
                    and node.attr not in own
                    and node.attr not in STDLIB_PRIVATE
                ):
                    offenders.append(f"{module}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not offenders, offenders


#: Optional third-party packages too heavy (or absent) to import before they are needed.
HEAVY = {
    "torch",
    "cupy",
    "cudf",
    "onnxruntime",
    "onnx",
    "onnxscript",
    "matplotlib",
    "sklearn",
    "treelite",
    "transformers",
    "tokenizers",
    "tritonclient",
    "pandas",
    "triton_python_backend_utils",
}
#: Imports put off for start-up time, each with its reason: (importing module, imported).
DEFERRED = {
    # `health --serve` is Docker's HEALTHCHECK: it never needs NumPy or the Triton client
    ("readability_triton.cli.health", "readability_triton.server.canary_probe"),
}


def _top_level_imports(module: str) -> tuple[set[str], bool]:
    """The project modules `module` imports at module level, and whether it imports a heavy
    optional dependency there."""
    tree = ast.parse(open(SOURCES[module], encoding="utf-8").read())
    top = set()
    heavy = False
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            if isinstance(inner, ast.Import):
                heavy |= any(a.name.split(".")[0] in HEAVY for a in inner.names)
            elif isinstance(inner, ast.ImportFrom) and not inner.level:
                heavy |= (inner.module or "").split(".")[0] in HEAVY
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            top |= _imports_of(module, node)
        elif isinstance(node, ast.Try):
            for inner in node.body:
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    top |= _imports_of(module, inner)
    return top, heavy


def _imports_of(module: str, node) -> set[str]:
    path = SOURCES[module]
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif node.level:
        parts = module.split(".")
        base = parts if path.endswith("__init__.py") else parts[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
        names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
    else:
        prefix = node.module or ""
        names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
    found = set()
    for name in names:
        while name and name not in SOURCES:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


TOP = {module: _top_level_imports(module) for module in SOURCES}


def _is_heavy(module: str, seen=None) -> bool:
    """Importing `module` imports a heavy optional dependency."""
    seen = set() if seen is None else seen
    if module in seen:
        return False
    seen.add(module)
    imports, heavy = TOP[module]
    return heavy or any(_is_heavy(m, seen) for m in imports | _parents(module))


def test_imports_inside_functions_only_put_off_heavy_dependencies():
    offenders = []
    for module, path in SOURCES.items():
        tree = ast.parse(open(path, encoding="utf-8").read())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    targets = _imports_of(module, node) - {PACKAGE} - {t for m, t in DEFERRED if m == module}
                    if targets and not any(_is_heavy(target) for target in targets):
                        offenders.append(f"{module}.{function.name}:{node.lineno} imports {', '.join(sorted(targets))}")
    assert not offenders, "\n".join(sorted(set(offenders)))


def test_no_library_module_is_over_450_lines():
    long = {
        module: n
        for module, path in SOURCES.items()
        if module.startswith(PACKAGE)
        for n in [sum(1 for _ in open(path, encoding="utf-8"))]
        if n > 450
    }
    assert not long, long


ADAPTERS = ("validate", "preprocess", "featurize", "postprocess", "bert_portable", "forest_portable")


def test_every_adapter_serves_without_torch_scikit_learn_or_transformers(tiny_artifacts, tmp_path):
    """Each Python model loads and answers a request in a process where torch, scikit-learn
    and transformers cannot be imported (what the `portable` serving environment needs is
    `serve` + `portable`: bert from model.onnx on ONNX Runtime). One interpreter for all six."""
    code = f"""
import sys
for blocked in ('torch', 'sklearn', 'transformers'):
    sys.modules[blocked] = None
sys.path[:0] = [{os.path.join(ROOT, "tests")!r}, {os.path.join(ROOT, "tests", "stubs")!r}]
import numpy as np
from harness import array_request, load_model, make_model_dir, text_request
from readability_triton import contracts as C
for name in {ADAPTERS!r}:
    target = {{'bert_portable': C.BERT, 'forest_portable': C.FOREST}}.get(name, name)
    files = {{C.PREPROCESS: ['vocab.txt', 'tokenizer.json', 'manifest.json'], C.FEATURIZE: ['vocabulary.json'],
              C.BERT: ['model.onnx'], C.FOREST: ['checkpoint.tl']}}.get(target, [])
    model = load_model(make_model_dir({str(tmp_path)!r} + '/' + name, target, profile='portable',
                                      files={{f: {tiny_artifacts!r} + '/' + f for f in files}}, max_length=64))
    if target in (C.VALIDATE, C.PREPROCESS, C.FEATURIZE):
        request = text_request(['A short text.'])
    elif target == C.BERT:
        request = array_request(input__0=np.array([[101, 2000, 102] + [0] * 61]),
                                input__1=np.array([[1, 1, 1] + [0] * 61]))
    elif target == C.FOREST:
        request = array_request(input__0=np.zeros((1, C.N_FEATURES), np.float32))
    else:
        request = array_request(BERT_OUTPUT=np.ones((1, 1), np.float32), FOREST_OUTPUT=np.zeros((1, 1), np.float32),
                                WORDS=np.ones((1, 1), np.float32))
    (response,) = model.execute([request])
    assert not response.has_error(), (name, response.error().message())
    print('served', name)
loaded = [m for m in ('torch', 'sklearn', 'transformers') if sys.modules.get(m) is not None]
assert not loaded, loaded
print('ok')
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr[-3000:]


def test_a_command_imports_only_the_module_that_registers_it():
    """`COMMANDS` names every command's module, and a `score` job (many start at once in a
    batch system) imports neither the front door, nor the server's management, nor training."""
    from readability_triton.cli.app import COMMANDS, build_parser

    def commands(parser) -> set[str]:
        action = next(a for a in parser._actions if a.dest == "command")  # argparse's own
        return set(action.choices)

    assert commands(build_parser()) == set(COMMANDS)
    for command in COMMANDS:
        assert command in commands(build_parser(command))
    code = (
        "import sys\n"
        "from readability_triton.cli.app import build_parser\n"
        "build_parser('score').parse_args(['score', 'a text'])\n"
        "print(sorted(m for m in sys.modules\n"
        "      if m.split('.')[0] in ('aiohttp', 'httptools', 'grpc', 'sklearn', 'torch')\n"
        "      or m.startswith(('readability_triton.server', 'readability_triton.frontdoor',\n"
        "                       'readability_triton.repository', 'readability_triton.training'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_health_probe_imports_only_the_standard_librarys_http_client():
    """`health --serve` is Docker's HEALTHCHECK (every second in the image's tests, on a
    saturated host): it asks serve's health port and imports no NumPy, no client library,
    nothing of the server's management or the front door."""
    code = (
        "import sys\n"
        "from readability_triton.cli.app import main\n"
        "code = main(['health', '--serve', '127.0.0.1:1', '--timeout', '1'])\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "      ('numpy', 'aiohttp', 'httptools', 'grpc', 'tritonclient', 'requests', 'tqdm')\n"
        "      or m.startswith(('readability_triton.server', 'readability_triton.frontdoor',\n"
        "                       'readability_triton.client'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "1 []", out.stdout + out.stderr
    assert "127.0.0.1:1/readyz" in out.stderr, out.stderr


def test_every_package_is_installed():
    """setup.cfg lists its packages: a package missing there works in the checkout's editable
    install and breaks every wheel and image."""
    import configparser

    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    listed = {line.strip() for line in config["options"]["packages"].splitlines() if line.strip()}
    found = {
        os.path.relpath(base, ROOT).replace(os.sep, ".")
        for base, _, files in os.walk(os.path.join(ROOT, PACKAGE))
        if "__init__.py" in files and "__pycache__" not in base
    }
    assert found - listed == set(), f"packages missing from setup.cfg: {sorted(found - listed)}"
