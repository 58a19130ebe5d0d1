"""Hand-derived backpropagation for gradlab's MLPs: no autograd at all (runs under no_grad).

Notation for a net of L linear layers, batch B, layer k mapping D_{k-1} -> D_k:
    a_0 = x                                  (B, D_0)
    z_k = a_{k-1} @ W_k^T + b_k              (B, D_k)      W_k: (D_k, D_{k-1}), b_k: (D_k,)
    a_k = act(z_k)   for k < L               (B, D_k)
    y_hat = z_L,  L = mean((y_hat - y)^2)    (B, D_L)

Backward, from the output down:
    dz_L = 2 (y_hat - y) / (B * D_L)         (B, D_L)
    dW_k = dz_k^T @ a_{k-1}                  (D_k, D_{k-1})
    db_k = sum over the batch of dz_k        (D_k,)
    da_{k-1} = dz_k @ W_k                    (B, D_{k-1})
    dz_{k-1} = da_{k-1} * act'(z_{k-1}), with
        relu:    act' = 1[z > 0] = 1[a > 0]        (the kink at 0 takes derivative 0, as PyTorch)
        sigmoid: act' = a * (1 - a)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from gradlab.grads.function import relu_backward, sigmoid_backward  # plain kernels, no autograd
from gradlab.models import MLP


@torch.no_grad()
def gradient(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients by the formulas above; only forward activations are kept."""
    relu = model.activation == "relu"
    layers = model.layers
    acts = [x]  # a_0 .. a_{L-1}
    for layer in layers[:-1]:
        z = F.linear(acts[-1], layer.weight, layer.bias)  # a_{k-1} @ W_k^T + b_k, (B, D_k)
        acts.append(z.relu_() if relu else z.sigmoid_())  # z_k is not needed again: in place
    last = layers[-1]
    diff = F.linear(acts[-1], last.weight, last.bias).sub_(y)  # y_hat - y, (B, D_L)
    loss = diff.pow(2).mean()

    grads: dict[str, Tensor] = {}  # filled from the output down
    dz = diff.mul_(2.0 / diff.numel())  # (B, D_L)
    for k in range(len(layers), 0, -1):
        a_prev = acts[k - 1]
        grads[f"layer{k}.bias"] = dz.sum(0)  # (D_k,)
        grads[f"layer{k}.weight"] = dz.t().mm(a_prev)  # (D_k, D_{k-1})
        if k > 1:
            da = dz.mm(layers[k - 1].weight)  # (B, D_{k-1})
            dz = relu_backward(da, a_prev) if relu else sigmoid_backward(da, a_prev)  # act'
    return loss, dict(reversed(grads.items()))  # in parameter order: layer1.weight first
