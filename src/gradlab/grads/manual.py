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
from torch import Tensor

from gradlab.models import MLP


@torch.no_grad()
def manual(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients by the formulas above; only forward activations are kept."""
    layers = [(layer.weight, layer.bias) for layer in model.layers]
    acts = [x]  # a_0 .. a_{L-1}
    for w, b in layers[:-1]:
        z = torch.addmm(b, acts[-1], w.t())  # (B, D_k)
        acts.append(torch.sigmoid(z) if model.activation == "sigmoid" else torch.relu(z))
    w_out, b_out = layers[-1]
    diff = torch.addmm(b_out, acts[-1], w_out.t()).sub_(y)  # y_hat - y, (B, D_L)
    loss = diff.pow(2).mean()

    grads: dict[str, Tensor] = {}
    dz = diff.mul_(2.0 / diff.numel())  # (B, D_L)
    for k in range(len(layers), 0, -1):
        w, _ = layers[k - 1]
        a_prev = acts[k - 1]
        grads[f"layer{k}.weight"] = dz.t().mm(a_prev)  # (D_k, D_{k-1})
        grads[f"layer{k}.bias"] = dz.sum(0)  # (D_k,)
        if k > 1:
            da = dz.mm(w)  # (B, D_{k-1})
            if model.activation == "relu":
                dz = da.mul_(a_prev > 0)
            else:
                dz = da.mul_(a_prev * (1 - a_prev))
    return loss, {name: grads[name] for name, _ in model.named_parameters()}
