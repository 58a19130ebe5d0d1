"""Finite-difference verification of a gradient: the numbers every gradlab report rests on.

Always evaluated in float64, on a float64 copy of the parameters and batch, whatever dtype the
gradient was computed in. Two modes:

- ``full``: every parameter element, g_fd_i = (L(theta + h_i e_i) - L(theta - h_i e_i)) / (2 h_i);
  all 2n perturbed sets go through chunked batched forwards (gradlab.fd).
- ``directional``: k fresh random unit directions per parameter tensor (supported on that tensor
  only), comparing g . u with the central difference along u; the cost depends on the number of
  tensors and k, not on the number of parameters.

Step: h_i = h * max(1, |theta_i|) with h = cbrt(float64 eps) ~ 6.1e-6 unless given.

ReLU kinks: a perturbation that flips any ReLU on/off decision (for any sample) makes the central
difference straddle a kink. Such perturbations are counted (``kinks``), re-checked with a step ten
times smaller, and those still kinked are excluded from the comparison (``excluded``), never
counted as mismatches.

Metrics: the norm-relative error ||g - g_fd|| / max(||g||, ||g_fd||) globally and per parameter
tensor; for a tensor the denominator is floored at 1e-6 x the global scale, so a tensor whose
gradient is ~0 is judged in absolute terms instead of dividing noise by noise. Also the max abs
difference and the cosine similarity. Verdict: pass when the global and every per-tensor relative
error are <= tol; tol defaults to DEFAULT_TOL by the dtype the gradient was computed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradlab import fd
from gradlab.models import MLP

DEFAULT_TOL = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 3e-2, torch.bfloat16: 3e-2}
KINK_RECHECK_FACTOR = 0.1
FLOOR = 1e-6


@dataclass
class CheckResult:
    """What a gradient check measured; ``passed`` is the verdict against ``tol``."""

    mode: str
    rel_err: float
    rel_err_per_param: dict[str, float]
    max_abs_diff: float
    cos_sim: float
    kinks: int
    excluded: int
    n_compared: int
    tol: float
    passed: bool = field(init=False)

    def __post_init__(self):
        worst = max(self.rel_err_per_param.values(), default=0.0)
        self.passed = bool(self.rel_err <= self.tol and worst <= self.tol)

    @property
    def failing_params(self) -> list[str]:
        return [n for n, e in self.rel_err_per_param.items() if not e <= self.tol]

    @property
    def worst_param(self) -> str:
        return max(self.rel_err_per_param, key=lambda n: self.rel_err_per_param[n])


def check_gradient(
    model: MLP,
    x: Tensor,
    y: Tensor,
    grads: dict[str, Tensor],
    mode: str = "directional",
    k: int = 4,
    h: float | None = None,
    tol: float | None = None,
    generator: torch.Generator | None = None,
    max_bytes: int = fd.DEFAULT_MAX_BYTES,
) -> CheckResult:
    """Compare `grads` (one per named parameter of `model`) with float64 finite differences."""
    names = [name for name, _ in model.named_parameters()]
    missing = [n for n in names if n not in grads]
    if missing:
        raise ValueError(f"gradient is missing parameters: {', '.join(missing)}")
    if tol is None:
        tol = DEFAULT_TOL.get(grads[names[0]].dtype, 1e-6)
    theta, shapes = fd.flatten(model, torch.float64)
    x64, y64 = x.detach().to(torch.float64), y.detach().to(torch.float64)
    g = torch.cat([grads[n].detach().reshape(-1) for n in names]).to(theta)
    h_vec = fd.default_steps(theta, h)
    if mode == "full":
        return _full(model, theta, shapes, x64, y64, g, h_vec, tol, max_bytes)
    if mode == "directional":
        return _directional(model, theta, shapes, x64, y64, g, h_vec, k, tol, generator, max_bytes)
    raise ValueError(f"unknown check mode {mode!r}; allowed: full, directional")


def _fd_with_kink_recheck(model, theta, shapes, x, y, steps, m, max_bytes):
    """Central differences along m step rows; kinked rows re-done with a smaller step."""
    rows = torch.arange(m, device=theta.device)
    values, kinked = fd.central_differences(model, theta, shapes, x, y, steps, rows, max_bytes)
    n_kinks = int(kinked.sum())
    if n_kinks:
        again = kinked.nonzero().squeeze(1)
        redo, still = fd.central_differences(
            model, theta, shapes, x, y, lambda r: steps(r) * KINK_RECHECK_FACTOR, again, max_bytes
        )
        values[again] = redo / KINK_RECHECK_FACTOR
        kinked[again] = still
    return values, kinked, n_kinks


def _full(model, theta, shapes, x, y, g, h_vec, tol, max_bytes) -> CheckResult:
    diffs, kinked, n_kinks = _fd_with_kink_recheck(
        model, theta, shapes, x, y, fd.coordinate_steps(h_vec), theta.numel(), max_bytes
    )
    return _metrics("full", g, diffs / h_vec, ~kinked, _spans(shapes), n_kinks, tol)


def _directional(model, theta, shapes, x, y, g, h_vec, k, tol, generator, max_bytes):
    spans = _spans(shapes)
    n, m = theta.numel(), k * len(spans)
    u = torch.zeros(m, n, dtype=torch.float64)
    rand = torch.randn(m, n, dtype=torch.float64, generator=generator)
    for t, (start, stop) in enumerate(spans.values()):
        block = rand[t * k : (t + 1) * k, start:stop]
        u[t * k : (t + 1) * k, start:stop] = block / block.norm(dim=1, keepdim=True)
    s = u.to(theta.device) * h_vec  # step rows (m, n)
    diffs, kinked, n_kinks = _fd_with_kink_recheck(
        model, theta, shapes, x, y, lambda r: s[r], m, max_bytes
    )
    norms = s.norm(dim=1)
    exact = (s @ g) / norms  # g . u_j in the units of a unit step
    approx = diffs / norms
    row_spans = {name: (t * k, (t + 1) * k) for t, name in enumerate(spans)}
    return _metrics("directional", exact, approx, ~kinked, row_spans, n_kinks, tol)


def _spans(shapes) -> dict[str, tuple[int, int]]:
    spans, offset = {}, 0
    for name, shape in shapes.items():
        spans[name] = (offset, offset + shape.numel())
        offset += shape.numel()
    return spans


def _metrics(mode, a: Tensor, b: Tensor, keep: Tensor, spans, n_kinks, tol) -> CheckResult:
    """Relative errors of a vs b (flat, same layout), over the entries `keep` marks."""
    a, b = a * keep, b * keep
    diff = a - b
    scale = max(float(a.norm()), float(b.norm()))
    rel = float(diff.norm()) / scale if scale > 0 else 0.0
    per = {}
    for name, (start, stop) in spans.items():
        denom = max(float(a[start:stop].norm()), float(b[start:stop].norm()), FLOOR * scale)
        err = float(diff[start:stop].norm()) / denom if denom > 0 else 0.0
        per[name] = err if math.isfinite(err) else math.inf
    cos = float(a @ b) / (float(a.norm()) * float(b.norm())) if scale > 0 else 1.0
    return CheckResult(
        mode=mode,
        rel_err=rel if math.isfinite(rel) else math.inf,
        rel_err_per_param=per,
        max_abs_diff=float(diff.abs().max()) if diff.numel() else 0.0,
        cos_sim=cos,
        kinks=n_kinks,
        excluded=int((~keep).sum()),
        n_compared=int(keep.sum()),
        tol=tol,
    )
