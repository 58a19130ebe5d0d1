"""Central finite differences as the training gradient (the articles' third method), vectorized.

g_i ~ (L(theta + h_i e_i) - L(theta - h_i e_i)) / (2 h_i), h_i = cbrt(eps) * max(1, |theta_i|),
evaluated in the model's own dtype (so float32 training sees float32 truncation and rounding error),
all 2n perturbed parameter sets in chunked batched forwards, layer by layer (gradlab.fd).

A central difference that straddles a ReLU kink is a secant, not a derivative: as in the checker,
such coordinates are redone with a step ten times smaller (gradlab.fd.with_kink_recheck).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradlab import fd
from gradlab.losses import mse_loss
from gradlab.models import MLP


@torch.no_grad()
def gradient(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss at theta and the central-difference gradient of every parameter element."""
    point = fd.evaluation_point(model, x, y, dtype=model.layer1.weight.dtype)
    h = fd.default_steps(point.theta)
    flat = torch.cat([derivative for derivative, _, _ in fd.coordinate_fd(point, h)])
    grads = flat.split([shape.numel() for shape in point.shapes.values()])
    loss = mse_loss(point.forward.pre[-1], point.y)
    return loss, {name: g.view(point.shapes[name]) for name, g in zip(point.shapes, grads)}
