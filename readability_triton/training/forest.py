"""The forest branch: vocabulary, the 207 features, a random forest, a Treelite checkpoint.

`train_forest` fits the feature vocabulary on the training texts, computes the features
with the project's featurizer (`features.featurize`, the code the `featurize` model runs,
so training and serving compute the same numbers), fits a random-forest regressor and
writes

    checkpoint.tl     Treelite 4.x checkpoint (the FIL backend's `treelite_checkpoint`)
    vocabulary.json   the vocabulary the forest was trained on (`featurize` loads it)

The forest is cuML's `RandomForestRegressor` on a GPU when cuML is importable and a GPU
is visible, scikit-learn's otherwise, with the same hyper-parameters.

Cross-validation refits the vocabulary inside each fold (the held-out texts never choose
the frequency words), so the reported RMSE is what unseen texts get.

Checkpoints are Treelite 4.x (see `forest.checkpoint`). Before export, every split threshold
of a scikit-learn forest is replaced by the largest float32 not above it: features are float32, so for every float32
input `x <= t` and `x <= float32_down(t)` agree and predictions do not change, while FIL
(which compares in float32) then takes exactly the branches scikit-learn takes. The
written checkpoint is read back and its Treelite (GTIL) predictions must equal the fitted
forest's.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import numpy as np

from .. import contracts
from ..data import data_digest, text_fingerprints
from ..errors import ForestError
from ..features import Vocabulary, build_vocabulary, featurize
from ..folds import check_folds, out_of_fold
from ..forest.checkpoint import gtil_predict, treelite_module
from ..layout import CHECKPOINT, VOCABULARY, update_manifest
from ..metrics import mean_rmse, rmse

log = logging.getLogger(__name__)

#: Hyper-parameters of the forest (both libraries). max_features and min_samples_leaf
#: were chosen by 5-fold CV on the CommonLit excerpts (see `train_forest`).
DEFAULTS = {"n_estimators": 100, "max_depth": 16, "max_features": 0.33, "min_samples_leaf": 3}
#: |GTIL(checkpoint) - forest.predict| accepted by the round-trip check.
ROUND_TRIP_TOLERANCE = {"sklearn": 1e-6, "cuml": 1e-4}


@dataclass
class FittedForest:
    vocabulary: Vocabulary
    model: object  # sklearn or cuML RandomForestRegressor
    backend: str  # "sklearn" or "cuml"
    features: np.ndarray  # the training features, float32 (n, 207)


# ----------------------------------------------------------------- backends


def _gpu_visible() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: no GPU
        return False


def _cuml_available() -> bool:
    try:
        import cuml.ensemble  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken cuML install is "not available"
        return False
    return _gpu_visible()


def choose_backend(preference: str = "auto") -> str:
    """`auto`: cuML when importable with a visible GPU, scikit-learn otherwise."""
    if preference == "auto":
        return "cuml" if _cuml_available() else "sklearn"
    if preference == "cuml":
        if not _cuml_available():
            raise ForestError(
                "--backend cuml: cuML is not importable or no GPU is visible; use --backend sklearn "
                "(or auto), or install RAPIDS cuML on a GPU machine"
            )
        return "cuml"
    if preference == "sklearn":
        return "sklearn"
    raise ForestError(f"--backend {preference!r}: choose auto, sklearn or cuml")


def check_params(n_estimators: int, max_depth: int, max_features: float, min_samples_leaf: int) -> None:
    if n_estimators < 1:
        raise ForestError(f"--n-estimators {n_estimators}: must be at least 1")
    if max_depth < 1:
        raise ForestError(f"--max-depth {max_depth}: must be at least 1")
    if not 0 < max_features <= 1:
        raise ForestError(f"--max-features {max_features}: must be a fraction of the features in (0, 1]")
    if min_samples_leaf < 1:
        raise ForestError(f"--min-samples-leaf {min_samples_leaf}: must be at least 1")


#: What each library takes besides the shared hyper-parameters.
BACKEND_OPTIONS = {"cuml": {"n_streams": 1}, "sklearn": {"n_jobs": -1}}  # one cuML stream: reproducible


def forest_kwargs(
    backend: str, *, n_estimators: int, max_depth: int, max_features: float, min_samples_leaf: int, seed: int
) -> dict:
    """The constructor arguments of `backend`'s RandomForestRegressor: the same
    hyper-parameters for both (bootstrap on), plus the library's own options."""
    check_params(n_estimators, max_depth, max_features, min_samples_leaf)
    if backend not in BACKEND_OPTIONS:
        raise ForestError(f"backend {backend!r}: choose one of {', '.join(BACKEND_OPTIONS)}")
    return {
        "n_estimators": n_estimators,
        "max_depth": max_depth,
        "max_features": max_features,
        "min_samples_leaf": min_samples_leaf,
        "bootstrap": True,
        "random_state": seed,
        **BACKEND_OPTIONS[backend],
    }


