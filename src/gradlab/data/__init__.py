"""The data a run trains on, built by name: synthetic (the articles' random regression, XOR) or
bundled with scikit-learn (digits, diabetes: nothing is downloaded). Every set is a Dataset:
tensors on the run's device and dtype, class labels as int64, and a fixed validation split
where the set has one.

Batches are a pure function of (seed, step), so a run resumed from a checkpoint at step s sees
exactly the batches an uninterrupted run sees from step s on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gradlab.data.bundled import diabetes, digits
from gradlab.data.synthetic import regression, xor

DATASETS = {"regression": regression, "xor": xor, "digits": digits, "diabetes": diabetes}
CLASSIFICATION = ("digits",)  # sets whose targets are classes: their default loss is cross_entropy
LOSSES = ("auto", "mse", "cross_entropy")


@dataclass
class Dataset:
    """Training set x (N, ...), y (N, D_out) real or (N,) int64 labels; the validation set
    (None: the set has no split); `classes` for labels (None: real targets)."""

    x: Tensor
    y: Tensor
    batch_size: int
    seed: int
    x_val: Tensor | None = None
    y_val: Tensor | None = None
    classes: int | None = None

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        """The batch for a global step: the whole set, or a slice of a per-epoch permutation."""
        n = self.x.shape[0]
        if self.batch_size >= n:
            return self.x, self.y
        per_epoch = n // self.batch_size
        epoch, i = divmod(step, per_epoch)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        idx = torch.randperm(n, generator=gen)[i * self.batch_size : (i + 1) * self.batch_size]
        idx = idx.to(self.x.device)
        return self.x[idx], self.y[idx]


def loss_of(name: str, loss: str) -> str:
    """The loss a run on data `name` uses: `loss`, or for auto the set's own."""
    if loss != "auto":
        return loss
    return "cross_entropy" if name in CLASSIFICATION else "mse"


def make_dataset(
    name: str,
    model: nn.Module | None = None,
    loss: str = "auto",
    batch_size: int = 100,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    **options,
) -> Dataset:
    """Data set `name` (one of DATASETS) for `model` (regression's teacher is an MLP's own
    architecture) and `loss`; options are the set's own (see its builder). Raises ValueError,
    one line, for what the set cannot do."""
    if name not in DATASETS:
        raise ValueError(f"unknown data {name!r}; allowed: {', '.join(DATASETS)}")
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; allowed: {', '.join(LOSSES)}")
    built = DATASETS[name](loss=loss_of(name, loss), seed=seed, model=model, **options)
    x, y, x_val, y_val, classes = built

    def put(t: Tensor | None) -> Tensor | None:
        if t is None:
            return None
        return t.to(device) if not t.is_floating_point() else t.to(device, dtype)

    return Dataset(put(x), put(y), min(batch_size, len(x)), seed, put(x_val), put(y_val), classes)


__all__ = ["CLASSIFICATION", "DATASETS", "LOSSES", "Dataset", "loss_of", "make_dataset"]
