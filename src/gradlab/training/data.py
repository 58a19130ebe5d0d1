"""Training data: the articles' random regression (with a fixed teacher net) and XOR.

Batches are a pure function of (seed, step), so a run resumed from a checkpoint at step s sees
exactly the batches an uninterrupted run sees from step s on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from gradlab.models import MLP

DATASETS = ("regression", "xor")


@dataclass
class Dataset:
    """Full data set (x: (N, D_in), y: (N, D_out)), already on its device and dtype."""

    x: Tensor
    y: Tensor
    batch_size: int
    seed: int

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


class StepBatches:
    """An endless iterable of step groups starting at `start_step` (set it when resuming): each
    item holds (step, x, y) for consecutive steps, at most `steps_per_group` of them, ending on
    the next multiple of `event_every` (default: steps_per_group) if that comes first: 0,
    1..10, 11..20, ... for 10 and 10. Groups end on the steps where the checks and logging run,
    so the work between two groups follows those steps, never a step inside a group."""

    def __init__(
        self,
        data: Dataset,
        start_step: int = 0,
        steps_per_group: int = 1,
        event_every: int | None = None,
    ):
        self.data = data
        self.start_step = start_step
        self.steps_per_group = steps_per_group
        self.event_every = event_every or steps_per_group

    def __iter__(self) -> Iterator[list[tuple[int, Tensor, Tensor]]]:
        step, k, e = self.start_step, self.steps_per_group, self.event_every
        while True:
            end = min(-(-step // e) * e, step + k - 1)  # the next event step, or k steps on
            yield [(s, *self.data.batch(s)) for s in range(step, end + 1)]
            step = end + 1


def make_dataset(
    name: str,
    model: MLP,
    n_samples: int = 100,
    batch_size: int = 100,
    noise: float = 0.0,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> Dataset:
    """regression: x ~ N(0, 1), y = teacher(x) + noise, the teacher a fixed net of the model's
    architecture (seed + 1); xor: the four XOR points, repeated to n_samples (needs 2 -> 1)."""
    d_in, d_out = model.sizes[0], model.sizes[-1]
    gen = torch.Generator().manual_seed(int(seed) + 7919)
    if name == "regression":
        x = torch.randn(n_samples, d_in, generator=gen, dtype=torch.float64)
        teacher = MLP(model.sizes, model.activation, seed=int(seed) + 1, dtype=torch.float64)
        with torch.no_grad():
            y = teacher(x) + noise * torch.randn(
                n_samples, d_out, generator=gen, dtype=torch.float64
            )
    elif name == "xor":
        if (d_in, d_out) != (2, 1):
            raise ValueError(f"data xor needs a 2 -> 1 model, got {d_in} -> {d_out}")
        pts = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
        reps = -(-n_samples // 4)
        x = pts.repeat(reps, 1)[:n_samples]
        y = (x[:, :1] != x[:, 1:]).to(torch.float64)
    else:
        raise ValueError(f"unknown data {name!r}; allowed: {', '.join(DATASETS)}")
    return Dataset(x.to(device, dtype), y.to(device, dtype), min(batch_size, n_samples), seed)
