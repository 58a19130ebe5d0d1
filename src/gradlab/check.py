"""Finite-difference verification of a gradient: the numbers every gradlab report rests on.

Always evaluated in float64, on a float64 copy of the parameters and batch, whatever dtype the
gradient was computed in. Two modes:

- ``full``: every parameter element, g_fd_i = (L(theta + h_i e_i) - L(theta - h_i e_i)) / (2 h_i);
  all 2n perturbed sets go through chunked batched forwards (gradlab.fd).
- ``directional``: k fresh random unit directions over all parameters, comparing g . u with the
  central difference along u: 1 + 2k parameter sets in one batched forward, whatever the number
  of parameters. That global stage only screens: a wrong tensor with a small share of the
  gradient's norm barely moves the global error (and k projections estimate it roughly), so it
  passes a gradient only when its error is below tol / GLOBAL_MARGIN. Otherwise (or when a
  direction cannot get off a kink, see below) the same call goes on to k fresh directions per
  parameter tensor (each supported on that tensor alone), whose result is returned: it judges
  each tensor on its own scale and names the wrong one. ``per_tensor=True`` always takes the
  per-tensor directions (T times the sets). A passing global result has no per-tensor errors
  (``rel_err_per_param`` is empty).

Step: h_i = h * max(1, |theta_i|) with h = cbrt(float64 eps) ~ 6.1e-6 unless given.

ReLU kinks: a perturbation that flips any ReLU on/off decision (for any sample) makes the central
difference straddle a kink. Such perturbations are counted (``kinks``), re-checked with a step ten
times smaller, and those still kinked are excluded from the comparison (``excluded``), never
counted as mismatches. Likewise, when a gradient computed in float32 saw a hidden pre-activation
on the other side of 0 than float64 does (a sample sitting on a kink, within float32 rounding),
the entries of that layer's and the lower layers' tensors are excluded and counted as kinks.

Metrics: the norm-relative error ||g - g_fd|| / max(||g||, ||g_fd||) globally and per parameter
tensor (directional: of the projections on the unit directions, which estimate it); for a
tensor the denominator is floored at 1e-6 x the global scale, so a tensor whose gradient is ~0
is judged in absolute terms instead of dividing noise by noise. Also the max abs
difference and the cosine similarity. A NaN or inf in a tensor's gradient (or differences) makes
its error inf: a fail, never a silent pass. Verdict: pass when the global and every per-tensor
relative error are <= tol; tol defaults to DEFAULT_TOL by the dtype the gradient was computed in.

check_function applies the same step rule, modes and metrics to the backward of any function of
tensors that broadcasts over a leading batch dim (e.g. a custom product autograd.Function).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradlab import fd
from gradlab.models import MLP

# float32: a float32 gradient carries the rounding of y_hat - y, which cancels as the fit
# improves; correct float32 gradients were measured 1.2e-3 off at loss 2.5e-6 (2-4-1 sigmoid,
# Adam), so 1e-2 leaves room for that while a real bug (a sign, a wrong factor) is O(1).
DEFAULT_TOL = {torch.float64: 1e-6, torch.float32: 1e-2, torch.float16: 3e-2, torch.bfloat16: 3e-2}
KINK_RECHECK_FACTOR = 0.1
# The global directional stage passes a gradient only with an error below tol / GLOBAL_MARGIN.
# Correct gradients measure ~1e-10 (float64) and ~1e-7..1e-3 (float32) there; a tensor wrong by
# a factor r with a share f of the gradient's norm shows as about r * f (4 projections estimate
# it roughly). In 30 checks of SGD training each, a global check judged at tol passed 7 with
# three_layer_relu's layer1.bias 10% off in float32 (f ~ 0.1-0.2) and 29 with two_layer_sigmoid's
# layer1.bias off by 1e-5 in float64 (f ~ 0.01-0.03); this screen failed all of them, as the
# per-tensor check does, and sent 1-5% of the correct ReLU gradients on to it (a third of the
# float32 sigmoid ones near a loss of 1e-6, whose float32 rounding reaches 1e-4..1e-3).
GLOBAL_MARGIN = 100.0
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
        """The tensor with the largest error; "" when no per-tensor errors were measured."""
        return max(self.rel_err_per_param, key=lambda n: self.rel_err_per_param[n], default="")


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
    per_tensor: bool = False,
) -> CheckResult:
    """Compare `grads` (one per named parameter of `model`) with float64 finite differences."""
    if mode not in MODES:
        raise ValueError(f"unknown check mode {mode!r}; allowed: {', '.join(MODES)}")
    point = fd.evaluation_point(model, x, y, torch.float64)
    names = list(point.shapes)
    missing = [n for n in names if n not in grads]
    if missing:
        raise ValueError(f"gradient is missing parameters: {', '.join(missing)}")
    wrong = [n for n in names if grads[n].shape != point.shapes[n]]
    if wrong:
        raise ValueError(
            "gradient has the wrong shape for: "
            + ", ".join(f"{n} {tuple(grads[n].shape)}, not {tuple(point.shapes[n])}" for n in wrong)
        )
    if tol is None:
        tol = DEFAULT_TOL.get(grads[names[0]].dtype, 1e-6)
    g = torch.cat([grads[n].detach().reshape(-1) for n in names]).to(point.theta)
    h_vec = fd.default_steps(point.theta, h)
    sizes = tuple(shape.numel() for shape in point.shapes.values())
    if mode == "full":
        values, flags, kinks = zip(*coordinate_fd(point, h_vec, max_bytes))
        n_kinks, excluded = sum(kinks), None
        if n_kinks:  # layers without kinks exclude nothing
            nothing = [torch.zeros_like(v, dtype=torch.bool) for v in values]
            excluded = torch.cat([z if f is None else f for z, f in zip(nothing, flags)])
        seg = _segments(sizes, g.device)
        excluded, n_kinks = _exclude_unresolved(
            point, grads[names[0]].dtype, seg, excluded, n_kinks
        )
        return _metrics("full", g, torch.cat(values), excluded, names, seg, n_kinks, tol)
    if not per_tensor:
        result = _global_directional(point, g, h_vec, k, tol, generator, max_bytes)
        if result is not None:
            return result
    s = _unit_directions(sizes, k, generator).to(g.device) * h_vec  # step rows (T * k, n)
    diffs, excluded, n_kinks = _direction_fd(point, s, max_bytes)
    rows = torch.arange(len(sizes), device=g.device).repeat_interleave(k)  # tensor of each row
    excluded, n_kinks = _exclude_unresolved(point, grads[names[0]].dtype, rows, excluded, n_kinks)
    return _directional_metrics(s, sizes, g, diffs, excluded, names, n_kinks, tol)


def _global_directional(point, g, h_vec, k, tol, generator, max_bytes) -> CheckResult | None:
    """The directional check along k random unit directions over all parameters; None unless
    its error is below tol / GLOBAL_MARGIN with no direction still straddling a kink after the
    recheck (then the caller takes the per-tensor directions, which judge each tensor, name a
    wrong one and exclude only the kinked rows)."""
    # one "tensor" of all n entries: k unit directions over every parameter, step rows (k, n)
    s = _unit_directions((g.numel(),), k, generator).to(g.device).mul_(h_vec)
    diffs, excluded, n_kinks = _direction_fd(point, s, max_bytes)
    if excluded is not None and bool(excluded.any()):
        return None
    # g . s_j, and the difference, per unit step
    exact, approx = torch.stack([s.mv(g), diffs]).div_(torch.linalg.vector_norm(s, dim=1))
    result = _metrics("directional", exact, approx, None, ["all"], None, n_kinks, tol)
    if not result.rel_err < tol / GLOBAL_MARGIN:  # not clearly clean: judge tensor by tensor
        return None
    result.rel_err_per_param = {}  # not measured: global directions do not tell tensors apart
    return result


def _exclude_unresolved(point, dtype, tensor_of, excluded, n_kinks):
    """Entries whose float64 reference the gradient's own dtype could not see: where a hidden
    pre-activation computed in that dtype falls on the other side of a ReLU's kink than in
    float64, the method legitimately took the other one-sided derivative, for every tensor of
    that layer and the layers below. Those entries (tensor_of gives each entry's tensor index)
    are excluded and counted as kinks."""
    if not point.relu or dtype == point.theta.dtype:
        return excluded, n_kinks
    a, deepest = point.x.to(dtype), -1
    for j, (w, b) in enumerate(point.layers[:-1]):
        z = torch.addmm(b.to(dtype).unsqueeze(1), w.to(dtype), a)  # as the method saw it
        if bool(((z > 0) != point.forward.on[j]).any()):
            deepest = j
        a = z.relu_()
    if deepest < 0:
        return excluded, n_kinks
    unresolved = tensor_of < 2 * (deepest + 1)  # W_j, b_j of layers 0..deepest
    new = unresolved if excluded is None else unresolved & ~excluded
    excluded = unresolved if excluded is None else excluded | unresolved
    return excluded, n_kinks + int(new.sum())


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
    sizes = tuple(v.numel() for v in xs)
    starts = [sum(sizes[:t]) for t in range(len(sizes) + 1)]
    if mode == "directional":
        s = _unit_directions(sizes, k, gen).to(theta.device) * h_vec  # rows t*k.. step input t
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
        seg = _segments(sizes, theta.device)
        return _metrics("full", g, diffs / h_vec, None, names, seg, 0, tol, error)
    return _directional_metrics(s, sizes, g, diffs, None, names, 0, tol, error)


def with_kink_recheck(differences) -> tuple[Tensor, Tensor | None, int]:
    """differences(rows, f) -> (fd, kinked) of the step rows `rows` (None: all) scaled by f.
    All rows at f = 1, then the kinked ones again with a step ten times smaller: those still
    kinked are to be excluded. Returns fd in the units of the full step, the exclusion mask
    (None when there were no kinks) and the number of kinks found."""
    values, kinked = differences(None, 1.0)
    again = kinked.nonzero().squeeze(1)
    if not again.numel():
        return values, None, 0
    redo, still = differences(again, KINK_RECHECK_FACTOR)
    values[again] = redo / KINK_RECHECK_FACTOR
    kinked[again] = still
    return values, kinked, again.numel()


def coordinate_fd(
    point: fd.EvaluationPoint, h_vec: Tensor, max_bytes: int = fd.DEFAULT_MAX_BYTES
) -> list[tuple[Tensor, Tensor | None, int]]:
    """Per layer (whose coordinates share its forward): the central-difference derivative of
    every coordinate (steps h_vec), with the kink re-check: (fd / h, excluded or None, kinks)."""
    out = []
    for layer, (a, b) in enumerate(point.spans):
        h = h_vec[a:b]
        diffs, excluded, n = with_kink_recheck(
            lambda rows, f, layer=layer, h=h: fd.coordinate_differences(
                point, layer, h * f, rows, max_bytes
            )
        )
        out.append((diffs / h, excluded, n))
    return out


def _direction_fd(point, s: Tensor, max_bytes: int) -> tuple[Tensor, Tensor | None, int]:
    """Central differences along the step rows s (m, n), with the kink re-check."""
    return with_kink_recheck(
        lambda rows, f: fd.direction_differences(
            point, s if rows is None else s[rows] * f, max_bytes
        )
    )


@functools.lru_cache(maxsize=64)
def _segments(sizes: tuple[int, ...], device: torch.device) -> Tensor:
    """(n,) the index of the tensor each flat entry belongs to (tensors of `sizes`, in order).
    Cached per layout: the result must not be modified."""
    return torch.arange(len(sizes), device=device).repeat_interleave(
        torch.tensor(sizes, device=device)
    )


@functools.lru_cache(maxsize=64)
def _blocks(sizes: tuple[int, ...], device: torch.device) -> Tensor:
    """(T, 1, n) bool: entry i belongs to tensor t. Cached per layout: must not be modified."""
    seg = _segments(sizes, device)
    return (torch.arange(len(sizes), device=device).unsqueeze(1) == seg).unsqueeze(1)


def _unit_directions(sizes: tuple[int, ...], k: int, generator) -> Tensor:
    """k random unit directions per tensor (T * k, n): rows t*k..(t+1)*k supported on tensor t.
    The same k draws over all entries, cut to each tensor's block."""
    # drawn in float32 (several times faster than float64 on the CPU): any direction will do
    u = torch.randn(k, sum(sizes), generator=generator).to(torch.float64)
    u = (u * _blocks(sizes, u.device)).view(len(sizes) * k, -1)
    return u.div_(torch.linalg.vector_norm(u, dim=1, keepdim=True))


def _directional_metrics(s, sizes, g, diffs, excluded, names, n_kinks, tol, error=""):
    """Compare g . s_j / |s_j| with the central difference along step row s_j (T * k, n), the
    rows of tensor t (of `sizes`) being t*k..(t+1)*k."""
    # g . s_j over s_j's own tensor only: a NaN in one tensor's gradient must not spill into
    # (0 * NaN) the rows of the others
    terms = torch.where(_blocks(sizes, s.device), s.view(len(sizes), -1, s.shape[1]) * g, 0.0)
    exact, approx = torch.stack([terms.sum(2).view(-1), diffs]) / torch.linalg.vector_norm(
        s, dim=1
    )  # per unit step
    return _metrics("directional", exact, approx, excluded, names, None, n_kinks, tol, error)


def _metrics(mode, a: Tensor, b: Tensor, excluded, names, seg, n_kinks, tol, error=""):
    """Relative errors of a vs b (flat, same layout), leaving out the entries `excluded` marks
    (a bool mask, or None). seg (n,) gives the tensor of each entry; None: T equal contiguous
    groups. A compared entry that is not finite (NaN/inf gradient or difference) makes its
    tensor's sums non-finite, and its error inf."""
    n_excluded = 0
    if excluded is not None:
        a, b = a.masked_fill(excluded, 0.0), b.masked_fill(excluded, 0.0)
        n_excluded = int(excluded.sum())
    squares = torch.stack([a, b, a - b]).square_()  # (3, n)
    if seg is None:
        sums = squares.view(3, len(names), -1).sum(2)
    else:
        sums = squares.new_zeros(3, len(names)).index_add_(1, seg, squares)
    *values, max_sq = torch.cat([sums.view(-1), squares[2].max().view(1)]).tolist()
    sq_a, sq_b, sq_d = (values[i * len(names) : (i + 1) * len(names)] for i in range(3))
    finite = [math.isfinite(va + vb + vd) for va, vb, vd in zip(sq_a, sq_b, sq_d)]
    total_a, total_b, total_d = (
        math.fsum(v for v, ok in zip(sq, finite) if ok) for sq in (sq_a, sq_b, sq_d)
    )
    scale = math.sqrt(max(total_a, total_b))

    def rel(sq_a: float, sq_b: float, sq_d: float, floor: float) -> float:
        denom = max(math.sqrt(sq_a), math.sqrt(sq_b), floor)
        return math.sqrt(sq_d) / denom if denom > 0 else 0.0

    per = {
        name: rel(sq_a[i], sq_b[i], sq_d[i], FLOOR * scale) if finite[i] else math.inf
        for i, name in enumerate(names)
    }
    if all(finite):
        rel_err, max_abs = rel(total_a, total_b, total_d, 0.0), math.sqrt(max_sq)
        # a . b = (|a|^2 + |b|^2 - |a - b|^2) / 2: from the sums at hand, no extra reduction
        both = total_a * total_b
        cos = (total_a + total_b - total_d) / (2 * math.sqrt(both)) if both > 0 else 0.0
        cos = 1.0 if total_a == total_b == 0 else cos
    else:
        rel_err, cos, max_abs = math.inf, math.nan, math.inf
    return CheckResult(
        mode=mode,
        rel_err=rel_err,
        rel_err_per_param=per,
        max_abs_diff=max_abs,
        cos_sim=cos,
        kinks=n_kinks,
        excluded=n_excluded,
        n_compared=a.numel() - n_excluded,
        tol=tol,
        error=error,
    )
