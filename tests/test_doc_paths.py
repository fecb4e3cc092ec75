"""What the documentation names exists: every `python -m ...` command and every module path
(`readability_triton.repository.configs`, or `repository.configs` in backticks inside the
package and in the Markdown pages) in the READMEs, the pages of docs/, the config headers, the
deployment files, the docstrings and comments; every file of the source tree and every
relative link (with its #anchor) the Markdown pages name; and every benchmark and script
imports."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re
import sys

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
#: The Markdown pages: the READMEs and every page of docs/.
MARKDOWN = ("README.md", "model_repository/README.md", "docs/*.md")
#: Names in backticks that end like a file are files, not module paths (`features.md`).
FILE_ENDINGS = (".py", ".json", ".txt", ".egg-info", ".md", ".csv", ".png", ".c", ".so", ".yaml", ".pbtxt", ".sh")
FULL = re.compile(r"\breadability_triton(?:\.[A-Za-z_]\w*)+")
PYTHON_M = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
#: `triton.configs`, `training.bert_checkpoint.check_checkpoint_folder`: a path inside the package, in backticks.
RELATIVE = re.compile(r"`((?:" + "|".join(SUBPACKAGES + TOP_MODULES) + r")(?:\.[A-Za-z_]\w*)+)")


def _files() -> list[str]:
    patterns = [
        *MARKDOWN,
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
        if rel.startswith((PACKAGE, "backends")) or rel.endswith(".md"):
            found |= {f"{PACKAGE}.{m}" for m in RELATIVE.findall(text)}
        for name in found:
            if name.endswith(FILE_ENDINGS):
                continue
            named.setdefault(name, []).append(rel)
    return named


#: A file of the source tree named in the Markdown pages (`readability_triton/server/serve.py`).
FILE = re.compile(
    r"(?<![\w/{,.-])((?:readability_triton|backends|tests|benchmarks|scripts|deploy|model_repository|"
    r"constraints|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_])"
)
#: A Markdown link or image: [text](target) or [text](target "title").
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def _markdown_pages() -> list[str]:
    pages: list[str] = []
    for pattern in MARKDOWN:
        pages += sorted(glob.glob(os.path.join(ROOT, pattern)))
    return [os.path.relpath(p, ROOT) for p in pages]


def _anchors(path: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page: lower case, punctuation
    other than `-` and `_` dropped, spaces made `-`, repeats numbered."""
    text = FENCE.sub("", open(path, encoding="utf-8").read())
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = slug, 1
        while anchor in anchors:
            anchor, n = f"{slug}-{n}", n + 1
        anchors.add(anchor)
    return anchors


def test_the_docs_pages_are_covered():
    pages = _markdown_pages()
    assert "README.md" in pages and any(p.startswith("docs" + os.sep) for p in pages), pages


@pytest.mark.parametrize("page", _markdown_pages())
def test_every_file_a_page_names_exists(page):
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    missing = [path for path in sorted(set(FILE.findall(text))) if not os.path.exists(os.path.join(ROOT, path))]
    assert not missing, f"{page} names files that do not exist: {missing}"


@pytest.mark.parametrize("page", _markdown_pages())
def test_every_relative_link_of_a_page_resolves(page):
    """A link to a file of the repository (relative to the page) leads to one, and its
    #anchor, on a Markdown page, to a heading there."""
    text = FENCE.sub("", open(os.path.join(ROOT, page), encoding="utf-8").read())
    text = re.sub(r"``.*?``|`[^`\n]*`", "code", text)  # a link shown as code is no link
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (
            os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path else os.path.join(ROOT, page)
        )
        if not resolved.startswith(ROOT + os.sep) or not os.path.exists(resolved):
            broken.append(f"{target} (no such file in the repository)")
        elif anchor and resolved.endswith(".md") and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading with that anchor)")
    assert not broken, f"{page}: {broken}"


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
    # Registered while it runs, as an import would: a dataclass resolves its annotations
    # through sys.modules[its module].
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    if '__name__ == "__main__"' in open(path, encoding="utf-8").read():
        assert callable(getattr(module, "main", None))


#: What lies outside the repository that a file may still name: the CommonLit data the tests
#: and benchmarks read (never committed), and the Triton sources the native backends build
#: from (scripts/native_backends.sh; TRITON_SOURCES / FIL_SOURCES point elsewhere).
OUTSIDE_INPUTS = re.compile(r"\.\./shared(/data\b|/third_party\b|\)|,| \(| is absent| never)")


def test_nothing_sends_a_reader_outside_the_repository():
    """A user of the project has only the repository: no file names a page beside it (the
    design notes, the features spec) as where to read on; the docs carry what the code cites."""
    import subprocess

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        if name == "tests/test_doc_paths.py" or not name.endswith((".py", ".md", ".sh", ".cfg", ".toml", ".txt")):
            continue
        with open(os.path.join(ROOT, name), encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if "shared/design" in line or "shared/spec" in line:
                    found.append(f"{name}:{number}: {line.strip()}")
                elif "../shared" in line and not OUTSIDE_INPUTS.search(line):
                    found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
