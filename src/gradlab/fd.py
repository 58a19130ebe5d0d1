"""Batched central finite differences: many perturbed parameter sets in one forward pass.

Everything here works on a flat parameter vector theta (n,) and a matrix of step vectors
S (m, n): row j gives (L(theta + S_j) - L(theta - S_j)) / 2, which approximates g . S_j.
All 2m perturbed sets of a chunk go through one batched forward (models.forward_batched),
so the cost is a few large matmuls, not 2n Python-level forward passes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from gradlab.models import MLP, forward_batched

# Upper bound on the activations one chunk of perturbed sets may hold.
DEFAULT_MAX_BYTES = 64 * 2**20


def flatten(model: MLP, dtype: torch.dtype) -> tuple[Tensor, dict[str, torch.Size]]:
    """theta (n,) as a fresh copy in `dtype`, and the shape of each named parameter."""
    tensors = model.named_tensors()
    theta = torch.cat([t.reshape(-1) for t in tensors.values()]).to(dtype)
    return theta, {name: t.shape for name, t in tensors.items()}


def unflatten(sets: Tensor, shapes: dict[str, torch.Size]) -> list[Tensor]:
    """(P, n) parameter sets -> [(P, *shape) per parameter], in model order."""
    out, offset = [], 0
    for shape in shapes.values():
        numel = shape.numel()
        out.append(sets[:, offset : offset + numel].reshape(sets.shape[0], *shape))
        offset += numel
    return out


def batched_losses(
    sets: Tensor, shapes: dict[str, torch.Size], x: Tensor, y: Tensor, activation: str
) -> tuple[Tensor, list[Tensor]]:
    """MSE loss (P,) of every parameter set, and the hidden pre-activations (P, B, H_k)."""
    y_hat, pre = forward_batched(unflatten(sets, shapes), x, activation)
    return (y_hat - y).pow(2).mean(dim=(1, 2)), pre


def central_differences(
    model: MLP,
    theta: Tensor,
    shapes: dict[str, torch.Size],
    x: Tensor,
    y: Tensor,
    steps: Callable[[Tensor], Tensor],
    rows: Tensor,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[Tensor, Tensor]:
    """For each step row S_j given by steps(rows) (c, n): fd_j ~ g . S_j, and whether the
    perturbation flipped any ReLU on/off decision (a kink: then fd_j is not a derivative)."""
    relu = model.activation == "relu"
    base_on = None
    if relu:
        _, pre = batched_losses(theta.unsqueeze(0), shapes, x, y, model.activation)
        base_on = [p > 0 for p in pre]
    m = rows.numel()
    per_set = x.shape[0] * (sum(model.sizes[1:]) + 2) * theta.element_size() * 3
    chunk = max(1, min(m, max_bytes // (2 * per_set)))
    fd = torch.empty(m, dtype=theta.dtype, device=theta.device)
    kinked = torch.zeros(m, dtype=torch.bool, device=theta.device)
    for start in range(0, m, chunk):
        stop = min(m, start + chunk)
        s = steps(rows[start:stop])  # (c, n)
        sets = torch.cat([theta + s, theta - s])  # (2c, n)
        losses, pre = batched_losses(sets, shapes, x, y, model.activation)
        c = stop - start
        fd[start:stop] = (losses[:c] - losses[c:]) / 2
        if relu:
            flips = torch.stack(
                [((p > 0) != on).flatten(1).any(1) for p, on in zip(pre, base_on)]
            ).any(0)
            kinked[start:stop] = flips[:c] | flips[c:]
    return fd, kinked


def default_steps(theta: Tensor, h: float | None = None) -> Tensor:
    """Per-element step h * max(1, |theta|), h defaulting to cbrt(machine eps) of theta's dtype."""
    if h is None:
        h = torch.finfo(theta.dtype).eps ** (1 / 3)
    return h * theta.abs().clamp(min=1.0)


def coordinate_steps(h_vec: Tensor) -> Callable[[Tensor], Tensor]:
    """steps(rows) for S = diag(h_vec): row i perturbs element i alone by h_i."""

    def steps(rows: Tensor) -> Tensor:
        s = torch.zeros(rows.numel(), h_vec.numel(), dtype=h_vec.dtype, device=h_vec.device)
        s[torch.arange(rows.numel(), device=h_vec.device), rows] = h_vec[rows]
        return s

    return steps


def function_differences(
    fn: Callable[..., Tensor],
    xs: list[Tensor],
    t: int,
    w: Tensor,
    steps: Callable[[Tensor], Tensor],
    rows: Tensor,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor:
    """For each step row s_j = steps(rows) (c, xs[t].numel()) of input t alone:
    fd_j = (F(x_t + s_j) - F(x_t - s_j)) / 2 ~ dF . s_j, where F = sum(w * fn(*xs)).

    All 2c perturbed copies of input t are stacked along a new leading dim (in front of every
    output dim, so inputs of fewer dims still broadcast right); the other inputs broadcast, each
    passed as a fresh clone because a Function may modify its inputs in place (mark_dirty)."""
    x = xs[t]
    lead = (1,) * (w.dim() - x.dim())  # align x's dims with the output's trailing dims
    chunk = max(1, max_bytes // (2 * 4 * max(w.numel(), x.numel()) * w.element_size()))
    m = rows.numel()
    out = torch.empty(m, dtype=w.dtype, device=w.device)
    for start in range(0, m, chunk):
        stop = min(m, start + chunk)
        c = stop - start
        s = steps(rows[start:stop]).view(c, *lead, *x.shape)
        args = [v.clone() for v in xs]
        args[t] = torch.cat([x + s, x - s])  # (2c, *lead, *x.shape)
        f = fn(*args)
        if f.shape != (2 * c, *w.shape):
            raise ValueError(
                f"fn must broadcast over a leading batch dim of its inputs: perturbing input{t} "
                f"as {tuple(args[t].shape)} gave an output of shape {tuple(f.shape)}, "
                f"expected {(2 * c, *w.shape)}"
            )
        total = (f * w).flatten(1).sum(1)  # (2c,)
        out[start:stop] = (total[:c] - total[c:]) / 2
    return out
