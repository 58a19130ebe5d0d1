"""The loss every gradient method, the checker and training use.

L = mean over all B * D_out elements of (y_hat - y)^2        (torch.nn.functional.mse_loss)
dL/dy_hat = 2 * (y_hat - y) / (B * D_out)
"""

from __future__ import annotations

import torch
from torch import Tensor


def mse_loss(y_hat: Tensor, y: Tensor) -> Tensor:
    """Mean squared error over every element (gradlab's single loss convention)."""
    return torch.mean((y_hat - y) ** 2)
