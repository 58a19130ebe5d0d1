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
from collections.abc import Callable, Sequence
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
    error: str = ""  # why the gradient could not be computed (then rel_err is inf)
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


MODES = ("full", "directional")


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
    if mode not in MODES:
        raise ValueError(f"unknown check mode {mode!r}; allowed: {', '.join(MODES)}")
    theta, shapes = fd.flatten(model, torch.float64)
    missing = [n for n in shapes if n not in grads]
    if missing:
        raise ValueError(f"gradient is missing parameters: {', '.join(missing)}")
    wrong = [
        f"{n} {tuple(grads[n].shape)} != {tuple(s)}"
        for n, s in shapes.items()
        if grads[n].shape != s
    ]
    if wrong:
        raise ValueError(f"gradient has the wrong shape for: {', '.join(wrong)}")
    if tol is None:
        tol = DEFAULT_TOL.get(grads[next(iter(shapes))].dtype, 1e-6)
    x64, y64 = x.detach().to(torch.float64), y.detach().to(torch.float64)
    g = torch.cat([grads[n].detach().reshape(-1) for n in shapes]).to(theta)
    h_vec = fd.default_steps(theta, h)
    if mode == "full":
        return _full(model, theta, shapes, x64, y64, g, h_vec, tol, max_bytes)
    return _directional(model, theta, shapes, x64, y64, g, h_vec, k, tol, generator, max_bytes)


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
    spans = _spans({f"input{i}": v.shape for i, v in enumerate(xs)})
    theta = torch.cat([v.reshape(-1) for v in xs])
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    leaves = [v.clone().requires_grad_() for v in xs]
    error = ""
    with torch.enable_grad():
        out = fn(*[v.clone() for v in leaves])  # clones: fn may modify its inputs (mark_dirty)
        w = torch.randn(out.shape, dtype=torch.float64, generator=gen).to(out.device)
        try:
            grads = torch.autograd.grad((out * w).sum(), leaves, allow_unused=True)
            g = torch.cat(
                [
                    (gr if gr is not None else torch.zeros_like(v)).reshape(-1).to(theta)
                    for v, gr in zip(xs, grads)
                ]
            )
        except Exception as e:  # any failure of fn's backward is a failed check, with its reason
            error = f"{type(e).__name__}: {e}"
            g = torch.full_like(theta, math.nan)
    if tol is None:
        tol = DEFAULT_TOL[torch.float64]
    h_vec = fd.default_steps(theta, h)
    with torch.no_grad():
        if mode == "full":
            diffs = torch.cat(
                [
                    fd.function_differences(
                        fn,
                        xs,
                        t,
                        w,
                        fd.coordinate_steps(h_vec[a:b]),
                        torch.arange(b - a),
                        max_bytes,
                    )
                    for t, (a, b) in enumerate(spans.values())
                ]
            )
            return _metrics("full", g, diffs / h_vec, _all(g), spans, 0, tol, error)
        s = _unit_directions(spans, k, theta.numel(), gen).to(theta.device) * h_vec  # (m, n)
        blocks = [s[t * k : (t + 1) * k, a:b] for t, (a, b) in enumerate(spans.values())]
        diffs = torch.cat(
            [
                fd.function_differences(
                    fn, xs, t, w, lambda r, blk=blk: blk[r], torch.arange(k), max_bytes
                )
                for t, blk in enumerate(blocks)
            ]
        )
    return _directional_metrics(s, g, diffs, _all(diffs), spans, k, 0, tol, error)


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
    s = _unit_directions(spans, k, theta.numel(), generator).to(theta.device) * h_vec  # (m, n)
    diffs, kinked, n_kinks = _fd_with_kink_recheck(
        model, theta, shapes, x, y, lambda r: s[r], s.shape[0], max_bytes
    )
    return _directional_metrics(s, g, diffs, ~kinked, spans, k, n_kinks, tol)


