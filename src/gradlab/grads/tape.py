"""Gradient by gradlab's own tape (gradlab.tape): the MLP built from recorded primitives.

A linear layer is composed, not a primitive: z = x @ W^T + b is transpose, matmul and a
broadcasting add, so the bias gradient comes out of add's backward as the batch sum.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradlab.models import MLP
from gradlab.tape import Tape, Var


def linear(x: Var, weight: Var, bias: Var) -> Var:
    """z = x @ W^T + b; x: (B, I), W: (O, I), b: (O,) -> (B, O)."""
    return x @ weight.T + bias


@torch.no_grad()
def tape(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients by recording the forward on a Tape and sweeping it in reverse."""
    t = Tape()
    act = t.sigmoid if model.activation == "sigmoid" else t.relu
    params = {name: t.leaf(p) for name, p in model.named_parameters()}
    *hidden, last = range(1, len(model.layers) + 1)
    a = t.leaf(x, requires_grad=False)  # (B, D_0): data needs no gradient
    for k in hidden:
        a = act(linear(a, params[f"layer{k}.weight"], params[f"layer{k}.bias"]))  # (B, D_k)
    y_hat = linear(a, params[f"layer{last}.weight"], params[f"layer{last}.bias"])  # (B, D_L)
    loss = t.mse(y_hat, t.leaf(y, requires_grad=False))
    grads = t.gradients(loss, list(params.values()))
    return loss.value, dict(zip(params, grads))
