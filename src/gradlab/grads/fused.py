"""Gradient through fused custom Functions: one Function per layer (linear + activation).

Fusing the activation into the layer saves one saved tensor per layer: backward needs the
layer's input x, W and the activation output a (relu: a > 0 is the mask; sigmoid: a (1 - a)),
never the pre-activation z.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradlab.grads.function import linear, mse
from gradlab.models import MLP


class LinearActFunction(torch.autograd.Function):
    """a = act(x @ W^T + b) for act in {relu, sigmoid}; x: (B, I), W: (O, I), b: (O,)."""

    @staticmethod
    def forward(ctx, x, weight, bias, activation):
        z = torch.addmm(bias, x, weight.t())
        a = torch.sigmoid(z) if activation == "sigmoid" else z.clamp_(min=0)
        ctx.activation = activation
        ctx.save_for_backward(x, weight, a)
        return a

    @staticmethod
    def backward(ctx, grad_a):  # (B, O)
        x, weight, a = ctx.saved_tensors
        grad_z = grad_a * a * (1 - a) if ctx.activation == "sigmoid" else grad_a * (a > 0)
        grad_x = grad_z.mm(weight) if ctx.needs_input_grad[0] else None  # (B, I)
        grad_w = grad_z.t().mm(x) if ctx.needs_input_grad[1] else None  # (O, I)
        grad_b = grad_z.sum(0) if ctx.needs_input_grad[2] else None  # (O,)
        return grad_x, grad_w, grad_b, None


linear_act = LinearActFunction.apply


def fused(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients with one custom Function per hidden layer, plus linear and MSE."""
    names, params = zip(*model.named_parameters())
    *hidden, last = model.layers
    with torch.enable_grad():
        a = x
        for layer in hidden:
            a = linear_act(a, layer.weight, layer.bias, model.activation)
        loss = mse(linear(a, last.weight, last.bias), y)
        grads = torch.autograd.grad(loss, params)
    return loss.detach(), dict(zip(names, grads))
