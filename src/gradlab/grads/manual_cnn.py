"""Hand-derived backpropagation for DigitsCNN: no autograd at all (runs under no_grad).

Notation: batch B, sample n; C channels; pixel (r, s) of the 8x8 image, u = 8 r + s; tap
t = 3 dr + dc of the 3x3 kernel (dr, dc in -1..1); pooling window (i, j) of the 4x4 pooled
image. The batch is the last axis of every matrix (column (u, n) = u * B + n), so that conv and
linear layers are each one matrix product in textbook form, weights on the left:
    X = im2col(x)                    (9, 64 B)      X[t, (u, n)] = x_pad[n, r + dr, s + dc]
    Z = W1 X + b1                    (C, 64 B)      W1 = conv.weight as (C, 9), b1 = conv.bias
    A = relu(Z)                      (C, 64 B)      = (C, 8, 8, B)
    P[c, i, j, n] = 1/4 sum over di, dj in {0, 1} of A[c, 2 i + di, 2 j + dj, n]   (C, 4, 4, B)
    H = P as (16 C, B)               (16 C, B)      row 16 c + 4 i + j: the flatten order
    O = W2 H + b2                    (10, B)        W2 = fc.weight (10, 16 C), b2 = fc.bias
    L = (1/B) sum_n [logsumexp(O[:, n]) - O[y_n, n]]

Backward, from the loss down (x needs no gradient):
    dO = (softmax(O) - onehot(y)) / B          (10, B)      softmax over the class axis
    dW2 = dO H^T                               (10, 16 C)
    db2 = sum over n of dO                     (10,)
    dH = W2^T dO                               (16 C, B)    = dP, (C, 4, 4, B)
    dA[c, r, s, n] = dP[c, r // 2, s // 2, n] / 4   (C, 8, 8, B)   1/4 of its window's gradient
    dZ = dA * 1[A > 0]                         (C, 64 B)    (the kink at 0 takes derivative 0)
    dW1 = dZ X^T                               (C, 9)
    db1 = sum over (u, n) of dZ                (C,)
im2col is a gather (equal to torch.nn.functional.unfold(x, 3, padding=1), reordered): it reads the
zero-padded image through a fixed index, one copy and no per-sample loop. dA is never stored: dP
broadcast over each window goes straight into the ReLU's backward kernel.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from gradlab.grads.function import relu_backward  # plain kernel, no autograd
from gradlab.models.cnn import KERNEL, POOL, SIDE, DigitsCNN

PIXELS, HALF = SIDE * SIDE, SIDE // POOL  # 64 pixels, 4 windows a side


@functools.cache
def _im2col_index(device: torch.device) -> Tensor:
    """(9 * 64,) int64: which pixel (1..64, 0 for the padding) tap t of output pixel u reads."""
    numbers = torch.arange(1.0, PIXELS + 1, dtype=torch.float64).view(1, 1, SIDE, SIDE)
    index = F.unfold(numbers, KERNEL, padding=KERNEL // 2)[0]  # (9, 64): unfold the numbering
    return index.long().flatten().to(device)


def im2col(x: Tensor) -> Tensor:
    """x (B, 1, 8, 8) -> X (9, 64 B), X[t, u * B + n] = F.unfold(x, 3, padding=1)[n, t, u]."""
    batch = x.shape[0]
    padded = torch.cat([x.new_zeros(1, batch), x.reshape(batch, PIXELS).t()])  # (1 + 64, B)
    return padded.index_select(0, _im2col_index(x.device)).view(KERNEL**2, PIXELS * batch)


@torch.no_grad()
def gradient(model: DigitsCNN, x: Tensor, labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients by the formulas above (labels: int64 (B,)); X, A, H, dO are kept."""
    batch, channels = x.shape[0], model.channels
    cols = im2col(x)  # X, (9, 64 B)
    w1 = model.conv.weight.view(channels, KERNEL**2)  # (C, 9)
    a = torch.addmm(model.conv.bias[:, None], w1, cols).relu_()  # A = relu(W1 X + b1), (C, 64 B)
    top, bottom = a.view(channels, HALF, POOL, SIDE * batch).unbind(2)  # di = 0, 1: (C, 4, 8 B)
    left, right = (top + bottom).view(channels, HALF, HALF, POOL, batch).unbind(3)  # dj = 0, 1
    h = (left + right).mul_(1 / POOL**2).view(channels * HALF**2, batch)  # H = P, (16 C, B)
    log_p = torch.addmm(model.fc.bias[:, None], model.fc.weight, h).log_softmax(0)  # (10, B)
    rows = labels[None, :]  # (1, B): the row of each column's label
    loss = log_p.gather(0, rows).mean().neg()

    grad_o = log_p.exp_().scatter_add_(0, rows, log_p.new_full(rows.shape, -1.0))
    grad_o = grad_o.div_(batch)  # dO = (softmax(O) - onehot(y)) / B, (10, B)
    grad_p = model.fc.weight.t().mm(grad_o).mul_(1 / POOL**2)  # dH / 4 = dP / 4, (16 C, B)
    windows = grad_p.view(channels, HALF, 1, HALF, 1, batch).expand(-1, -1, POOL, -1, POOL, -1)
    pixels = a.view(channels, HALF, POOL, HALF, POOL, batch)  # A as (C, 4, 2, 4, 2, B)
    grad_z = relu_backward(windows, pixels).view(channels, PIXELS * batch)  # dZ, (C, 64 B)
    return loss, {
        "conv.weight": grad_z.mm(cols.t()).view_as(model.conv.weight),  # dW1 = dZ X^T, (C, 9)
        "conv.bias": grad_z.sum(1),  # db1, (C,)
        "fc.weight": grad_o.mm(h.t()),  # dW2 = dO H^T, (10, 16 C)
        "fc.bias": grad_o.sum(1),  # db2, (10,)
    }
