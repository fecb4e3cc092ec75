"""What the documentation names exists: every `python -m ...` command and every module path
(`readability_triton.repository.configs`, or `triton.configs` in backticks inside the package)
in the READMEs, the config headers, the deployment files, the docstrings and comments, and
every benchmark and script imports."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "readability_triton"
SUBPACKAGES = tuple(
    name
    for name in os.listdir(os.path.join(ROOT, PACKAGE))
    if os.path.isdir(os.path.join(ROOT, PACKAGE, name)) and not name.startswith("__")
)
TOP_MODULES = tuple(
    name[:-3] for name in os.listdir(os.path.join(ROOT, PACKAGE)) if name.endswith(".py") and name != "__init__.py"
)
FULL = re.compile(r"\breadability_triton(?:\.[A-Za-z_]\w*)+")
PYTHON_M = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
#: `triton.configs`, `bert.checkpoint.check_checkpoint_folder`: a path inside the package, in backticks.
RELATIVE = re.compile(r"`((?:" + "|".join(SUBPACKAGES + TOP_MODULES) + r")(?:\.[A-Za-z_]\w*)+)")


def _files() -> list[str]:
    patterns = [
        "README.md",
        "model_repository/README.md",
        "model_repository/*/config.pbtxt",
        "Makefile",
        "Dockerfile",
        "deploy/**/*",
        "readability_triton/**/*.py",
        "backends/**/*.py",
        "scripts/*",
        "benchmarks/*.py",
        "tests/*.py",
    ]
    found = []
    for pattern in patterns:
        found += [p for p in glob.glob(os.path.join(ROOT, pattern), recursive=True) if os.path.isfile(p)]
    return sorted(set(found))


def _resolves(path: str) -> bool:
    """`path` is a module, or a module's attribute (a class's attribute too)."""
    parts = path.rstrip(".").split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except (ImportError, ValueError):
            continue
        value = importlib.import_module(module)
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


def _named() -> dict[str, list[str]]:
    named: dict[str, list[str]] = {}
    for path in _files():
        try:
            text = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        rel = os.path.relpath(path, ROOT)
        found = set(FULL.findall(text)) | {m for m in PYTHON_M.findall(text) if m.split(".")[0] == PACKAGE}
        if rel.startswith((PACKAGE, "backends")):
            found |= {f"{PACKAGE}.{m}" for m in RELATIVE.findall(text)}
        for name in found:
            if name.endswith((".py", ".json", ".txt", ".egg-info")):
                continue
            named.setdefault(name, []).append(rel)
    return named


#: A file of the source tree named in the READMEs (`readability_triton/triton/server.py`).
FILE = re.compile(
    r"(?<![\w/{,.-])((?:readability_triton|backends|tests|benchmarks|scripts|deploy|model_repository|"
    r"constraints)/[A-Za-z0-9_./-]*[A-Za-z0-9_])"
)


def test_every_file_the_readmes_name_exists():
    missing = []
    for readme in ("README.md", "model_repository/README.md"):
        text = open(os.path.join(ROOT, readme), encoding="utf-8").read()
        missing += [
            f"{readme}: {path}"
            for path in sorted(set(FILE.findall(text)))
            if not os.path.exists(os.path.join(ROOT, path))
        ]
    assert not missing, missing


def test_every_module_path_the_docs_name_exists():
    missing = {name: where for name, where in _named().items() if not _resolves(name)}
    assert not missing, missing


@pytest.mark.parametrize(
    "path",
    sorted(glob.glob(os.path.join(ROOT, "benchmarks", "*.py")) + glob.glob(os.path.join(ROOT, "scripts", "*.py"))),
    ids=lambda p: os.path.relpath(p, ROOT),
)
def test_every_benchmark_and_script_imports(path, monkeypatch):
    """Imported as `python <path>` would (its folder first on sys.path); the work of each
    runs under `if __name__ == "__main__"` only."""
    monkeypatch.syspath_prepend(os.path.dirname(path))
    spec = importlib.util.spec_from_file_location(f"_doc_paths_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if '__name__ == "__main__"' in open(path, encoding="utf-8").read():
        assert callable(getattr(module, "main", None))
