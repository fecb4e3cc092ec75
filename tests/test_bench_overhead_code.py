"""Unit: `benchmarks/bench_overhead.py --baseline-code` times another checkout's package in
process, in a child process whose imports come from that checkout."""

from __future__ import annotations

import pytest
from harness import load_benchmark


def test_baseline_code_is_timed_in_process_with_that_checkouts_package(tmp_path):
    """--baseline-code times the baseline in process with the package of another checkout:
    a stand-in checkout whose pipeline sleeps 20 ms a call is timed at its own rate (not
    this checkout's hundreds of texts a second), and one whose package cannot be imported
    is an error naming the folder."""
    bench = load_benchmark("bench_overhead")
    slow = tmp_path / "slow" / "readability_triton" / "repository"
    slow.mkdir(parents=True)
    (slow.parent / "__init__.py").write_text("")
    (slow / "__init__.py").write_text("")
    (slow / "assemble.py").write_text(
        "import time\n\ndef repository_pipeline(repo):\n"
        "    assert repo == 'REPO'\n"
        "    return lambda texts, validate: time.sleep(0.02)\n"
    )
    rate = bench.code_rate(str(tmp_path / "slow"), "REPO", ["one text", "another"], 0.5)
    assert 20 < rate < 55
    broken = tmp_path / "broken" / "readability_triton"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('an unfinished checkout')\n")
    with pytest.raises(RuntimeError, match="(?s)broken could not run REPO in process.*an unfinished checkout"):
        bench.code_rate(str(tmp_path / "broken"), "REPO", ["one text"], 0.2)
