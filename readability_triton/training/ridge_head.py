"""A frozen BERT encoder with a ridge-regression head: the BERT branch `build-demo` builds
(no fine-tuning, so it runs on a CPU in minutes).

The encoder embeds every training text once (frozen weights, the serving tokenizer); for
each pooling in `bert.modules.POOLINGS` a ridge regression (alpha chosen by generalised
cross-validation inside each training fold) is scored by K-fold CV, the pooling with the
lowest CV RMSE is kept, and its ridge fitted on all texts becomes the `nn.Linear` head of
a `PooledRegressor` (encoder + pooling + head), which `bert_export.export_torchscript` traces.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from ..errors import DemoError
from ..folds import check_folds, out_of_fold
from ..metrics import mean_rmse, rmse

#: Ridge penalties tried (by generalised cross-validation) for the BERT head.
RIDGE_ALPHAS = tuple(float(a) for a in np.logspace(-3, 4, 29))


def embed(
    encoder, input_ids, attention_mask, poolings=None, batch_size: int = 32, progress=None
) -> dict[str, np.ndarray]:
    """Every text's pooled vector for each pooling (Hugging Face's own forward with the 2-D
    mask; length-sorted batches trimmed to their longest row)."""
    import torch

    from ..bert.modules import POOLINGS, length_batches, pool

    poolings = tuple(poolings or POOLINGS)
    out: dict[str, np.ndarray] = {}
    bar = progress(total=len(input_ids), desc="embedding", unit="text") if progress else None
    with torch.inference_mode():
        for index, length in length_batches(attention_mask, batch_size):
            mask = attention_mask[index, :length]
            outputs = encoder(
                input_ids=input_ids[index, :length], attention_mask=mask, output_hidden_states=True, return_dict=True
            )
            for p in poolings:
                vectors = pool(outputs, mask, p).double().numpy()
                if p not in out:
                    out[p] = np.zeros((len(input_ids), vectors.shape[1]))
                out[p][index.numpy()] = vectors
            if bar is not None:
                bar.update(len(index))
    if bar is not None:
        bar.close()
    return out


class HeadChoice(TypedDict):
    """The ridge head `select_head` keeps: its pooling, its fit, and how it was chosen."""

    pooling: str
    cv_rmse: float
    cv_rmse_by_pooling: dict[str, float]
    folds: int
    alpha: float
    coef: np.ndarray
    intercept: float
    mean_rmse: float
    oof: np.ndarray  # out-of-fold predictions of the chosen pooling


def select_head(pooled: dict[str, np.ndarray], targets, folds: int = 5, seed: int = 0) -> HeadChoice:
    """K-fold CV RMSE of a ridge head on each pooling; the best one, refitted on all."""
    from sklearn.linear_model import RidgeCV

    y = np.asarray(targets, dtype=np.float64)
    check_folds(folds, len(y), optional=False, error=DemoError)  # the head is chosen by cross-validation
    scores, oofs = {}, {}
    for pooling, X in pooled.items():

        def fit_predict(train, held, X=X):
            return RidgeCV(alphas=RIDGE_ALPHAS).fit(X[train], y[train]).predict(X[held])

        oofs[pooling], _ = out_of_fold(y, folds, fit_predict, seed)
        scores[pooling] = rmse(oofs[pooling], y)
    best = min(scores, key=scores.__getitem__)
    ridge = RidgeCV(alphas=RIDGE_ALPHAS).fit(pooled[best], y)
    return {
        "pooling": best,
        "cv_rmse": scores[best],
        "cv_rmse_by_pooling": scores,
        "folds": folds,
        "alpha": float(ridge.alpha_),
        "coef": ridge.coef_.astype(np.float64),
        "intercept": float(ridge.intercept_),
        "mean_rmse": mean_rmse(y),
        "oof": oofs[best],
    }


def install_head(encoder, head: HeadChoice):
    """encoder + pooling + `nn.Linear` holding the ridge weights."""
    import torch

    from ..bert.modules import PooledRegressor

    coef = np.asarray(head["coef"], dtype=np.float32).reshape(1, -1)
    linear = torch.nn.Linear(coef.shape[1], 1)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(coef))
        linear.bias.fill_(head["intercept"])
    return PooledRegressor(encoder, head["pooling"], linear).eval()
