"""The two losses every gradient method, the checker and training use; a batch's targets say
which: real targets (B, D_out) take the MSE, integer class labels (B,) the cross-entropy.

    mse:            L = mean over all B * D_out elements of (y_hat - y)^2
                    dL/dy_hat = 2 (y_hat - y) / (B D_out)
    cross_entropy:  L = mean over the batch of logsumexp(z_b) - z_b[label_b]   (z: logits)
                    dL/dz = (softmax(z) - onehot(label)) / B
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def mse_loss(y_hat: Tensor, y: Tensor) -> Tensor:
    """Mean squared error over every element."""
    return torch.mean((y_hat - y) ** 2)


def cross_entropy_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Softmax cross-entropy with integer class labels, the mean over the batch."""
    return F.cross_entropy(logits, labels)


def loss(prediction: Tensor, target: Tensor) -> Tensor:
    """The loss of the batch: cross_entropy_loss for integer labels, else mse_loss."""
    if target.is_floating_point():
        return mse_loss(prediction, target)
    return cross_entropy_loss(prediction, target)
