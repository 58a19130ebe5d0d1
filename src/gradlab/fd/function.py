"""Plain central differences of an opaque function of tensors (check_function's reference):
fd_j = (F(x + s_j) - F(x - s_j)) / 2 from two evaluations of F, all perturbed copies in one call."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from gradlab.fd.point import DEFAULT_MAX_BYTES


def plain_steps(theta: Tensor, h: float | None = None) -> Tensor:
    """Per-element step h * max(1, |theta|), h defaulting to cbrt(machine eps) of theta's dtype:
    the step that balances truncation (~h^2) against the rounding (~eps / h) of a difference
    taken from two function values."""
    if h is None:
        h = torch.finfo(theta.dtype).eps ** (1 / 3)
    return theta.abs().clamp_(min=1.0).mul_(h)


def coordinate_steps(h_vec: Tensor) -> Callable[[Tensor], Tensor]:
    """steps(rows) for S = diag(h_vec): row i perturbs element i alone by h_i."""

    def steps(rows: Tensor) -> Tensor:
        s = torch.zeros(rows.numel(), h_vec.numel(), dtype=h_vec.dtype, device=h_vec.device)
        s[torch.arange(rows.numel(), device=h_vec.device), rows] = h_vec[rows]
        return s

    return steps


def row_steps(s: Tensor) -> Callable[[Tensor], Tensor]:
    """steps(rows) for given step rows S (m, n)."""
    return lambda rows: s[rows]


def function_differences(
    fn: Callable[..., Tensor],
    xs: Sequence[Tensor],
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
