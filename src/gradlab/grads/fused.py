"""Gradient through fused custom Functions: one Function per layer (linear + activation).

Fusing the activation into the layer saves one saved tensor and one autograd node per layer:
backward needs the layer's input x (for grad W), W (for grad x) and the activation output a
(relu: a > 0 is the mask; sigmoid: a (1 - a)), never the pre-activation z.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from gradlab.grads.function import linear, loss, relu_backward, sigmoid_backward
from gradlab.models import MLP

ACT_BACKWARD = {"relu": relu_backward, "sigmoid": sigmoid_backward}  # (grad_a, a) -> grad_z


class LinearActFunction(torch.autograd.Function):
    """a = act(x @ W^T + b) for act in {relu, sigmoid}; x: (B, I), W: (O, I), b: (O,)."""

    @staticmethod
    def forward(ctx, x, weight, bias, activation):
        z = F.linear(x, weight, bias)  # (B, O), fresh: the activation may overwrite it
        a = z.sigmoid_() if activation == "sigmoid" else z.relu_()
        need_x, need_w, _, _ = ctx.needs_input_grad
        ctx.act_backward = ACT_BACKWARD[activation]
        ctx.save_for_backward(x if need_w else None, weight if need_x else None, a)
        return a

    @staticmethod
    def backward(ctx, grad_a):  # (B, O)
        x, weight, a = ctx.saved_tensors
        need_x, need_w, need_b, _ = ctx.needs_input_grad
        grad_z = ctx.act_backward(grad_a, a)  # (B, O)
        grad_x = grad_z.mm(weight) if need_x else None  # (B, I)
        grad_w = grad_z.t().mm(x) if need_w else None  # (O, I)
        grad_b = grad_z.sum(0) if need_b else None  # (O,)
        return grad_x, grad_w, grad_b, None


linear_act = LinearActFunction.apply


def gradient(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients with one custom Function per hidden layer, plus linear and the loss."""
    names, params = zip(*model.named_parameters())
    *hidden, last = model.layers
    with torch.enable_grad():
        a = x
        for layer in hidden:
            a = linear_act(a, layer.weight, layer.bias, model.activation)
        value = loss(linear(a, last.weight, last.bias), y)
        grads = torch.autograd.grad(value, params)
    return value.detach(), dict(zip(names, grads))
