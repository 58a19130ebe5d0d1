"""Precision: is the run's gradient as precise as its dtype allows on this batch?

The run gradient g (in the run's dtype, e.g. float32) is compared entry by entry with the same
method's gradient on float64 copies of the parameters and batch, once that one has matched the
finite differences (its math is right). Its error per tensor, e_t = |g_t - g64_t| / max(|g_t|,
|g64_t|, FLOOR * |g64|), is then set against what the dtype itself does on the same batch: the
error of autograd in that dtype, b_t (at least one unit roundoff). The ratio e_t / b_t is the
figure; a gradient computed at lower precision than the run's dtype (a bfloat16 step inside a
float32 backward, finite differences in float32) shows a ratio of hundreds or more, a correct
float32 method one near 1. The dtype's own error is measured only when it could matter: while
every e_t <= FACTOR unit roundoffs the ratio cannot exceed FACTOR, and it is not measured.

A float32 gradient may legitimately take the other one-sided derivative at a ReLU kink that a
sample sits on within float32 rounding; where a finding would rest on such a tensor (a hidden
pre-activation |z| within a few unit roundoffs of |a| |W|^T + |b|, in that layer or above), the
tensors of that layer and the layers below are left out and named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradlab import fd
from gradlab.check.directions import segments
from gradlab.check.result import FLOOR

# A run gradient more than this many times less precise than its dtype's own is a finding.
FACTOR = 100.0
# How many unit roundoffs of |a| |W|^T + |b| a pre-activation must clear to be on its side of
# the kink in any summation order.
KINK_ROUNDOFFS = 64.0
LOWER = (torch.bfloat16, torch.float16, torch.float32)
MIN_VALUES = 8
SAMPLE = 64


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


@dataclass
class Precision:
    """The run gradient's error against the float64 reference, per tensor and at most, and
    how it compares with the dtype's own error on the same batch."""

    rel_err: float
    rel_err_per_param: dict[str, float]
    ratio: float | None  # max_t e_t / max(b_t, unit roundoff); None: not measured (<= FACTOR)
    dtype_rel_err: float | None = None  # max_t b_t, when it was measured
    worst_param: str = ""
    excluded: list[str] = field(default_factory=list)  # tensors left out (a kink within rounding)
    effective_dtype: str = ""  # the gradient's values all fit this lower dtype ("" otherwise)

    @property
    def finding(self) -> bool:
        return bool((self.ratio or 0.0) > FACTOR or self.effective_dtype)


def errors(g: dict[str, Tensor], ref: dict[str, Tensor]) -> dict[str, float]:
    """e_t per tensor of g against ref (float64), as gradlab.check.result measures errors."""
    names = list(ref)
    a = torch.cat([g[n].detach().reshape(-1) for n in names]).to(torch.float64)
    b = torch.cat([ref[n].detach().reshape(-1) for n in names])
    seg = segments(tuple(ref[n].numel() for n in names), b.device)
    squares = torch.stack([a - b, a, b]).square_()
    diff, sq_a, sq_b = squares.new_zeros(3, len(names)).index_add_(1, seg, squares).tolist()
    scale = math.sqrt(math.fsum(sq_b))
    out = {}
    for n, d, x, y in zip(names, diff, sq_a, sq_b):
        denom = max(math.sqrt(x), math.sqrt(y), FLOOR * scale)
        out[n] = (math.sqrt(d) / denom if denom > 0 else 0.0) if math.isfinite(d) else math.inf
    return out


def judge(
    g_run: dict[str, Tensor],
    g64: dict[str, Tensor],
    dtype_gradient: Callable[[], dict[str, Tensor]],
    point: fd.EvaluationPoint,
) -> Precision:
    """The precision of g_run (run dtype) against the verified float64 gradient g64 of the same
    point; dtype_gradient() computes autograd's gradient in the run's dtype (called only when
    needed)."""
    dtype = next(iter(g_run.values())).dtype
    u = unit_roundoff(dtype)
    e_run = errors(g_run, g64)
    worst = max(e_run, key=e_run.get)
    if e_run[worst] <= FACTOR * u:  # cannot be a finding: no need for the dtype's own error
        return Precision(e_run[worst], e_run, None, worst_param=worst)
    e_base = errors(dtype_gradient(), g64)
    ratios = {n: e / max(e_base[n], u) for n, e in e_run.items()}
    excluded = []
    if max(ratios.values()) > FACTOR and point.relu:
        excluded = [n for n in near_kinks(point, dtype) if n in ratios]
        for n in excluded:
            ratios.pop(n)
    worst = max(ratios, key=ratios.get, default=worst)
    kept = {n: e for n, e in e_run.items() if n not in excluded}
    return Precision(
        max(kept.values(), default=0.0),
        e_run,
        ratios.get(worst, 0.0),
        max(e_base.values()),
        worst,
        excluded,
    )


def near_kinks(point: fd.EvaluationPoint, dtype: torch.dtype) -> list[str]:
    """The tensors whose gradient a method in `dtype` may legitimately compute from the other
    side of a ReLU kink: those of the deepest hidden layer with a pre-activation within
    KINK_ROUNDOFFS unit roundoffs of its magnitude, and of every layer below it."""
    base, names = point.forward, list(point.shapes)
    deepest, a = -1, point.x.abs()
    for j, (w, b) in enumerate(point.layers[:-1]):
        magnitude = torch.addmm(b.abs(), a, w.abs().t())  # |a| |W|^T + |b|, (B, D_j)
        if bool((base.size[j] <= KINK_ROUNDOFFS * unit_roundoff(dtype) * magnitude).any()):
            deepest = j
        a = base.acts[j + 1].abs()
    return names[: 2 * (deepest + 1)]


def effective_dtype(g: dict[str, Tensor]) -> str:
    """The lowest dtype below g's own that holds g's values exactly ("" if none): a float64
    gradient computed in float32 (or bfloat16, float16) by accident. Up to SAMPLE values of
    each tensor are tried (random float64 values all fitting a lower dtype by chance is out
    of the question); fewer than MIN_VALUES non-zero ones say nothing either way."""
    values = torch.cat([t.detach().reshape(-1)[:SAMPLE] for t in g.values()])
    values = values[values != 0]
    if values.numel() < MIN_VALUES:
        return ""
    for lower in LOWER:
        if torch.finfo(lower).bits < torch.finfo(values.dtype).bits and bool(
            torch.equal(values.to(lower).to(values.dtype), values)
        ):
            return str(lower).removeprefix("torch.")
    return ""
