"""Gradient by PyTorch autograd: the reference every other method is compared with."""

from __future__ import annotations

import torch
from torch import Tensor

from gradlab.losses import mse_loss
from gradlab.models import MLP


def gradient(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and d loss / d parameter for every named parameter, by torch.autograd.grad."""
    names, params = zip(*model.named_parameters())
    with torch.enable_grad():
        loss = mse_loss(model(x), y)
        grads = torch.autograd.grad(loss, params)
    return loss.detach(), dict(zip(names, grads))
