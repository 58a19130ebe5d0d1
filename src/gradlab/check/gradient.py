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

check_function (gradlab.check.function) applies the same step rule, modes and metrics to the
backward of any function of tensors that broadcasts over a leading batch dim.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradlab import fd
from gradlab.check.directions import segments, unit_directions
from gradlab.check.result import DEFAULT_TOL, CheckResult, directional_metrics, metrics
from gradlab.models import MLP

# The global directional stage passes a gradient only with an error below tol / GLOBAL_MARGIN.
# Correct gradients measure ~1e-10 (float64) and ~1e-7..1e-3 (float32) there; a tensor wrong by
# a factor r with a share f of the gradient's norm shows as about r * f (4 projections estimate
# it roughly). In 30 checks of SGD training each, a global check judged at tol passed 7 with
# three_layer_relu's layer1.bias 10% off in float32 (f ~ 0.1-0.2) and 29 with two_layer_sigmoid's
# layer1.bias off by 1e-5 in float64 (f ~ 0.01-0.03); this screen failed all of them, as the
# per-tensor check does, and sent 1-5% of the correct ReLU gradients on to it (a third of the
# float32 sigmoid ones near a loss of 1e-6, whose float32 rounding reaches 1e-4..1e-3).
GLOBAL_MARGIN = 100.0

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
        values, flags, kinks = zip(*fd.coordinate_fd(point, h_vec, max_bytes))
        n_kinks, excluded = sum(kinks), None
        if n_kinks:  # layers without kinks exclude nothing
            nothing = [torch.zeros_like(v, dtype=torch.bool) for v in values]
            excluded = torch.cat([z if f is None else f for z, f in zip(nothing, flags)])
        seg = segments(sizes, g.device)
        excluded, n_kinks = _exclude_unresolved(
            point, grads[names[0]].dtype, seg, excluded, n_kinks
        )
        return metrics("full", g, torch.cat(values), excluded, names, seg, n_kinks, tol)
    if not per_tensor:
        result = _global_directional(point, g, h_vec, k, tol, generator, max_bytes)
        if result is not None:
            return result
    s = unit_directions(sizes, k, generator).to(g.device) * h_vec  # step rows (T * k, n)
    diffs, excluded, n_kinks = fd.direction_fd(point, s, max_bytes)
    rows = torch.arange(len(sizes), device=g.device).repeat_interleave(k)  # tensor of each row
    excluded, n_kinks = _exclude_unresolved(point, grads[names[0]].dtype, rows, excluded, n_kinks)
    return directional_metrics(s, sizes, g, diffs, excluded, names, n_kinks, tol)


def _global_directional(point, g, h_vec, k, tol, generator, max_bytes) -> CheckResult | None:
    """The directional check along k random unit directions over all parameters; None unless
    its error is below tol / GLOBAL_MARGIN with no direction still straddling a kink after the
    recheck (then the caller takes the per-tensor directions, which judge each tensor, name a
    wrong one and exclude only the kinked rows)."""
    # one "tensor" of all n entries: k unit directions over every parameter, step rows (k, n)
    s = unit_directions((g.numel(),), k, generator).to(g.device).mul_(h_vec)
    diffs, excluded, n_kinks = fd.direction_fd(point, s, max_bytes)
    if excluded is not None and bool(excluded.any()):
        return None
    # g . s_j, and the difference, per unit step
    exact, approx = torch.stack([s.mv(g), diffs]).div_(torch.linalg.vector_norm(s, dim=1))
    result = metrics("directional", exact, approx, None, ["all"], None, n_kinks, tol)
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
