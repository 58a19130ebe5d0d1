"""Central finite differences as the training gradient (the articles' third method), vectorized.

g_i ~ (L(theta + h_i e_i) - L(theta - h_i e_i)) / (2 h_i), h_i = sqrt(eps) * max(1, |theta_i|),
evaluated in the model's own dtype, all 2n perturbed parameter sets in batched forwards: for the
MLPs the same exact differences the checker uses (gradlab.fd.mlp: float64 gives the gradient to
rounding, float32 its truncation at a float32 step), for any other nn.Module plain differences of
two losses (gradlab.fd.generic).

A central difference that straddles a ReLU kink is a secant, not a derivative: as in the checker,
such coordinates are redone with a step ten times smaller (gradlab.fd.with_kink_recheck; for any
other module where the steps disagree, gradlab.fd.generic).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gradlab import fd
from gradlab.fd import generic
from gradlab.models import MLP


@torch.no_grad()
def gradient(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss at theta and the central-difference gradient of every parameter element."""
    if not isinstance(model, MLP):
        dtype = next(model.parameters()).dtype
        point = generic.generic_point(model, x, y, dtype)
        flat = generic.coordinate_gradient(point).split(
            [shape.numel() for shape in point.shapes.values()]
        )
        loss = torch.tensor(point.loss_value, dtype=dtype)
        return loss, {name: g.view(point.shapes[name]) for name, g in zip(point.shapes, flat)}
    point = fd.evaluation_point(model, x, y, dtype=model.layer1.weight.dtype)
    h = fd.default_steps(point.theta)
    flat = torch.cat([derivative for derivative, _, _ in fd.coordinate_fd(point, h)])
    grads = flat.split([shape.numel() for shape in point.shapes.values()])
    loss = point.loss()
    return loss, {name: g.view(point.shapes[name]) for name, g in zip(point.shapes, grads)}
