"""The layout of an artifact set: every file name, and `manifest.json`, what a set is,
checked by `assemble` and by the models. The bottom of the package: it imports nothing of
the project but `contracts` and `errors`, so every runner, exporter and trainer can.

An artifact set is one flat folder:

    model.onnx and/or model.pt  the BERT regressor, ONNX and/or TorchScript (bert)
    vocab.txt, tokenizer.json,  the tokenizer the BERT model was trained with (preprocess)
    tokenizer_config.json, special_tokens_map.json
    checkpoint.tl               Treelite 4.x checkpoint of the random forest (forest)
    vocabulary.json             the feature vocabulary the forest was trained on (featurize)
    training.json               the BERT training record beside a checkpoint folder
    manifest.json               this file

A model's version folder may also hold `forest_arrays.npz` (the forest as arrays, written by
`assemble` for the Python forest).

The manifest records the format, `max_length`, `n_features`, the versions that built
the artifacts, free-form training info and a SHA-256 of every file. `assemble` refuses
a set whose files are missing or whose checksums or contract numbers do not match; the
models check the checksums of the files they load against the manifest copied into
their version folder. The file names are defined here, once.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from . import __version__, contracts
from .errors import ManifestError

MANIFEST = "manifest.json"
VOCAB_TXT = "vocab.txt"
TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
#: The files a tokenizer folder may hold, in the order they are read.
TOKENIZER_FILES = (VOCAB_TXT, TOKENIZER_JSON, TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP)
#: The forest as arrays (the Python forest's file, written into its version folder).
FOREST_ARRAYS = "forest_arrays.npz"
#: A BERT checkpoint folder's training record.
TRAINING_RECORD = "training.json"
FORMAT = 1
MODEL_PT = "model.pt"
MODEL_ONNX = "model.onnx"
CHECKPOINT = "checkpoint.tl"
VOCABULARY = "vocabulary.json"

#: The BERT regressor's file in each format (a set holds one or both).
BERT_FORMATS = {"onnx": MODEL_ONNX, "torchscript": MODEL_PT}
#: The files each model needs (for bert: one of BERT_FORMATS'), and which are optional.
MODEL_FILES = {
    contracts.PREPROCESS: (VOCAB_TXT,),
    contracts.FEATURIZE: (VOCABULARY,),
    contracts.FOREST: (CHECKPOINT,),
}
OPTIONAL_FILES = {
    contracts.PREPROCESS: tuple(n for n in TOKENIZER_FILES if n != VOCAB_TXT),
}
#: The files of the forest branch (they belong together: `evaluate` refuses half a branch).
FOREST_FILES = (CHECKPOINT, VOCABULARY)


def bert_formats(directory: str) -> list[str]:
    """The BERT formats whose file is in `directory`, ONNX first."""
    return [fmt for fmt, name in BERT_FORMATS.items() if os.path.isfile(os.path.join(directory, name))]


def choose_bert_format(directory: str, wanted: str | None = None) -> str:
    """`wanted` if its file is there (ManifestError otherwise), else the one present (ONNX
    when both are)."""
    found = bert_formats(directory)
    if wanted is not None:
        if wanted not in BERT_FORMATS:
            raise ManifestError(f"BERT format {wanted!r}: choose one of {', '.join(BERT_FORMATS)}")
        if wanted not in found:
            raise ManifestError(
                f"{directory}: no {BERT_FORMATS[wanted]} (the {wanted} BERT); it holds "
                f"{', '.join(BERT_FORMATS[f] for f in found) or 'no BERT model'}"
            )
        return wanted
    if not found:
        raise ManifestError(
            f"{directory}: no BERT model ({' or '.join(BERT_FORMATS.values())}); export one with "
            "`readability-triton export-bert` or build the set with `build-demo`"
        )
    return found[0]


@dataclass
class Manifest:
    """The contents of `manifest.json`."""

    max_length: int
    n_features: int = contracts.N_FEATURES
    files: dict[str, str] = field(default_factory=dict)  # name -> SHA-256
    info: dict = field(default_factory=dict)  # training records, by section
    versions: dict[str, str] = field(default_factory=dict)
    created: str = ""
    format: int = FORMAT

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def blend_weights(self) -> tuple[float, float] | None:
        """SCORE's (BERT, forest) weights fitted for this set (`info.blend`), if any."""
        blend = self.info.get("blend")
        return (float(blend["bert_weight"]), float(blend["forest_weight"])) if blend else None

    @classmethod
    def from_dict(cls, data: dict, where: str = MANIFEST) -> "Manifest":
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else data
            raise ManifestError(f"{where}: unknown manifest format {found!r} (this version reads format {FORMAT})")
        for key in ("max_length", "n_features", "files"):
            if key not in data:
                raise ManifestError(f"{where}: missing key {key!r}")
        known = {
            k: data[k]
            for k in ("max_length", "n_features", "files", "info", "versions", "created", "format")
            if k in data
        }
        return cls(**known)


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    """Versions of what built the artifacts (only the packages that are importable)."""
    from importlib import metadata

    versions = {"readability-triton": __version__, "python": platform.python_version()}
    for name in ("numpy", "torch", "transformers", "tokenizers", "scikit-learn", "treelite"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def write_manifest(
    directory: str, max_length: int, n_features: int = contracts.N_FEATURES, info: dict | None = None
) -> Manifest:
    """Write `directory/manifest.json` over every artifact file present in `directory`."""
    files = {}
    names = [n for model in MODEL_FILES for n in MODEL_FILES[model] + OPTIONAL_FILES.get(model, ())]
    for name in names + list(BERT_FORMATS.values()):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            files[name] = sha256(path)
    manifest = Manifest(
        max_length=int(max_length),
        n_features=int(n_features),
        files=files,
        info=info or {},
        versions=library_versions(),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest.to_dict(), handle, indent=2, sort_keys=True)
        handle.write("\n")
    return manifest


def load_manifest(directory: str) -> Manifest:
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise ManifestError(
            f"{directory}: no {MANIFEST}; build the artifacts with "
            "`readability-triton build-demo` (or write one with the training commands)"
        )
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as err:
        raise ManifestError(f"{path}: not valid JSON ({err})") from None
    return Manifest.from_dict(data, path)


def verify_files(directory: str, manifest: Manifest, names) -> None:
    """Check that each of `names` is in `directory` with the checksum the manifest gives."""
    for name in names:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise ManifestError(f"{directory}: missing {name}")
        expected = manifest.files.get(name)
        if expected is None:
            raise ManifestError(f"{directory}: {name} is not listed in {MANIFEST}")
        if sha256(path) != expected:
            raise ManifestError(
                f"{path}: checksum differs from {MANIFEST}; the file was changed or "
                "belongs to another artifact set: rebuild or re-assemble"
            )


def present(directory: str, names) -> list[str]:
    """The files of `names` that are in `directory`."""
    return [name for name in names if os.path.isfile(os.path.join(directory, name))]


def check_artifacts(directory: str, max_length: int | None = None, n_features: int = contracts.N_FEATURES) -> Manifest:
    """Everything `assemble` checks before it copies an artifact set; returns the manifest."""
    if not os.path.isdir(directory):
        raise ManifestError(f"{directory}: no such artifact folder")
    manifest = load_manifest(directory)
    if manifest.n_features != n_features:
        raise ManifestError(
            f"{directory}: the forest was trained on {manifest.n_features} features, "
            f"the featurize contract gives {n_features}"
        )
    if max_length is not None and manifest.max_length != max_length:
        raise ManifestError(
            f"{directory}: the BERT model was exported for max_length {manifest.max_length}, not {max_length}"
        )
    choose_bert_format(directory)  # at least one BERT model
    required = [name for names in MODEL_FILES.values() for name in names]
    optional = present(
        directory, [name for names in OPTIONAL_FILES.values() for name in names] + list(BERT_FORMATS.values())
    )
    verify_files(directory, manifest, required + optional)
    return manifest


def update_manifest(
    directory: str, section: str, info: Mapping[str, Any], max_length: int | None = None, key: str | None = None
) -> Manifest:
    """Rewrite `directory/manifest.json` over the files present, keeping the other
    sections' training info (and the recorded max_length unless one is given); with `key`,
    `info` goes to `section[key]` (e.g. one export format beside another)."""
    old = None
    if os.path.isfile(os.path.join(directory, MANIFEST)):
        try:
            old = load_manifest(directory)
        except ManifestError:
            old = None  # unreadable: written anew
    merged = dict(old.info if old else {})
    merged.pop("build_key", None)  # no longer a build-demo set as built
    if key is None:
        merged[section] = info
    else:
        merged[section] = {**(merged.get(section) or {}), key: info}
    length = max_length if max_length is not None else (old.max_length if old else contracts.DEFAULT_MAX_LENGTH)
    return write_manifest(directory, length, contracts.N_FEATURES, merged)
