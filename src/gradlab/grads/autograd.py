"""Gradient by PyTorch autograd, of any nn.Module: the reference the methods are compared with
(and, through a user's own autograd.Function inside a model, that Function's backward checked)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gradlab.losses import loss


def gradient(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and d loss / d parameter for every named parameter, by torch.autograd.grad."""
    names, params = zip(*model.named_parameters())
    with torch.enable_grad():
        value = loss(model(x), y)
        grads = torch.autograd.grad(value, params)
    return value.detach(), dict(zip(names, grads))
