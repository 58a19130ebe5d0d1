"""The references of any nn.Module: plain central differences (gradlab.fd.generic) along dense
random unit directions, or along coordinates; the same Reference the MLPs' exact differences
give, with the accuracy of the values as a floor under every tolerance."""

from __future__ import annotations

import time

import torch

from gradlab.check.directions import unit_directions
from gradlab.check.reference import Reference
from gradlab.check.result import FLOOR
from gradlab.fd.function import coordinate_steps, plain_steps
from gradlab.fd.generic import GenericPoint, default_h, differences

MAX_ROWS = 256  # coordinates differenced together at most (each row holds n float64 values)


def directional(point: GenericPoint, k: int, h: float | None, generator, per_tensor: bool):
    """k unit directions over all parameters, or k per tensor."""
    sizes = tuple(shape.numel() for shape in point.shapes.values())
    if per_tensor:
        rows = unit_directions(sizes, k, generator)
        tensor_of = torch.arange(len(sizes), device=point.theta.device).repeat_interleave(k)
    else:
        rows, tensor_of = unit_directions((sum(sizes),), k, generator), None
    rows = rows.to(point.theta.device)
    h = default_h() if h is None else h
    values, error, excluded, kinks = differences(point, rows * h)
    ref = Reference("directional", point, values, excluded, kinks)
    ref.dense, ref.dense_tensor_of = rows, tensor_of
    ref.floor = _floor(values, error, excluded, tensor_of)
    return ref


def full(point: GenericPoint, h: float | None, budget_s=None, generator=None, progress=None):
    """Every coordinate, or within a time budget coordinates in a random order, a chunk of
    every tensor in turn (each tensor represented: the first round always runs)."""
    h = default_h() if h is None else h
    start, n = time.perf_counter(), point.theta.numel()
    sizes = [shape.numel() for shape in point.shapes.values()]
    starts = torch.tensor([0, *sizes]).cumsum(0)[:-1].tolist()
    order = [torch.randperm(size, generator=generator) + a for size, a in zip(sizes, starts)]
    steps = coordinate_steps(plain_steps(point.theta, h))
    parts, done = [], 0
    chunk = 4 if budget_s is not None else MAX_ROWS  # a budget: a few of each tensor first
    while any(len(o) for o in order):
        for i, o in enumerate(order):
            if len(o):
                rows = o[:chunk]
                parts.append((rows, *differences(point, steps(rows.to(point.theta.device)))))
                order[i], done = o[chunk:], done + len(rows)
                if progress is not None:
                    progress(done, n)
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
        chunk = min(2 * chunk, MAX_ROWS)
    rows, values, error = (torch.cat([part[i] for part in parts]) for i in range(3))
    masks = [part[3] for part in parts]
    excluded = None
    if any(m is not None for m in masks):
        excluded = torch.cat(
            [
                m if m is not None else torch.zeros_like(p[1], dtype=torch.bool)
                for m, p in zip(masks, parts)
            ]
        )
    order_ = rows.argsort()
    rows, values, error = rows[order_], values[order_], error[order_]
    excluded = None if excluded is None else excluded[order_]
    ref = Reference("full", point, values, excluded, sum(p[4] for p in parts), rows=rows)
    ref.floor = _floor(values, error, excluded, ref.tensor_of)
    return ref


def _floor(values, error, excluded, tensor_of) -> float:
    """The relative accuracy of the rows compared, in the norms the comparison uses: the
    error estimates' norm over the values' norm, globally and per tensor (tensor_of; None:
    global only), the worst of them."""
    kept = torch.ones_like(values, dtype=torch.bool) if excluded is None else ~excluded
    v, e = torch.where(kept, values, 0.0), torch.where(kept, error, 0.0)
    scale = float(torch.linalg.vector_norm(v))
    if scale == 0.0:
        return 0.0
    worst = float(torch.linalg.vector_norm(e)) / scale
    if tensor_of is not None:
        n = int(tensor_of.max()) + 1
        sq = torch.zeros(2, n, dtype=v.dtype, device=v.device)
        sq.index_add_(1, tensor_of, torch.stack([v, e]).square())
        norms = sq.sqrt()
        per = norms[1] / norms[0].clamp(min=FLOOR * scale)
        worst = max(worst, float(per.max()))
    return worst
