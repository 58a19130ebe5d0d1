"""The losses every gradient method, the checker and training use.

MLPs (regression):
L = mean over all B * D_out elements of (y_hat - y)^2        (torch.nn.functional.mse_loss)
dL/dy_hat = 2 * (y_hat - y) / (B * D_out)

DigitsCNN (classification, integer labels):
L = mean over the batch of -log softmax(logits)[label]       (torch.nn.functional.cross_entropy)
dL/dlogits = (softmax(logits) - onehot(labels)) / B
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def mse_loss(y_hat: Tensor, y: Tensor) -> Tensor:
    """Mean squared error over every element (gradlab's single loss convention)."""
    return torch.mean((y_hat - y) ** 2)


def cross_entropy_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Softmax cross-entropy of logits (B, K) against int64 labels (B,), mean over the batch.

    L = (1/B) sum_b [logsumexp_k(logits[b, k]) - logits[b, labels[b]]], so
    dL/dlogits = (softmax(logits) - onehot(labels)) / B                  (B, K)
    """
    return F.cross_entropy(logits, labels)