def _unit_directions(spans, k, n, generator) -> Tensor:
    """(k * T, n): k random unit directions per tensor, rows t*k..(t+1)*k supported on tensor t."""
    u = torch.zeros(k * len(spans), n, dtype=torch.float64)
    rand = torch.randn(k * len(spans), n, dtype=torch.float64, generator=generator)
    for t, (start, stop) in enumerate(spans.values()):
        block = rand[t * k : (t + 1) * k, start:stop]
        u[t * k : (t + 1) * k, start:stop] = block / block.norm(dim=1, keepdim=True)
    return u


def _directional_metrics(s, g, diffs, keep, spans, k, n_kinks, tol, error=""):
    """Compare g . u_j with the central difference along step row s_j = h * u_j, per unit step."""
    norms = s.norm(dim=1)
    # g . s_j over s_j's own tensor only: a NaN in one tensor's gradient must not spill into
    # (0 * NaN) the rows of the others
    exact = torch.where(s != 0, s * g, 0.0).sum(1) / norms
    row_spans = {name: (t * k, (t + 1) * k) for t, name in enumerate(spans)}
    return _metrics("directional", exact, diffs / norms, keep, row_spans, n_kinks, tol, error)


def _all(v: Tensor) -> Tensor:
    return torch.ones_like(v, dtype=torch.bool)


def _spans(shapes) -> dict[str, tuple[int, int]]:
    spans, offset = {}, 0
    for name, shape in shapes.items():
        spans[name] = (offset, offset + shape.numel())
        offset += shape.numel()
    return spans


def _metrics(
    mode, a: Tensor, b: Tensor, keep: Tensor, spans, n_kinks, tol, error=""
) -> CheckResult:
    """Relative errors of a vs b (flat, same layout), over the entries `keep` marks. A compared
    entry that is not finite (NaN/inf gradient or difference) makes its tensor's error inf."""
    names = list(spans)
    counts = torch.tensor([stop - start for start, stop in spans.values()], device=a.device)
    seg = torch.repeat_interleave(torch.arange(len(names), device=a.device), counts)  # (n,)
    bad = (~torch.isfinite(a) | ~torch.isfinite(b)) & keep
    use = keep & ~bad
    a, b = torch.where(use, a, 0.0), torch.where(use, b, 0.0)
    diff = a - b
    sums = torch.zeros(4, len(names), dtype=a.dtype, device=a.device)
    sums.index_add_(1, seg, torch.stack([a * a, b * b, diff * diff, bad.to(a.dtype)]))
    sums = torch.cat([sums, sums.sum(1, keepdim=True)], 1)  # last column: all tensors
    max_abs = diff.abs().max() if diff.numel() else diff.new_zeros(())
    extra = torch.stack([a @ b, max_abs, keep.sum().to(a.dtype)])
    (sq_a, sq_b, sq_d, n_bad), (dot, max_abs, n_keep) = sums.tolist(), extra.tolist()
    norm_a, norm_b, norm_d = ([math.sqrt(v) for v in row] for row in (sq_a, sq_b, sq_d))
    scale = max(norm_a[-1], norm_b[-1])

    def rel(i: int) -> float:
        if n_bad[i]:
            return math.inf
        denom = max(norm_a[i], norm_b[i], FLOOR * scale)  # the floor binds only per tensor
        return norm_d[i] / denom if denom > 0 else 0.0

    if norm_a[-1] > 0 and norm_b[-1] > 0:
        cos = dot / (norm_a[-1] * norm_b[-1])
    else:
        cos = 1.0 if norm_a[-1] == norm_b[-1] else 0.0
    return CheckResult(
        mode=mode,
        rel_err=rel(-1),
        rel_err_per_param={name: rel(i) for i, name in enumerate(names)},
        max_abs_diff=math.inf if n_bad[-1] else max_abs,
        cos_sim=math.nan if n_bad[-1] else cos,
        kinks=n_kinks,
        excluded=int(a.numel() - n_keep),
        n_compared=int(n_keep),
        tol=tol,
        error=error,
    )
