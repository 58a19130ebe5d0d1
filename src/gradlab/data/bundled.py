"""Real data bundled with scikit-learn (no download): digits (8x8 images, 10 classes) and
diabetes (10 features, a real target). Each is split once, the same way for every run (a fixed
permutation, not the run's seed), and standardized with the training part's statistics."""

from __future__ import annotations

import torch
from torch import Tensor

SPLIT_SEED = 0  # the split is the data set's, not the run's


def _split(x: Tensor, y: Tensor, val_fraction: float):
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"data.val_fraction={val_fraction} must be in [0, 1)")
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = int(round(val_fraction * len(x)))
    val, train = order[:n_val], order[n_val:]
    if not n_val:
        return x, y, None, None
    return x[train], y[train], x[val], y[val]


def _standardize(train: Tensor, *others: Tensor | None) -> list[Tensor | None]:
    """(t - mean) / std by the training part's columns (a constant column stays 0)."""
    mean, std = train.mean(0), train.std(0)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return [None if t is None else (t - mean) / std for t in (train, *others)]


def digits(loss: str, seed: int, model=None, layout: str = "flat", val_fraction: float = 0.2):
    """sklearn's 1797 digits: x (N, 64) for layout=flat or (N, 1, 8, 8) for layout=image;
    cross_entropy: int labels; mse: one-hot targets (N, 10)."""
    from sklearn.datasets import load_digits

    if layout not in ("flat", "image"):
        raise ValueError(f"data.layout={layout!r} is not allowed; allowed: flat, image")
    raw = load_digits()
    x = torch.tensor(raw.data, dtype=torch.float64)
    labels = torch.tensor(raw.target, dtype=torch.int64)
    x, labels, x_val, labels_val = _split(x, labels, val_fraction)
    x, x_val = _standardize(x, x_val)
    if layout == "image":
        x, x_val = (None if t is None else t.view(-1, 1, 8, 8) for t in (x, x_val))
    if loss == "mse":
        eye = torch.eye(10, dtype=torch.float64)
        return x, eye[labels], x_val, None if labels_val is None else eye[labels_val], None
    return x, labels, x_val, labels_val, 10


def diabetes(loss: str, seed: int, model=None, val_fraction: float = 0.2):
    """sklearn's 442 diabetes patients: x (N, 10), y (N, 1) disease progression; both
    standardized."""
    from sklearn.datasets import load_diabetes

    if loss != "mse":
        raise ValueError("data=diabetes has a real target: it needs loss=mse")
    raw = load_diabetes()
    x = torch.tensor(raw.data, dtype=torch.float64)
    y = torch.tensor(raw.target, dtype=torch.float64).unsqueeze(1)
    x, y, x_val, y_val = _split(x, y, val_fraction)
    x, x_val = _standardize(x, x_val)
    y, y_val = _standardize(y, y_val)
    return x, y, x_val, y_val, None
