"""Gradient through custom torch.autograd.Functions, one per primitive: linear, sigmoid, ReLU, MSE.

Each Function follows PyTorch's extending guide: save only inputs/outputs with
ctx.save_for_backward, compute an input's gradient only when ctx.needs_input_grad asks for it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradlab.models import MLP


class LinearFunction(torch.autograd.Function):
    """z = x @ W^T + b; x: (B, I), W: (O, I), b: (O,)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def backward(ctx, grad_z):  # grad_z: (B, O)
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_z.mm(weight)  # (B, I)
        if ctx.needs_input_grad[1]:
            grad_w = grad_z.t().mm(x)  # (O, I)
        if ctx.needs_input_grad[2]:
            grad_b = grad_z.sum(0)  # (O,)
        return grad_x, grad_w, grad_b


class SigmoidFunction(torch.autograd.Function):
    """s = 1 / (1 + exp(-z)); ds/dz = s (1 - s), so the output is what backward needs."""

    @staticmethod
    def forward(ctx, z):
        s = torch.sigmoid(z)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, grad_s):
        (s,) = ctx.saved_tensors
        return grad_s * s * (1 - s)


class ReLUFunction(torch.autograd.Function):
    """a = max(z, 0); da/dz = 1[z > 0] (0 at the kink, as torch.relu)."""

    @staticmethod
    def forward(ctx, z):
        a = z.clamp(min=0)
        ctx.save_for_backward(a)
        return a

    @staticmethod
    def backward(ctx, grad_a):
        (a,) = ctx.saved_tensors
        return grad_a * (a > 0)


class MSEFunction(torch.autograd.Function):
    """L = mean((y_hat - y)^2); dL/dy_hat = 2 (y_hat - y) / N."""

    @staticmethod
    def forward(ctx, y_hat, y):
        diff = y_hat - y
        ctx.save_for_backward(diff)
        return diff.pow(2).mean()

    @staticmethod
    def backward(ctx, grad_loss):
        (diff,) = ctx.saved_tensors
        grad = diff * (grad_loss * 2.0 / diff.numel())
        return grad if ctx.needs_input_grad[0] else None, -grad if ctx.needs_input_grad[1] else None


linear = LinearFunction.apply
sigmoid = SigmoidFunction.apply
relu = ReLUFunction.apply
mse = MSEFunction.apply


def function(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients with every primitive a custom Function (autograd only chains them)."""
    act = sigmoid if model.activation == "sigmoid" else relu
    names, params = zip(*model.named_parameters())
    *hidden, last = model.layers
    with torch.enable_grad():
        a = x
        for layer in hidden:
            a = act(linear(a, layer.weight, layer.bias))
        loss = mse(linear(a, last.weight, last.bias), y)
        grads = torch.autograd.grad(loss, params)
    return loss.detach(), dict(zip(names, grads))
