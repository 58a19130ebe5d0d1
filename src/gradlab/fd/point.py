"""The point a finite difference is taken at: theta and the batch in one dtype, and the
unperturbed forward that every perturbed set's difference is measured from."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from gradlab.losses import loss
from gradlab.models import MLP

# Upper bound on the activations one chunk of perturbed sets may hold.
DEFAULT_MAX_BYTES = 16 * 2**20
# A difference that straddles a kink (or, in plain differences, that the steps do not resolve)
# is redone with a step this much smaller.
KINK_RECHECK_FACTOR = 0.1


class Forward(NamedTuple):
    """The unperturbed forward, (B, D) per layer."""

    acts: list[Tensor]  # a_0 = x, a_1, ..., a_{L-1}: each layer's input, (B, D_{k-1})
    pre: list[Tensor]  # z_1, ..., z_L (z_L = y_hat): each layer's pre-activation, (B, D_k)
    on: list[Tensor]  # relu only: z_k > 0 of each hidden layer, the base on/off pattern
    mask: list[Tensor]  # relu only: the same as 1.0 / 0.0 in the point's dtype
    size: list[Tensor]  # relu only: |z_k|, how far each pre-activation is from its kink
    margin: list[float]  # relu only: the smallest |z_k| of each hidden layer
    # mse: r = y_hat - y (B, D_L); cross-entropy: the softmax of the logits z_L (B, D_L)
    output: Tensor


@dataclass
class EvaluationPoint:
    """theta and the batch in the dtype the differences are taken in; the unperturbed forward is
    run on first use of ``forward``."""

    theta: Tensor  # (n,) a fresh copy
    shapes: dict[str, torch.Size]  # parameter name -> shape, in theta's order
    layers: list[tuple[Tensor, Tensor]]  # (W_k (D_k, D_{k-1}), b_k (D_k,)), views into theta
    spans: list[tuple[int, int]]  # layer k's parameters (W_k flat, then b_k) are theta[start:stop]
    relu: bool
    x: Tensor  # (B, D_0)
    y: Tensor  # real targets (B, D_L) for the mse, or integer class labels (B,) (cross-entropy)

    @functools.cached_property
    @torch.no_grad()
    def forward(self) -> Forward:
        acts, pre = [self.x], []
        for w, b in self.layers:
            pre.append(torch.addmm(b, acts[-1], w.t()))  # a W^T + b, (B, D_k)
            if len(pre) < len(self.layers):
                acts.append(torch.relu(pre[-1]) if self.relu else torch.sigmoid(pre[-1]))
        on = [z > 0 for z in pre[:-1]] if self.relu else []
        mask = [o.to(self.theta.dtype) for o in on]
        size = [z.abs() for z in pre[:-1]] if self.relu else []
        margin = [float(z.min()) if z.numel() else 0.0 for z in size]
        output = pre[-1] - self.y if self.y.is_floating_point() else pre[-1].softmax(1)
        return Forward(acts, pre, on, mask, size, margin, output)

    def loss(self) -> Tensor:
        """L at theta (gradlab.losses)."""
        return loss(self.forward.pre[-1], self.y)


@torch.no_grad()
def evaluation_point(model: MLP, x: Tensor, y: Tensor, dtype: torch.dtype) -> EvaluationPoint:
    """Copy theta and the batch to `dtype`."""
    names, params = zip(*model.named_parameters())
    theta = torch.cat([p.reshape(-1) for p in params]).to(dtype)  # a fresh copy
    layers, spans, offset = [], [], 0
    for w, b in zip(params[::2], params[1::2]):
        w_end = offset + w.numel()
        stop = w_end + b.numel()
        layers.append((theta[offset:w_end].view(w.shape), theta[w_end:stop]))
        spans.append((offset, stop))
        offset = stop
    return EvaluationPoint(
        theta=theta,
        shapes={name: p.shape for name, p in zip(names, params)},
        layers=layers,
        spans=spans,
        relu=model.activation == "relu",
        x=x.to(dtype, memory_format=torch.contiguous_format),
        y=y.to(dtype, memory_format=torch.contiguous_format) if y.is_floating_point() else y,
    )
