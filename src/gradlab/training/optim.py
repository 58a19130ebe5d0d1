"""Article 002's hand-written gradient-descent optimizer: p <- p - lr * p.grad, nothing else.

It is a torch.optim.Optimizer so that Lightning can checkpoint and wrap it like SGD or Adam.
"""

from __future__ import annotations

import torch


class GD(torch.optim.Optimizer):
    """Plain gradient descent (the article's step/zero_grad under no_grad)."""

    def __init__(self, params, lr: float = 0.01):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])
        return loss


def build_optimizer(name: str, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
    """sgd | adam | gd, by name."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "gd":
        return GD(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}; allowed: sgd, adam, gd")
