"""Random unit directions in parameter space, for the directional checks.

A weight matrix's part of a direction is rank-1, u v^T (u, v Gaussian): its projection of a
gradient, u^T G v, estimates |G|_F as a dense Gaussian block would, and both the difference along
it (gradlab.fd: v . a per sample, then u) and the projection cost O(D) per layer instead of
O(D^2), so a check's cost stays a few gradients whatever the width. Bias parts are dense.

- global_directions: k directions over all parameters (every layer moves);
- tensor_directions: k directions per parameter tensor, each supported on that tensor alone,
  grouped by layer (a direction starts at its tensor's layer: the layers below do not move).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradlab.fd import EvaluationPoint, Steps

DENSE_MAX = 2**16  # rows x parameters up to which a projection uses the dense directions


@dataclass
class Directions:
    """Unit directions as fd.Steps groups (rows in order), the tensor each row is supported on
    ((m,) tensor indices; None: every row spans all tensors), and where each layer's
    parameters lie in theta."""

    groups: list[Steps]
    tensor_of: Tensor | None
    spans: list[tuple[int, int]]
    _dense: Tensor | None = field(default=None, init=False, repr=False)

    @property
    def rows(self) -> int:
        return sum(len(group) for group in self.groups)

    def project(self, g: Tensor) -> Tensor:
        """g . d for every row (m,), from the flat gradient g (n,): rank-1 products, layer by
        layer; for a small net one product with the dense directions, made once (fewer ops)."""
        if self.rows * len(g) <= DENSE_MAX:
            if self._dense is None:
                self._dense = self._densify(len(g), g)
            return torch.mv(self._dense, g)
        parts = []
        for group in self.groups:
            total = None
            for j, (weight, t) in enumerate(group.layers, start=group.start):
                if weight is None:  # the layers above the moved one: zero steps
                    continue
                (u, v), (a, b) = weight, self.spans[j]
                g_w, g_b = g[a : b - len(t[0])].view(len(u[0]), -1), g[b - len(t[0]) : b]
                term = torch.mm(u, g_w).mul_(v).sum(1).add_(torch.mv(t, g_b))  # u^T G v + t . g
                total = term if total is None else total.add_(term)
            parts.append(total)
        return torch.cat(parts)

    def _densify(self, n: int, like: Tensor) -> Tensor:
        """The directions as an (m, n) matrix."""
        dense, row = like.new_zeros(self.rows, n), 0
        for group in self.groups:
            for j, (weight, t) in enumerate(group.layers, start=group.start):
                if weight is None:
                    continue
                (u, v), (a, b) = weight, self.spans[j]
                rows = slice(row, row + len(u))
                dense[rows, a : b - len(t[0])] = (u.unsqueeze(2) * v.unsqueeze(1)).flatten(1)
                dense[rows, b - len(t[0]) : b] = t
            row += len(group)
        return dense

    def scaled(self, h: float) -> list[Steps]:
        """The groups as steps of length h."""
        return [group.select(slice(None), h) for group in self.groups]


def _gaussian(rows: int, cols: int, generator) -> Tensor:
    # drawn in float32 (several times faster than float64 on the CPU): any direction will do
    return torch.randn(rows, cols, generator=generator).to(torch.float64)


def global_directions(point: EvaluationPoint, k: int, generator) -> Directions:
    """k unit directions over all parameters: one draw, cut into each layer's u, v and t."""
    widths = tuple(n for w, _ in point.layers for n in (w.shape[0], w.shape[1], w.shape[0]))
    parts_of, scaled = _layout(widths)
    draw = _gaussian(k, sum(widths), generator)
    sq = torch.mm(draw.square(), parts_of).view(k, -1, 3)  # |u|^2, |v|^2, |t|^2 per layer
    scale = sq[..., 0].mul(sq[..., 1]).add_(sq[..., 2]).sum(1).rsqrt_()  # 1/|d|; |uv^T| = |u||v|
    draw.mul_(torch.where(scaled, scale.unsqueeze(1), 1.0))  # on u and t; v stays as drawn
    parts = draw.split(widths, dim=1)
    layers = [((parts[3 * j], parts[3 * j + 1]), parts[3 * j + 2]) for j in range(len(widths) // 3)]
    return Directions([_to(point, Steps(0, layers, 1.0))], None, point.spans)


@functools.lru_cache(maxsize=64)
def _layout(widths: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """For draws cut into parts of `widths` (u, v, t per layer): the (n, parts) one-hot matrix
    that sums each part, and the (n,) mask of the u and t columns. Cached: must not be
    modified."""
    part = torch.arange(len(widths)).repeat_interleave(torch.tensor(widths))
    one_hot = torch.nn.functional.one_hot(part, len(widths)).to(torch.float64)
    return one_hot, part % 3 != 1


def tensor_directions(point: EvaluationPoint, k: int, generator) -> Directions:
    """k unit directions per tensor: per layer j, k rows on W_j (rank-1, |u| = |v| = 1), then k
    on b_j; the zero halves keep each row on its own tensor."""
    groups, tensor_of = [], []
    for j, (w, _) in enumerate(point.layers):
        d_out, d_in = w.shape
        u, v, t = (_gaussian(k, n, generator) for n in (d_out, d_in, d_out))
        u, v, t = (x.div_(torch.linalg.vector_norm(x, dim=1, keepdim=True)) for x in (u, v, t))
        zeros = torch.zeros(k, d_out, dtype=torch.float64)
        step = ((torch.cat([u, zeros]), torch.cat([v, v])), torch.cat([zeros, t]))
        rest = [(None, None)] * (len(point.layers) - j - 1)
        groups.append(_to(point, Steps(j, [step, *rest], 1.0)))
        tensor_of += [2 * j] * k + [2 * j + 1] * k
    return Directions(groups, torch.tensor(tensor_of, device=point.theta.device), point.spans)


def _to(point: EvaluationPoint, steps: Steps) -> Steps:
    """The steps on the point's device."""
    device = point.theta.device
    if device.type == "cpu":
        return steps
    layers = []
    for w, b in steps.layers:
        w = None if w is None else tuple(t.to(device) for t in w)
        layers.append((w, None if b is None else b.to(device)))
    return Steps(steps.start, layers, steps.length, steps.scale)


@functools.lru_cache(maxsize=64)
def segments(sizes: tuple[int, ...], device: torch.device) -> Tensor:
    """(n,) the index of the tensor each flat entry belongs to (tensors of `sizes`, in order).
    Cached per layout: the result must not be modified."""
    return torch.arange(len(sizes), device=device).repeat_interleave(
        torch.tensor(sizes, device=device)
    )


@functools.lru_cache(maxsize=64)
def blocks(sizes: tuple[int, ...], device: torch.device) -> Tensor:
    """(T, 1, n) bool: entry i belongs to tensor t. Cached per layout: must not be modified."""
    seg = segments(sizes, device)
    return (torch.arange(len(sizes), device=device).unsqueeze(1) == seg).unsqueeze(1)


def unit_directions(sizes: tuple[int, ...], k: int, generator) -> Tensor:
    """Dense: k random unit directions per tensor (T * k, n), rows t*k..(t+1)*k supported on
    tensor t (the same k draws over all entries, cut to each tensor's block)."""
    u = _gaussian(k, sum(sizes), generator)
    u = (u * blocks(sizes, u.device)).view(len(sizes) * k, -1)
    return u.div_(torch.linalg.vector_norm(u, dim=1, keepdim=True))
