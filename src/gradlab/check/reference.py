"""The finite-difference reference of one check, and the comparison of a gradient with it.

A Reference holds the central-difference derivative along each of its rows (random unit
directions, or parameter coordinates) at one float64 point; any number of gradients of that
point can then be compared with it (the float64 re-run of a method, and the run's own gradient).
The specification of the checks is gradlab.check's docstring.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gradlab import fd
from gradlab.check.directions import Directions, segments
from gradlab.check.result import CheckResult, metrics
from gradlab.fd.generic import GenericPoint

Progress = Callable[[int, int], None]  # (coordinates done, coordinates to do)
FLOOR_MARGIN = 10.0


@dataclass
class Reference:
    """Central differences at `point`: the derivative along each row (m,), the rows still
    straddling a kink after the re-check (excluded, None: none) and the kinks found."""

    mode: str
    point: fd.EvaluationPoint | GenericPoint
    values: Tensor
    excluded: Tensor | None
    kinks: int
    directions: Directions | None = None  # None: the rows are coordinates of theta (or dense)
    rows: Tensor | None = None  # coordinates: which entries of theta (None: all of them)
    dense: Tensor | None = None  # plain differences of any module: the unit rows (m, n)
    dense_tensor_of: Tensor | None = None  # and the tensor of each (None: all tensors)
    # the relative accuracy of the values (plain differences): no tolerance is set below
    # FLOOR_MARGIN times it
    floor: float = 0.0

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(shape.numel() for shape in self.point.shapes.values())

    @property
    def tensor_of(self) -> Tensor | None:
        """(m,) the tensor each row belongs to; None: every row spans all tensors."""
        if self.dense is not None:
            return self.dense_tensor_of
        if self.directions is not None:
            return self.directions.tensor_of
        seg = segments(self.sizes, self.point.theta.device)
        return seg if self.rows is None else seg[self.rows]

    @property
    def coverage(self) -> float:
        """The fraction of coordinates a full check compared (1.0 for directions)."""
        return 1.0 if self.rows is None else len(self.rows) / self.point.theta.numel()

    def along(self, g: Tensor) -> Tensor:
        """The gradient g (flat, float64) along each row."""
        if self.dense is not None:
            return torch.mv(self.dense, g)
        if self.directions is None:
            return g if self.rows is None else g[self.rows]
        return self.directions.project(g)


def directional(point: fd.EvaluationPoint, directions: Directions, h: float, max_bytes: int):
    """The Reference along `directions`, with steps of length h."""
    parts = [fd.direction_fd(point, steps, max_bytes) for steps in directions.scaled(h)]
    values = torch.cat([v for v, _, _ in parts]) / h
    masks = [m if m is not None else torch.zeros_like(v, dtype=torch.bool) for v, m, _ in parts]
    excluded = torch.cat(masks) if any(m is not None for _, m, _ in parts) else None
    return Reference("directional", point, values, excluded, sum(n for *_, n in parts), directions)


def full(
    point: fd.EvaluationPoint,
    h: float | None,
    max_bytes: int = fd.DEFAULT_MAX_BYTES,
    budget_s: float | None = None,
    generator: torch.Generator | None = None,
    progress: Progress | None = None,
) -> Reference:
    """The Reference along every coordinate; with a time budget, coordinates in a random order
    that takes a chunk from every tensor in turn, until the budget is spent (every tensor is
    represented: the first round always runs)."""
    h_vec = fd.default_steps(point.theta, h)
    if budget_s is None and progress is None:
        values, flags, kinks = zip(*fd.coordinate_fd(point, h_vec, max_bytes))
        excluded = None
        if sum(kinks):
            nothing = [torch.zeros_like(v, dtype=torch.bool) for v in values]
            excluded = torch.cat([z if f is None else f for z, f in zip(nothing, flags)])
        return Reference("full", point, torch.cat(values), excluded, sum(kinks))
    return _sampled(point, h_vec, max_bytes, budget_s, generator, progress)


def _sampled(point, h_vec, max_bytes, budget_s, generator, progress) -> Reference:
    """Coordinates chunk by chunk, tensor by tensor in turn, within budget_s (None: all)."""
    start, total = time.perf_counter(), point.theta.numel()
    order = []  # per tensor: its layer, where the layer starts in theta, where the tensor
    # starts in the layer, its entries in a random order
    for t, shape in enumerate(point.shapes.values()):
        layer = t // 2
        offset = (t % 2) * point.layers[layer][0].numel()
        perm = torch.randperm(shape.numel(), generator=generator)
        order.append((layer, point.spans[layer][0], offset, perm))
    # a few coordinates of each tensor first, so the first round (which always runs) stays
    # within a small budget; then twice as many each round
    rows, values, flags, kinks, done, chunk = [], [], [], 0, 0, 8
    while any(len(p) for *_, p in order):
        for i, (layer, a, offset, perm) in enumerate(order):
            if not len(perm):
                continue
            local, order[i] = perm[:chunk] + offset, (layer, a, offset, perm[chunk:])
            h = h_vec[a : a + point.layers[layer][0].numel() + point.layers[layer][1].numel()]
            v, f, n = fd.with_kink_recheck(
                lambda r, s, layer=layer, h=h, local=local: fd.coordinate_differences(
                    point, layer, h * s, local if r is None else local[r], max_bytes
                )
            )
            rows.append(local + a)
            values.append(v / h[local])
            flags.append(f if f is not None else torch.zeros_like(v, dtype=torch.bool))
            kinks, done = kinks + n, done + len(local)
            if progress is not None:
                progress(done, total)
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
        chunk *= 2
    rows = torch.cat(rows)
    ordered = rows.argsort()
    excluded = torch.cat(flags)[ordered] if kinks else None
    return Reference("full", point, torch.cat(values)[ordered], excluded, kinks, rows=rows[ordered])


def compare(reference: Reference, grads: dict[str, Tensor], tol: float) -> CheckResult:
    """Compare a gradient (one tensor per parameter, any dtype) with the reference.

    A tensor holding a NaN or inf fails with error inf (its entries are zeroed first, so they
    cannot spill into the other tensors' projections)."""
    point, names = reference.point, list(reference.point.shapes)
    dtype = grads[names[0]].dtype
    g = torch.cat([grads[n].detach().reshape(-1) for n in names]).to(point.theta)
    bad = []
    if not bool(torch.isfinite(g.sum())):  # some entry is NaN or inf (or the sum overflowed)
        bad = [n for n in names if not bool(torch.isfinite(grads[n]).all())]
        g = torch.cat(
            [(torch.zeros_like(grads[n]) if n in bad else grads[n]).reshape(-1) for n in names]
        ).to(point.theta)
    tensor_of, values = reference.tensor_of, reference.values
    excluded, kinks = exclude_unresolved(
        point, dtype, tensor_of, reference.excluded, reference.kinks, len(values)
    )
    shown = names if tensor_of is not None else ["all"]
    tol = max(tol, FLOOR_MARGIN * reference.floor)
    exact = reference.along(g)
    result = metrics(reference.mode, exact, values, excluded, shown, tensor_of, kinks, tol)
    if tensor_of is None:  # global directions do not tell tensors apart
        result.rel_err_per_param = {}
    if bad:
        result.rel_err = result.max_abs_diff = math.inf
        if tensor_of is not None:
            result.rel_err_per_param.update({n: math.inf for n in bad})
        result.passed = False
    result.coverage = reference.coverage
    return result


def exclude_unresolved(point, dtype, tensor_of, excluded, n_kinks, rows: int):
    """Rows whose float64 reference the gradient's own dtype could not see: where a hidden
    pre-activation computed in that dtype falls on the other side of a ReLU's kink than in
    float64, the method legitimately took the other one-sided derivative, for every tensor of
    that layer and the layers below. Those rows (tensor_of gives each row's tensor; None: every
    row spans all tensors) are excluded and counted as kinks."""
    if not point.relu or dtype == point.theta.dtype:  # (a GenericPoint has no ReLU rule)
        return excluded, n_kinks
    a, deepest = point.x.to(dtype), -1
    for j, (w, b) in enumerate(point.layers[:-1]):
        z = torch.addmm(b.to(dtype), a, w.to(dtype).t())  # as the method saw it (F.linear)
        if bool(((z > 0) != point.forward.on[j]).any()):
            deepest = j
        a = z.relu_()
    if deepest < 0:
        return excluded, n_kinks
    if tensor_of is None:  # every row moves every layer
        unresolved = torch.ones(rows, dtype=torch.bool, device=point.theta.device)
    else:
        unresolved = tensor_of < 2 * (deepest + 1)  # W_j, b_j of layers 0..deepest
    new = unresolved if excluded is None else unresolved & ~excluded
    excluded = unresolved if excluded is None else excluded | unresolved
    return excluded, n_kinks + int(new.sum())
