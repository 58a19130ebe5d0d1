"""Central differences of any nn.Module's loss, through torch.func: the module is opaque, so each
difference is taken from two losses, L(theta + s) - L(theta - s), all the perturbed parameter
sets of a call in one vmap over functional_call (one set after another when the module's ops
cannot be vmapped, e.g. a custom autograd.Function without a vmap rule).

Plain differences carry truncation (~h^2) and rounding (~eps |L| / h) errors, so each row is
taken at two steps, h and h/2: their Richardson combination (4 D(h/2) - D(h)) / 3 is the value
(truncation ~h^4), and |D(h) - D(h/2)| plus the rounding bound its error estimate, an upper
bound where the function is smooth and large where a step straddles a non-smooth point (a ReLU
kink, a max, an abs) the module does not declare. The step is small, so few rows straddle one.
A row whose error is above UNRESOLVED of its scale is redone at a tenth of the step (the better
of the two kept) and, still above it, excluded and counted: the differences cannot tell its
derivative. The error of the rows kept is the reference's floor: the check's tolerance is never
below what the differences can tell (gradlab.check.reference.compare).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from gradlab.fd.function import coordinate_steps, plain_steps
from gradlab.fd.point import DEFAULT_MAX_BYTES, KINK_RECHECK_FACTOR
from gradlab.losses import loss

# a row's error estimate above this fraction of max(|value|, the rows' rms) leaves it unresolved
UNRESOLVED = 1e-6


@dataclass
class GenericPoint:
    """theta (float64, flat) of `model` (a float64 module whose own values are not used) and
    the batch; `losses` evaluates the loss at many parameter vectors."""

    model: nn.Module
    theta: Tensor
    shapes: dict[str, torch.Size]
    x: Tensor
    y: Tensor
    relu: bool = False  # no per-ReLU kink rule: kinks are found by step consistency
    vmappable: bool = True

    @functools.cached_property
    def loss_value(self) -> float:
        return float(self.losses(self.theta.unsqueeze(0))[0])

    def params(self, flat: Tensor) -> dict[str, Tensor]:
        out, offset = {}, 0
        for name, shape in self.shapes.items():
            out[name] = flat[offset : offset + shape.numel()].view(shape)
            offset += shape.numel()
        return out

    def _one(self, flat: Tensor) -> Tensor:
        return loss(functional_call(self.model, self.params(flat), (self.x,)), self.y)

    @torch.no_grad()
    def losses(self, thetas: Tensor, max_bytes: int = DEFAULT_MAX_BYTES) -> Tensor:
        """L at each row of thetas (P, n)."""
        if self.vmappable:
            try:
                chunk = max(1, max_bytes // max(1, self.x.numel() * 8 * 16))
                return torch.cat([vmap(self._one)(t) for t in thetas.split(chunk)])
            except Exception:  # an op without a vmap rule: one set after another
                self.vmappable = False
        return torch.stack([self._one(t) for t in thetas])


@torch.no_grad()
def generic_point(module: nn.Module, x: Tensor, y: Tensor, dtype=torch.float64) -> GenericPoint:
    """The point of `module` (its parameters as theta; a module in `dtype`, whose own parameter
    values are then not used) and the batch, in `dtype`."""
    names, params = zip(*module.named_parameters())
    theta = torch.cat([p.detach().reshape(-1) for p in params]).to(dtype)
    y = y.to(dtype) if y.is_floating_point() else y
    return GenericPoint(module, theta, {n: p.shape for n, p in zip(names, params)}, x.to(dtype), y)


def default_h(dtype: torch.dtype = torch.float64) -> float:
    """The longer of the two steps: in float64 small enough that few rows of a ReLU net
    straddle a kink, while rounding (~eps |L| / h) stays far below the differences' scale;
    in a lower dtype scaled by its eps^(1/3), which keeps truncation and rounding in balance."""
    ratio = torch.finfo(dtype).eps / torch.finfo(torch.float64).eps
    return 1e-5 * ratio ** (1 / 3)


@torch.no_grad()
def coordinate_gradient(point: GenericPoint, h: float | None = None) -> Tensor:
    """Every coordinate's derivative (flat, in the point's dtype), steps h * max(1, |theta_i|)."""
    h = default_h(point.theta.dtype) if h is None else h
    steps = coordinate_steps(plain_steps(point.theta, h))
    rows = torch.arange(point.theta.numel(), device=point.theta.device)
    return torch.cat([differences(point, steps(chunk))[0] for chunk in rows.split(256)])


@torch.no_grad()
def differences(
    point: GenericPoint, steps: Tensor, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[Tensor, Tensor, Tensor | None, int]:
    """Along each step row s_j (m, n): the derivative g . s_j / |s_j| (Richardson), its error
    estimate, the rows excluded as unresolved (None: none) and the rows that needed the
    re-check."""
    values, error = _richardson(point, steps, max_bytes)
    scale = values.square().mean().sqrt()
    unresolved = error > UNRESOLVED * torch.maximum(values.abs(), scale)
    again = unresolved.nonzero().squeeze(1)
    if not again.numel():
        return values, error, None, 0
    redo, redo_error = _richardson(point, steps[again] * KINK_RECHECK_FACTOR, max_bytes)
    better = redo_error < error[again]
    values[again] = torch.where(better, redo, values[again])
    error[again] = torch.where(better, redo_error, error[again])
    unresolved = error > UNRESOLVED * torch.maximum(values.abs(), scale)
    error[unresolved] = 0.0  # excluded rows do not set the floor
    return values, error, (unresolved if bool(unresolved.any()) else None), again.numel()


def _richardson(point: GenericPoint, steps: Tensor, max_bytes: int) -> tuple[Tensor, Tensor]:
    length = torch.linalg.vector_norm(steps, dim=1)  # (m,)
    theta = point.theta.unsqueeze(0)
    sets = torch.cat([theta + steps, theta - steps, theta + steps / 2, theta - steps / 2])
    plus, minus, half_plus, half_minus = point.losses(sets, max_bytes).view(4, -1)
    full, half = (plus - minus) / (2 * length), (half_plus - half_minus) / length
    rounding = 8 * torch.finfo(point.theta.dtype).eps * abs(point.loss_value) / length
    return (4 * half - full) / 3, (full - half).abs() + rounding
