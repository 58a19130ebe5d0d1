"""Central finite differences as the training gradient (the articles' third method), vectorized.

g_i ~ (L(theta + h_i e_i) - L(theta - h_i e_i)) / (2 h_i), h_i = cbrt(eps) * max(1, |theta_i|),
evaluated in the model's own dtype (so float32 training sees float32 truncation and rounding error),
all 2n perturbed parameter sets in chunked batched forwards (gradlab.fd).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradlab import fd
from gradlab.models import MLP, mse_loss


@torch.no_grad()
def numerical(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss at theta and the central-difference gradient of every parameter element."""
    theta, shapes = fd.flatten(model, dtype=model.layer1.weight.dtype)
    h = fd.default_steps(theta)
    rows = torch.arange(theta.numel(), device=theta.device)
    diffs, _ = fd.central_differences(model, theta, shapes, x, y, fd.coordinate_steps(h), rows)
    flat = diffs / h
    grads = dict(zip(shapes, fd.unflatten(flat.unsqueeze(0), shapes)))
    return mse_loss(model(x), y), {name: g[0] for name, g in grads.items()}
