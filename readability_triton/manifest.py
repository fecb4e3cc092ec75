"""`manifest.json`: what an artifact set is, checked by `assemble` and by the models.

An artifact set is one flat folder:

    model.pt                    TorchScript BERT regressor (bert)
    vocab.txt, tokenizer.json,  the tokenizer the BERT model was trained with (preprocess)
    tokenizer_config.json, special_tokens_map.json
    checkpoint.tl               Treelite 4.x checkpoint of the random forest (forest)
    vocabulary.json             the feature vocabulary the forest was trained on (featurize)
    manifest.json               this file

The manifest records the format, `max_length`, `n_features`, the versions that built
the artifacts, free-form training info and a SHA-256 of every file. `assemble` refuses
a set whose files are missing or whose checksums or contract numbers do not match; the
models check the checksums of the files they load against the manifest copied into
their version folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time

from . import __version__, contracts

MANIFEST = "manifest.json"
FORMAT = 1

#: The files each model needs, and which are optional.
MODEL_FILES = {
    contracts.PREPROCESS: ("vocab.txt",),
    contracts.FEATURIZE: ("vocabulary.json",),
    contracts.BERT: ("model.pt",),
    contracts.FOREST: ("checkpoint.tl",),
}
OPTIONAL_FILES = {
    contracts.PREPROCESS: ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
}


class ManifestError(ValueError):
    """An artifact set that does not match its manifest or the contracts."""


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


def write_manifest(directory: str, max_length: int, n_features: int = contracts.N_FEATURES,
                   info: dict | None = None) -> dict:
    """Write `directory/manifest.json` over every artifact file present in `directory`."""
    files = {}
    for model in MODEL_FILES:
        for name in MODEL_FILES[model] + OPTIONAL_FILES.get(model, ()):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                files[name] = sha256(path)
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "max_length": int(max_length),
        "n_features": int(n_features),
        "versions": library_versions(),
        "info": info or {},
        "files": files,
    }
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return manifest


def load_manifest(directory: str) -> dict:
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise ManifestError(f"{directory}: no {MANIFEST}; build the artifacts with "
                            "`readability-triton build-demo` (or write one with the training commands)")
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except json.JSONDecodeError as err:
        raise ManifestError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ManifestError(f"{path}: unknown manifest format {manifest.get('format') if isinstance(manifest, dict) else manifest!r} "
                            f"(this version reads format {FORMAT})")
    for key in ("max_length", "n_features", "files"):
        if key not in manifest:
            raise ManifestError(f"{path}: missing key {key!r}")
    return manifest


def verify_files(directory: str, manifest: dict, names) -> None:
    """Check that each of `names` is in `directory` with the checksum the manifest gives."""
    for name in names:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise ManifestError(f"{directory}: missing {name}")
        expected = manifest["files"].get(name)
        if expected is None:
            raise ManifestError(f"{directory}: {name} is not listed in {MANIFEST}")
        if sha256(path) != expected:
            raise ManifestError(f"{path}: checksum differs from {MANIFEST}; the file was changed or "
                                "belongs to another artifact set: rebuild or re-assemble")


def check_artifacts(directory: str, max_length: int | None = None,
                    n_features: int = contracts.N_FEATURES) -> dict:
    """Everything `assemble` checks before it copies an artifact set; returns the manifest."""
    if not os.path.isdir(directory):
        raise ManifestError(f"{directory}: no such artifact folder")
    manifest = load_manifest(directory)
    if manifest["n_features"] != n_features:
        raise ManifestError(f"{directory}: the forest was trained on {manifest['n_features']} features, "
                            f"the featurize contract gives {n_features}")
    if max_length is not None and manifest["max_length"] != max_length:
        raise ManifestError(f"{directory}: the BERT model was exported for max_length "
                            f"{manifest['max_length']}, not {max_length}")
    required = [name for names in MODEL_FILES.values() for name in names]
    optional = [name for names in OPTIONAL_FILES.values() for name in names
                if os.path.isfile(os.path.join(directory, name))]
    verify_files(directory, manifest, required + optional)
    return manifest