def make_forest(backend: str, **params):
    """An unfitted forest of `backend` (see `forest_kwargs`)."""
    kwargs = forest_kwargs(backend, **params)
    if backend == "cuml":
        from cuml.ensemble import RandomForestRegressor

        return RandomForestRegressor(**kwargs)
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(**kwargs)


def _fit_model(model, backend: str, X, y, progress=None, desc: str = "forest"):
    """Fit; scikit-learn forests grow in steps of 10 trees behind a progress bar
    (`warm_start` draws the same per-tree seeds as one call, so the forest is the same)."""
    y = np.asarray(y, dtype=np.float32 if backend == "cuml" else np.float64)
    if backend != "sklearn" or progress is None or model.n_estimators <= 10:
        return model.fit(X, y)
    total = model.n_estimators
    model.set_params(warm_start=True)
    with progress(total=total, desc=desc, unit="tree") as bar:
        grown = 0
        while grown < total:
            grown = min(total, grown + 10)
            model.set_params(n_estimators=grown)
            model.fit(X, y)
            bar.update(grown - bar.n)
    model.set_params(warm_start=False)
    return model


def predict(model, backend: str, X) -> np.ndarray:
    out = model.predict(np.asarray(X, dtype=np.float32))
    if hasattr(out, "get"):  # CuPy
        out = out.get()
    return np.asarray(out, dtype=np.float64).reshape(-1)


def float32_exact_thresholds(model) -> int:
    """Replace every split threshold of a fitted scikit-learn forest by the largest
    float32 not above it (see the module docstring). Returns how many changed."""
    changed = 0
    for estimator in model.estimators_:
        tree = estimator.tree_
        thresholds = tree.threshold  # a view of the tree's nodes
        split = tree.children_left >= 0
        values = thresholds[split]
        down = values.astype(np.float32)
        above = down.astype(np.float64) > values
        down[above] = np.nextafter(down[above], np.float32(-np.inf))
        new = down.astype(np.float64)
        changed += int(np.count_nonzero(new != values))
        thresholds[split] = new
        if not np.array_equal(tree.threshold[split], new):
            raise RuntimeError(
                "scikit-learn no longer exposes writable tree thresholds; float32_exact_thresholds needs updating"
            )
    return changed


# ----------------------------------------------------------------- features


def _vocabulary(texts, n: int = contracts.VOCABULARY_SIZE):
    try:
        return build_vocabulary(texts, n=n)
    except ValueError as err:
        raise ForestError(
            f"cannot fit the feature vocabulary: {err}. The forest's {contracts.N_FEATURES} "
            f"features need at least {2 * n} distinct words in the training texts: "
            "use more (or longer) training texts"
        ) from None


def features_of(texts, vocabulary) -> np.ndarray:
    X = np.asarray(featurize(list(texts), vocabulary), dtype=np.float32)
    if X.shape != (len(texts), contracts.N_FEATURES):
        raise RuntimeError(f"featurize returned {X.shape}, the contract is ({len(texts)}, {contracts.N_FEATURES})")
    return X


def fit(
    texts,
    targets,
    *,
    backend: str = "sklearn",
    seed: int = 0,
    progress=None,
    desc: str = "forest",
    vocabulary=None,
    **params,
) -> FittedForest:
    """Vocabulary (unless given), features and forest on `texts`."""
    params = {**DEFAULTS, **params}
    vocabulary = vocabulary or _vocabulary(texts)
    X = features_of(texts, vocabulary)
    model = make_forest(backend, seed=seed, **params)
    _fit_model(model, backend, X, targets, progress, desc)
    if backend == "sklearn":
        float32_exact_thresholds(model)
    return FittedForest(vocabulary, model, backend, X)


def cross_validate(
    texts, targets, folds: int = 5, *, backend: str = "sklearn", seed: int = 0, progress=None, **params
) -> dict:
    """K-fold CV RMSE; vocabulary, features and forest are refitted inside each fold."""
    texts = list(texts)
    y = np.asarray(targets, dtype=np.float64)
    check_folds(folds, len(texts), optional=False, error=ForestError)

    def fit_predict(train, held):
        fitted = fit([texts[i] for i in train], y[train], backend=backend, seed=seed, **params)
        return predict(fitted.model, backend, features_of([texts[i] for i in held], fitted.vocabulary))

    oof, fold_rmse = out_of_fold(y, folds, fit_predict, seed, progress)
    return {
        "folds": folds,
        "cv_rmse": rmse(oof, y),
        "fold_rmse": fold_rmse,
        "mean_rmse": mean_rmse(y),
        "oof": [float(v) for v in oof],
        "data_digest": data_digest(texts, y),
    }


