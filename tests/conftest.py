"""Shared test helper: a seeded random batch for a model."""

from __future__ import annotations

import pytest
import torch

from gradlab.models import MLP


def _make_batch(model: MLP, n: int = 100, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x (n, D_in), y (n, D_out) from `seed`, drawn in float64 and cast to the model's dtype."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, model.sizes[0], generator=gen, dtype=torch.float64)
    y = torch.randn(n, model.sizes[-1], generator=gen, dtype=torch.float64)
    dtype = model.layer1.weight.dtype
    return x.to(dtype), y.to(dtype)


@pytest.fixture
def make_batch():
    return _make_batch
