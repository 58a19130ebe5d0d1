"""check_function: the checker's step rule, modes and metrics for the backward of any function
of tensors that broadcasts over a leading batch dim (e.g. a custom product autograd.Function)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from gradlab import fd
from gradlab.check.directions import segments, unit_directions
from gradlab.check.gradient import MODES
from gradlab.check.result import DEFAULT_TOL, CheckResult, directional_metrics, metrics


def _analytic(fn, xs: list[Tensor], gen) -> tuple[Tensor, Tensor, str]:
    """dF/dx (flat) through fn's own backward, for F = sum(w * fn(*xs)) with a random weight w
    shaped like the output; a backward that fails gives NaNs and its reason."""
    leaves = [v.clone().requires_grad_() for v in xs]
    theta = torch.cat([v.reshape(-1) for v in xs])
    with torch.enable_grad():
        out = fn(*[v.clone() for v in leaves])  # clones: fn may modify its inputs (mark_dirty)
        w = torch.randn(out.shape, dtype=torch.float64, generator=gen).to(out.device)
        try:
            grads = torch.autograd.grad((out * w).sum(), leaves, allow_unused=True)
        except Exception as e:  # any failure of fn's backward is a failed check, with its reason
            return torch.full_like(theta, math.nan), w, f"{type(e).__name__}: {e}"
    parts = [torch.zeros_like(v) if gr is None else gr for v, gr in zip(xs, grads)]
    return torch.cat([gr.reshape(-1).to(theta) for gr in parts]), w, ""


def check_function(
    fn: Callable[..., Tensor],
    inputs: Sequence[Tensor],
    mode: str = "full",
    k: int = 4,
    h: float | None = None,
    tol: float | None = None,
    generator: torch.Generator | None = None,
    max_bytes: int = fd.DEFAULT_MAX_BYTES,
) -> CheckResult:
    """Check the backward of any fn(*inputs) -> Tensor that broadcasts over a leading batch dim
    of its inputs (elementwise ops, e.g. a custom product or quotient autograd.Function).

    The scalar checked is F = sum(w * fn(*inputs)), w a fixed random weight shaped like the output
    (drawn from `generator`, seeded 0 when None), so one wrong Jacobian entry cannot hide behind a
    plain sum. Analytic: torch.autograd.grad(F, inputs) through fn's own backward, on float64
    copies. Finite differences as check_gradient (same step rule, modes and metrics), perturbing
    one input at a time; errors are reported per input as input0, input1, ...; no kink detection.
    A backward that raises, or returns NaN/inf, gives the verdict fail (rel_err inf, the reason
    in ``error``), not an exception. tol defaults to the float64 tolerance: both sides are
    evaluated in float64.
    """
    if mode not in MODES:
        raise ValueError(f"unknown check mode {mode!r}; allowed: {', '.join(MODES)}")
    xs = [torch.as_tensor(v).detach().to(torch.float64, copy=True) for v in inputs]
    names = [f"input{i}" for i in range(len(xs))]
    theta = torch.cat([v.reshape(-1) for v in xs])
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    g, w, error = _analytic(fn, xs, gen)
    if tol is None:
        tol = DEFAULT_TOL[torch.float64]
    h_vec = fd.plain_steps(theta, h)
    sizes = tuple(v.numel() for v in xs)
    starts = [sum(sizes[:t]) for t in range(len(sizes) + 1)]
    if mode == "directional":
        s = unit_directions(sizes, k, gen).to(theta.device) * h_vec  # rows t*k.. step input t
    diffs = []
    with torch.no_grad():
        for t, (a, b) in enumerate(zip(starts, starts[1:])):
            if mode == "full":
                steps, rows = fd.coordinate_steps(h_vec[a:b]), torch.arange(b - a)
            else:
                steps, rows = fd.row_steps(s[t * k : (t + 1) * k, a:b]), torch.arange(k)
            diffs.append(fd.function_differences(fn, xs, t, w, steps, rows, max_bytes))
    diffs = torch.cat(diffs)  # no kink detection: fn is opaque
    if mode == "full":
        seg = segments(sizes, theta.device)
        return metrics("full", g, diffs / h_vec, None, names, seg, 0, tol, error)
    return directional_metrics(s, sizes, g, diffs, None, names, 0, tol, error)
