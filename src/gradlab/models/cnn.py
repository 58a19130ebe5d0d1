"""A small CNN for sklearn's 8x8 digits: conv 3x3 -> ReLU -> 2x2 average pool -> linear.

Parameters, in forward order: ``conv.weight`` (C, 1, 3, 3), ``conv.bias`` (C,),
``fc.weight`` (10, C * 4 * 4), ``fc.bias`` (10,). Average pooling rather than max pooling: it is
linear, so the ReLU is the net's only kink and finite differences see no ties between pooled
values.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SIDE, CLASSES, KERNEL, POOL = 8, 10, 3, 2  # 8x8 images, 10 digits, 3x3 conv, 2x2 pooling


class DigitsCNN(nn.Module):
    """x (B, 1, 8, 8) -> conv (B, C, 8, 8) -> ReLU -> avg pool (B, C, 4, 4) -> logits (B, 10)."""

    def __init__(
        self,
        channels: int = 8,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        super().__init__()
        channels = int(channels)
        if channels < 1:
            raise ValueError(f"channels must be a positive integer, got {channels}")
        self.channels = channels
        features = channels * (SIDE // POOL) ** 2  # C * 4 * 4
        layers = {
            "conv": nn.Conv2d(1, channels, KERNEL, padding=KERNEL // 2, device="meta"),
            "fc": nn.Linear(features, CLASSES, device="meta"),
        }
        # Same init for every dtype and device: draw in float64 on the CPU from the seed, then cast.
        # Distribution as nn.Conv2d's and nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        # for weight and bias, fan_in = 1 * 3 * 3 for the conv and C * 16 for the linear layer.
        gen = torch.Generator().manual_seed(int(seed))
        for layer_name, layer in layers.items():
            bound = 1.0 / math.sqrt(layer.weight[0].numel())
            for name in ("weight", "bias"):
                shape = getattr(layer, name).shape
                value = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound
                setattr(layer, name, nn.Parameter(value.to(device=device, dtype=dtype)))
            self.add_module(layer_name, layer)

    def forward(self, x: Tensor) -> Tensor:
        a = torch.relu(self.conv(x))  # (B, C, 8, 8)
        p = F.avg_pool2d(a, POOL)  # (B, C, 4, 4)
        return self.fc(p.flatten(1))  # (B, 10)


def digits_cnn(
    channels: int = 8,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> DigitsCNN:
    """DigitsCNN by its registry name (model=digits_cnn)."""
    return DigitsCNN(channels, seed=seed, dtype=dtype, device=device)
