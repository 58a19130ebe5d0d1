"""Hand-derived backpropagation for gradlab's MLPs: no autograd at all (runs under no_grad).

Notation for a net of L linear layers, batch B, layer k mapping D_{k-1} -> D_k:
    a_0 = x                                  (B, D_0)
    z_k = a_{k-1} @ W_k^T + b_k              (B, D_k)      W_k: (D_k, D_{k-1}), b_k: (D_k,)
    a_k = act(z_k)   for k < L               (B, D_k)
    y_hat = z_L                              (B, D_L)
    L = mean((y_hat - y)^2)          real targets y (B, D_L): mse
    L = mean_b(lse(z_L,b) - z_L,b[y_b])   class labels y (B,): cross-entropy (gradlab.losses)

Backward, from the output down:
    dz_L = 2 (y_hat - y) / (B * D_L)         (B, D_L)     mse
    dz_L = (softmax(z_L) - onehot(y)) / B    (B, D_L)     cross-entropy
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


def output_grad(z: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """The loss and dL/dz_L from the output z_L (B, D_L), for real targets or class labels."""
    if y.is_floating_point():  # mse
        diff = z.sub_(y)  # y_hat - y: z is not needed again
        return diff.pow(2).mean(), diff.mul_(2.0 / diff.numel())
    log_p = z.log_softmax(1)  # (B, D_L)
    picked = log_p.gather(1, y.unsqueeze(1))  # log p of each sample's label, (B, 1)
    dz = log_p.exp_().scatter_add_(1, y.unsqueeze(1), torch.full_like(picked, -1.0))
    return -picked.mean(), dz.div_(len(y))  # (softmax - onehot) / B


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
    loss, dz = output_grad(F.linear(acts[-1], last.weight, last.bias), y)  # dz_L (B, D_L)

    grads: dict[str, Tensor] = {}  # filled from the output down
    for k in range(len(layers), 0, -1):
        a_prev = acts[k - 1]
        grads[f"layer{k}.bias"] = dz.sum(0)  # (D_k,)
        grads[f"layer{k}.weight"] = dz.t().mm(a_prev)  # (D_k, D_{k-1})
        if k > 1:
            da = dz.mm(layers[k - 1].weight)  # (B, D_{k-1})
            dz = relu_backward(da, a_prev) if relu else sigmoid_backward(da, a_prev)  # act'
    return loss, dict(reversed(grads.items()))  # in parameter order: layer1.weight first
