"""Gradient through custom torch.autograd.Functions, one per primitive: linear, sigmoid, ReLU,
and the loss (MSE, or cross-entropy for class labels).

Each Function follows PyTorch's extending guide: save only inputs/outputs with
ctx.save_for_backward, and only those backward will use (ctx.needs_input_grad is known in
forward already), compute an input's gradient only when ctx.needs_input_grad asks for it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from gradlab.models import MLP

# act'(z) times the incoming gradient from the output a = act(z), as one kernel each: the kernels
# autograd's own Sigmoid and ReLU nodes call (the formulas spelled out cost 2-3 ops each).
sigmoid_backward = torch.ops.aten.sigmoid_backward  # (grad_s, s) -> grad_s * s * (1 - s)


def relu_backward(grad_a: Tensor, a: Tensor) -> Tensor:
    """grad_a * 1[a > 0]."""
    return torch.ops.aten.threshold_backward(grad_a, a, 0)


class LinearFunction(torch.autograd.Function):
    """z = x @ W^T + b; x: (B, I), W: (O, I), b: (O,)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        need_x, need_w, _ = ctx.needs_input_grad
        # grad_x needs only W and grad_W only x (the first layer's x needs no gradient)
        ctx.save_for_backward(x if need_w else None, weight if need_x else None)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_z):  # grad_z: (B, O)
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        grad_x = grad_z.mm(weight) if need_x else None  # (B, I)
        grad_w = grad_z.t().mm(x) if need_w else None  # (O, I)
        grad_b = grad_z.sum(0) if need_b else None  # (O,)
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
        return sigmoid_backward(grad_s, s)


class ReLUFunction(torch.autograd.Function):
    """a = max(z, 0); da/dz = 1[z > 0] = 1[a > 0] (0 at the kink, as torch.relu)."""

    @staticmethod
    def forward(ctx, z):
        a = torch.relu(z)
        ctx.save_for_backward(a)
        return a

    @staticmethod
    def backward(ctx, grad_a):
        (a,) = ctx.saved_tensors
        return relu_backward(grad_a, a)


class MSEFunction(torch.autograd.Function):
    """L = mean((y_hat - y)^2); dL/dy_hat = 2 (y_hat - y) / N."""

    @staticmethod
    def forward(ctx, y_hat, y):
        diff = y_hat - y
        ctx.save_for_backward(diff)
        return diff.pow(2).mean()

    @staticmethod
    def backward(ctx, grad_loss):  # grad_loss: 0-d
        (diff,) = ctx.saved_tensors
        grad = diff * (grad_loss * (2.0 / diff.numel()))
        return grad if ctx.needs_input_grad[0] else None, -grad if ctx.needs_input_grad[1] else None


class CrossEntropyFunction(torch.autograd.Function):
    """L = mean_b(logsumexp(z_b) - z_b[label_b]); dL/dz = (softmax(z) - onehot(label)) / B.
    Saves the softmax, what backward needs; labels (int64) get no gradient."""

    @staticmethod
    def forward(ctx, logits, labels):
        log_p = logits.log_softmax(1)  # (B, C)
        ctx.save_for_backward(log_p.exp(), labels)
        return -log_p.gather(1, labels.unsqueeze(1)).mean()

    @staticmethod
    def backward(ctx, grad_loss):  # grad_loss: 0-d
        p, labels = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None
        grad = p.scatter_add(1, labels.unsqueeze(1), -torch.ones_like(p[:, :1]))  # p - onehot
        return grad * (grad_loss / len(labels)), None


linear = LinearFunction.apply
sigmoid = SigmoidFunction.apply
relu = ReLUFunction.apply
mse = MSEFunction.apply
cross_entropy = CrossEntropyFunction.apply


def loss(prediction: Tensor, target: Tensor) -> Tensor:
    """The loss as a Function: mse for real targets, cross_entropy for class labels."""
    return (
        mse(prediction, target) if target.is_floating_point() else cross_entropy(prediction, target)
    )


def gradient(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients with every primitive a custom Function (autograd only chains them)."""
    act = sigmoid if model.activation == "sigmoid" else relu
    names, params = zip(*model.named_parameters())
    *hidden, last = model.layers
    with torch.enable_grad():
        a = x
        for layer in hidden:
            a = act(linear(a, layer.weight, layer.bias))
        value = loss(linear(a, last.weight, last.bias), y)
        grads = torch.autograd.grad(value, params)
    return value.detach(), dict(zip(names, grads))