def to_treelite(model, backend: str):
    """The fitted forest as a `treelite.Model`."""
    treelite = treelite_module()
    if backend == "sklearn":
        import treelite.sklearn

        return treelite.sklearn.import_model(model)
    if hasattr(model, "as_treelite"):  # cuML >= 24.x
        tl = model.as_treelite()
        if isinstance(tl, (bytes, bytearray)):
            return treelite.Model.deserialize_bytes(bytes(tl))
        return tl
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # older cuML
        path = os.path.join(tmp, CHECKPOINT)
        model.convert_to_treelite_model().to_treelite_checkpoint(path)
        return treelite.Model.deserialize(path)


def write_checkpoint(fitted: FittedForest, path: str, check_rows: np.ndarray | None = None) -> dict:
    """Write `fitted`'s forest as a Treelite checkpoint, read it back and check that its
    predictions equal the forest's; nothing is written if they do not."""
    treelite = treelite_module()
    model = to_treelite(fitted.model, fitted.backend)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        model.serialize(temporary)
        loaded = treelite.Model.deserialize(temporary)
        if loaded.num_feature != contracts.N_FEATURES:
            raise RuntimeError(
                f"the checkpoint takes {loaded.num_feature} features, the contract {contracts.N_FEATURES}"
            )
        X = fitted.features if check_rows is None else check_rows
        got = gtil_predict(loaded, X)
        want = predict(fitted.model, fitted.backend, X)
        diff = float(np.max(np.abs(got - want))) if len(X) else 0.0
        if not diff <= ROUND_TRIP_TOLERANCE[fitted.backend]:
            raise RuntimeError(
                f"the Treelite checkpoint predicts differently from the fitted forest "
                f"(max |diff| {diff:.3g}); {path} was not written"
            )
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return {
        "num_feature": int(loaded.num_feature),
        "num_tree": int(loaded.num_tree),
        "round_trip_max_abs_diff": diff,
        "round_trip_rows": int(len(X)),
        "treelite": str(treelite.__version__),
        "bytes": os.path.getsize(path),
    }


# ----------------------------------------------------------------- training


def train_forest(
    texts,
    targets,
    out_dir: str,
    *,
    folds: int = 5,
    backend: str = "auto",
    seed: int = 0,
    progress=None,
    data: dict | None = None,
    **params,
) -> dict:
    """`train-forest`: optional K-fold CV, then vocabulary + features + forest on all the
    texts, written to `out_dir/checkpoint.tl` and `out_dir/vocabulary.json`, and
    `out_dir/manifest.json` (re)written over the files there with this record as its
    `forest` section (with `data`, where the texts came from): the forest branch of an
    artifact set `assemble` accepts. Returns the training record (CV RMSE,
    hyper-parameters, checkpoint facts)."""
    params = {**DEFAULTS, **{k: v for k, v in params.items() if v is not None}}
    check_params(**params)
    texts = list(texts)
    y = np.asarray(targets, dtype=np.float64)
    if len(texts) != len(y):
        raise ForestError(f"{len(texts)} texts but {len(y)} targets")
    if len(texts) < 2:
        raise ForestError(f"{len(texts)} training text(s); a forest needs at least 2")
    folds = check_folds(folds, len(texts), error=ForestError)
    backend = choose_backend(backend)
    started = time.perf_counter()
    record = {
        "backend": backend,
        "seed": seed,
        "n_texts": len(texts),
        **params,
        "data_digest": data_digest(texts, y),
        "texts_seen": text_fingerprints(texts),
    }  # train-blend will not fit weights on these texts in-sample
    log.info(
        f"training a random forest ({backend}; {params['n_estimators']} trees, depth {params['max_depth']}) "
        f"on {len(texts)} texts"
    )
    if folds:
        cv = cross_validate(texts, y, folds, backend=backend, seed=seed, progress=progress, **params)
        record.update(cv)
        log.info(
            f"{folds}-fold CV RMSE {cv['cv_rmse']:.4f} (folds: {', '.join(f'{r:.4f}' for r in cv['fold_rmse'])}; "
            f"predicting the mean: {cv['mean_rmse']:.4f})"
        )
    fitted = fit(texts, y, backend=backend, seed=seed, progress=progress, desc="forest", **params)
    record["train_rmse"] = rmse(predict(fitted.model, backend, fitted.features), y)
    os.makedirs(out_dir, exist_ok=True)
    fitted.vocabulary.save(os.path.join(out_dir, VOCABULARY))
    record["checkpoint"] = write_checkpoint(fitted, os.path.join(out_dir, CHECKPOINT))
    record["n_features"] = contracts.N_FEATURES
    record["seconds"] = round(time.perf_counter() - started, 1)
    log.info(
        f"wrote {CHECKPOINT} ({record['checkpoint']['num_tree']} trees, "
        f"{record['checkpoint']['num_feature']} features; Treelite {record['checkpoint']['treelite']}; "
        f"round trip max |diff| {record['checkpoint']['round_trip_max_abs_diff']:.2g}) and {VOCABULARY}"
    )
    if data is not None:
        record["data"] = data
    update_manifest(out_dir, "forest", record)
    return record
