"""What a check measured: relative errors per tensor and globally, and the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradlab.check.directions import blocks

# check_gradient's tolerance by the gradient's dtype when none is given: a fixed one, loose
# enough for the rounding a float32 gradient carries near convergence (where y_hat - y
# cancels). A training run judges math and precision apart instead (gradlab.check.verdict).
DEFAULT_TOL = {torch.float64: 1e-6, torch.float32: 1e-2, torch.float16: 3e-2, torch.bfloat16: 3e-2}
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
    coverage: float = 1.0  # the fraction of coordinates a (sampled) full check compared
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


def directional_metrics(s, sizes, g, diffs, excluded, names, n_kinks, tol, error=""):
    """Compare g . s_j / |s_j| with the central difference along step row s_j (T * k, n), the
    rows of tensor t (of `sizes`) being t*k..(t+1)*k."""
    # g . s_j over s_j's own tensor only: a NaN in one tensor's gradient must not spill into
    # (0 * NaN) the rows of the others
    terms = torch.where(blocks(sizes, s.device), s.view(len(sizes), -1, s.shape[1]) * g, 0.0)
    exact, approx = torch.stack([terms.sum(2).view(-1), diffs]) / torch.linalg.vector_norm(
        s, dim=1
    )  # per unit step
    return metrics("directional", exact, approx, excluded, names, None, n_kinks, tol, error)


def metrics(mode, a: Tensor, b: Tensor, excluded, names, seg, n_kinks, tol, error=""):
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
