"""`readability-triton vocabulary` and `readability-triton features`."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from readability_triton import cli
from readability_triton.cli import app as cli_main
from readability_triton.features import (
    FEATURE_NAMES,
    Vocabulary,
    build_vocabulary,
    featurize,
)

TEXTS = [f"Text number {i}. " + " ".join(f"w{j}" for j in range(8 * i, 8 * i + 40)) + "!" for i in range(30)]
TEXTS += ["Ça va? Oui\u2026 très bien, don\u2019t worry.", "", 'Comma, "quotes" and\nnew lines']


@pytest.fixture
def run(monkeypatch, capsys):
    # Only this module's commands (the other command modules are not needed here).
    monkeypatch.setattr(cli_main, "_COMMAND_MODULES", ("readability_triton.cli.features",))

    def run_cli(*argv):
        code = cli.main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run_cli


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "train.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "excerpt", "other"])
        for i, text in enumerate(TEXTS):
            writer.writerow([f"id{i}", text, text.upper()])
    return path


def read_features(path):
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def test_vocabulary_then_features(run, data, tmp_path):
    vocab_path = tmp_path / "out" / "vocabulary.json"
    code, _, err = run("vocabulary", "--data", data, "--out", vocab_path)
    assert code == 0, err
    assert "100 top and 100 bottom words, 318 stop words, 207 features" in err
    vocabulary = Vocabulary.load(str(vocab_path))
    assert vocabulary == build_vocabulary(TEXTS)

    out = tmp_path / "features.csv"
    code, _, err = run("features", "--vocabulary", vocab_path, "--data", data, "--out", out, "--batch-size", 7)
    assert code == 0, err
    header, rows = read_features(out)
    assert header == ["id", *FEATURE_NAMES]
    assert [r[0] for r in rows] == [f"id{i}" for i in range(len(TEXTS))]
    values = np.array([[float(v) for v in r[1:]] for r in rows], dtype=np.float64)
    want = featurize(TEXTS, vocabulary)
    # %.9g gives back every float32 exactly
    np.testing.assert_array_equal(values.astype(np.float32), want)

    code, _, err = run(
        "features", "--vocabulary", vocab_path, "--data", data, "--out", out, "--column", "other", "--id-column", ""
    )
    assert code == 0, err
    header, rows = read_features(out)
    assert header == list(FEATURE_NAMES)
    values = np.array([[float(v) for v in r] for r in rows]).astype(np.float32)
    np.testing.assert_array_equal(values, featurize([t.upper() for t in TEXTS], vocabulary))


def test_vocabulary_options(run, data, tmp_path):
    stops = tmp_path / "stops.txt"
    stops.write_text("The\nw1\n\nAND\n", encoding="utf-8")
    out = tmp_path / "v.json"
    code, _, err = run("vocabulary", "--data", data, "--out", out, "--n", 3, "--stopwords", stops)
    assert code == 0, err
    v = Vocabulary.load(str(out))
    assert v.n == 3 and v.stopwords == ["and", "the", "w1"]
    assert v == build_vocabulary(TEXTS, n=3, stopwords=["the", "w1", "and"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["vocabulary", "--data", "{missing}", "--out", "{tmp}/v.json"], "no such file"),
        (["vocabulary", "--data", "{data}", "--out", "{tmp}/v.json", "--column", "nope"], "no column 'nope'"),
        (["vocabulary", "--data", "{data}", "--out", "{tmp}/v.json", "--n", "1000"], "needs at least 2000"),
        (["vocabulary", "--data", "{data}", "--out", "{tmp}/v.json", "--n", "0"], "--n must be at least 1"),
        (["vocabulary", "--data", "{data}", "--out", "{tmp}/v.json", "--stopwords", "{missing}"], "No such file"),
        (
            ["features", "--vocabulary", "{missing}", "--data", "{data}", "--out", "{tmp}/f.csv"],
            "no such vocabulary file",
        ),
        (["features", "--vocabulary", "{bad}", "--data", "{data}", "--out", "{tmp}/f.csv"], "unknown key 'extra'"),
        (["features", "--vocabulary", "{vocab}", "--data", "{empty}", "--out", "{tmp}/f.csv"], "no data rows"),
        (
            ["features", "--vocabulary", "{vocab}", "--data", "{data}", "--out", "{tmp}/f.csv", "--batch-size", "0"],
            "--batch-size must be at least 1",
        ),
    ],
)
def test_user_errors_are_one_line(run, data, tmp_path, argv, message):
    vocab = tmp_path / "vocab.json"
    build_vocabulary(TEXTS, n=3).save(str(vocab))
    bad = tmp_path / "bad.json"
    bad.write_text('{"top": [], "bottom": [], "stopwords": [], "extra": 1}', encoding="utf-8")
    empty = tmp_path / "empty.csv"
    empty.write_text("id,excerpt\n", encoding="utf-8")
    names = {
        "missing": tmp_path / "missing.csv",
        "tmp": tmp_path,
        "data": data,
        "vocab": vocab,
        "bad": bad,
        "empty": empty,
    }
    code, _, err = run(*[a.format(**names) for a in argv])
    assert code == 2
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_features_to_standard_output(run, data, tmp_path):
    vocab = tmp_path / "vocab.json"
    build_vocabulary(TEXTS, n=2).save(str(vocab))
    code, out, err = run("features", "--vocabulary", vocab, "--data", data, "--out", "-")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("id,word_count,") and len(lines) == len(TEXTS) + 1
