"""The two MLPs of the articles as plain nn.Modules.

Parameters are named ``layer1.weight``, ``layer1.bias``, ``layer2.weight``, ... in forward order;
``layerK.weight`` has shape (D_out_K, D_in_K) as in ``nn.Linear``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

ACTIVATIONS = ("sigmoid", "relu")


def activate(z: Tensor, activation: str) -> Tensor:
    return torch.sigmoid(z) if activation == "sigmoid" else torch.relu(z)


class MLP(nn.Module):
    """Fully connected net: Linear -> act -> ... -> Linear (no activation on the output)."""

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        super().__init__()
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2 or any(s < 1 for s in sizes):
            raise ValueError(f"sizes must be >= 2 positive integers, got {sizes}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.sizes = sizes
        self.activation = activation
        # Same init for every dtype and device: draw in float64 on the CPU from the seed, then cast.
        # Distribution as nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for W and b.
        gen = torch.Generator().manual_seed(int(seed))
        for i, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            layer = nn.Linear(d_in, d_out, device="meta")
            bound = 1.0 / math.sqrt(d_in)
            for name, shape in (("weight", (d_out, d_in)), ("bias", (d_out,))):
                value = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound
                setattr(layer, name, nn.Parameter(value.to(device=device, dtype=dtype)))
            self.add_module(f"layer{i}", layer)

    @property
    def layers(self) -> list[nn.Linear]:
        return [getattr(self, f"layer{i}") for i in range(1, len(self.sizes))]

    def forward(self, x: Tensor) -> Tensor:
        *hidden, last = self.layers
        for layer in hidden:
            x = activate(layer(x), self.activation)
        return last(x)


def two_layer_sigmoid(d_in: int = 2, hidden: int = 4, d_out: int = 1, **kw) -> MLP:
    """Article 004's TwoLayerNet: D_in -> H sigmoid -> D_out (default 2-4-1)."""
    return MLP([d_in, hidden, d_out], "sigmoid", **kw)


def three_layer_relu(d_in: int = 4, hidden: int = 16, d_out: int = 1, **kw) -> MLP:
    """Article 004's experiment net: D_in -> H ReLU -> H ReLU -> D_out (default 4-16-16-1)."""
    return MLP([d_in, hidden, hidden, d_out], "relu", **kw)
