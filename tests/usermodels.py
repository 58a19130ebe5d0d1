"""A user's own models, found by model.target (tests/ is on the path): a factory, a class with a
custom autograd.Function inside, and the things that cannot be trained."""

from __future__ import annotations

import torch
from torch import nn


def build(width: int = 8, d_in: int = 4, d_out: int = 1) -> nn.Module:
    return nn.Sequential(nn.Linear(d_in, width), nn.Tanh(), nn.Linear(width, d_out))


class Square(torch.autograd.Function):
    """x^2 with a backward that is off by `error` (0: right)."""

    @staticmethod
    def forward(ctx, x, error):
        ctx.save_for_backward(x)
        ctx.error = error
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x * (1 + ctx.error), None


class SquareNet(nn.Module):
    """Linear -> the user's Square Function -> Linear."""

    def __init__(self, d_in: int = 4, d_out: int = 1, error: float = 0.0):
        super().__init__()
        self.inp, self.out, self.error = nn.Linear(d_in, 6), nn.Linear(6, d_out), error

    def forward(self, x):
        return self.out(Square.apply(self.inp(x), self.error))


class NoParameters(nn.Module):
    def forward(self, x):
        return x


def not_a_module() -> int:
    return 3


def raises(**kwargs) -> nn.Module:
    raise RuntimeError("the user's factory failed")


NOT_CALLABLE = 7
