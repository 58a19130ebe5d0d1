"""Gradient of DigitsCNN through custom torch.autograd.Functions, one per primitive.

Conv (im2col) and average pooling are defined here; the linear layer, the ReLU and the
cross-entropy reuse gradlab.grads.function's LinearFunction, ReLUFunction and
CrossEntropyFunction. As there, each Function follows
PyTorch's extending guide: it saves only inputs/outputs with ctx.save_for_backward, and only those
its backward will use; non-tensor arguments live on ctx and get a None gradient; an input's
gradient is computed only when ctx.needs_input_grad asks for it. Autograd only chains the
Functions (and the flatten view between pooling and the linear layer).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from gradlab.grads.function import cross_entropy, linear, relu
from gradlab.models.cnn import POOL, DigitsCNN


def unfold(x: Tensor, kernel: int, padding: int) -> Tensor:
    """im2col, equal to F.unfold(x, kernel, padding=padding): x (B, I, H, W) -> (B, I k k, L).

    Strided views of the padded image and one copy (F.unfold's CPU kernel loops over samples).
    """
    padded = F.pad(x, 4 * [padding])  # (B, I, H + 2p, W + 2p)
    patches = padded.unfold(2, kernel, 1).unfold(3, kernel, 1)  # (B, I, H', W', k, k), a view
    return patches.permute(0, 1, 4, 5, 2, 3).flatten(1, 3).flatten(2)


class Conv2dFunction(torch.autograd.Function):
    """z = conv2d(x, W, b), stride 1, zero padding p, by im2col.

    x: (B, I, H, W); L = H' W' output pixels, H' = H + 2p - k + 1, W' = W + 2p - k + 1
    cols = unfold(x)                        (B, I k k, L)
    z = W_col @ cols + b                    (B, O, L)      W_col = W as (O, I k k), b: (O,)
    grad_cols = W_col^T @ grad_z            (B, I k k, L)
    grad_x = fold(grad_cols)                (B, I, H, W)   fold is unfold's adjoint: it sums
                                                           each patch entry back onto its pixel
    grad_W = sum over B of grad_z @ cols^T  (O, I k k)
    grad_b = sum over B and L of grad_z     (O,)
    """

    @staticmethod
    def forward(ctx, x, weight, bias, padding):
        need_x, need_w, _, _ = ctx.needs_input_grad
        # grad_x needs only W, grad_W only x: the cols are recomputed from x rather than saved,
        # since they hold k * k copies of x and are neither input nor output
        ctx.save_for_backward(x if need_w else None, weight if need_x else None)
        ctx.padding, ctx.kernel, ctx.image = padding, weight.shape[-1], x.shape[2:]
        out_h, out_w = (side + 2 * padding - ctx.kernel + 1 for side in ctx.image)
        cols = unfold(x, ctx.kernel, padding)  # (B, I k k, L)
        z = torch.matmul(weight.flatten(1), cols).add_(bias[:, None])  # (B, O, L)
        return z.view(x.shape[0], weight.shape[0], out_h, out_w)

    @staticmethod
    def backward(ctx, grad_z):  # grad_z: (B, O, H', W')
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b, _ = ctx.needs_input_grad
        grad_z = grad_z.flatten(2)  # (B, O, L)
        grad_x = grad_w = grad_b = None
        if need_x:
            grad_cols = torch.matmul(weight.flatten(1).t(), grad_z)  # (B, I k k, L)
            grad_x = F.fold(grad_cols, ctx.image, ctx.kernel, padding=ctx.padding)  # (B, I, H, W)
        if need_w:
            cols = unfold(x, ctx.kernel, ctx.padding)  # (B, I k k, L)
            grad_w = torch.bmm(grad_z, cols.transpose(1, 2)).sum(0)  # (O, I k k)
            grad_w = grad_w.view(-1, x.shape[1], ctx.kernel, ctx.kernel)  # (O, I, k, k)
        if need_b:
            grad_b = grad_z.sum((0, 2))  # (O,)
        return grad_x, grad_w, grad_b, None


class AvgPool2dFunction(torch.autograd.Function):
    """p = mean of each k x k window (stride k): a (B, C, H, W) -> p (B, C, H / k, W / k).

    p is linear in a: every pixel of a window gets 1/k^2 of that window's gradient,
    grad_a[..., r, s] = grad_p[..., r // k, s // k] / k^2; nothing needs saving.
    """

    @staticmethod
    def forward(ctx, a, size):
        if a.shape[-2] % size or a.shape[-1] % size:
            raise ValueError(f"{size}x{size} windows do not tile an image of {tuple(a.shape[-2:])}")
        ctx.size = size
        return F.avg_pool2d(a, size)

    @staticmethod
    def backward(ctx, grad_p):  # grad_p: (B, C, H / k, W / k)
        k = ctx.size
        batch, channels, rows, cols = grad_p.shape
        share = (grad_p / k**2)[:, :, :, None, :, None]  # (B, C, H/k, 1, W/k, 1)
        grad_a = share.expand(-1, -1, -1, k, -1, k).reshape(batch, channels, rows * k, cols * k)
        return grad_a, None


conv2d = Conv2dFunction.apply
avg_pool2d = AvgPool2dFunction.apply


def gradient(model: DigitsCNN, x: Tensor, labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients with every primitive a custom Function (autograd only chains them)."""
    names, params = zip(*model.named_parameters())
    with torch.enable_grad():
        z = conv2d(x, model.conv.weight, model.conv.bias, model.conv.padding[0])  # (B, C, 8, 8)
        h = avg_pool2d(relu(z), POOL).flatten(1)  # (B, 16 C)
        loss = cross_entropy(linear(h, model.fc.weight, model.fc.bias), labels)
        grads = torch.autograd.grad(loss, params)
    return loss.detach(), dict(zip(names, grads))
