"""What a first-time user meets in a fresh clone, before any server runs: where the
CommonLit data goes and how `make demo` takes it, and what git ignores."""

from __future__ import annotations

import os
import subprocess

import pytest

from readability_triton.data import COMMONLIT_CSV

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _make_demo(*args: str) -> str:
    """The command `make demo` runs (make -n prints it, and runs nothing)."""
    done = subprocess.run(["make", "-n", *args, "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stdout.splitlines() if "readability-triton demo" in line)


def test_make_demo_takes_the_data_as_DATA():
    assert "--data" not in _make_demo()
    assert _make_demo("DATA=/data/common lit/train.csv").endswith('--data "/data/common lit/train.csv"')


def test_the_readme_says_where_the_data_goes_and_what_lies_outside_the_clone():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    shared = os.path.relpath(os.path.normpath(COMMONLIT_CSV), ROOT)
    assert shared == "../shared/data/commonlit/train.csv" and f"`{shared}`" in readme
    assert "make demo DATA=" in readme
    assert "~/.cache/readability-triton/native-backends" in readme and "`models/`" in readme


@pytest.mark.parametrize(
    "path", ["models/readability/config.pbtxt", ".cache/demo-artifacts/x", "dist/x.whl", "build/lib/x.py"]
)
def test_git_ignores_what_the_commands_write_in_the_clone(path):
    if not os.path.isdir(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, timeout=30)
    assert done.returncode == 0, f"git does not ignore {path}"


def test_a_tables_rows_are_named_by_the_line_they_start_on(tmp_path):
    """Quoted texts over several lines, blank lines between rows and at the end: each row's
    line is where it starts in the file (`score` names a refused row by it)."""
    from readability_triton.data import read_table

    path = tmp_path / "in.csv"
    path.write_text('id,excerpt\n1,"two\nlines"\n\n\n2,three\n3,"x"\n\n', encoding="utf-8")
    table = read_table(str(path))
    assert table.texts == ["two\nlines", "three", "x"] and table.lines == [2, 6, 7]
