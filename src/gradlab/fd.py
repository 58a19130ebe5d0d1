"""Batched central finite differences: many perturbed parameter sets in one forward pass.

Everything here works on a flat parameter vector theta (n,): layer1.weight, layer1.bias,
layer2.weight, ... flattened in order. For a step row s_j, fd_j = (L(theta + s_j) -
L(theta - s_j)) / 2 approximates g . s_j; both signs of a chunk of rows go through one forward.

Two ways through the net, both batched over the perturbed sets:
- coordinate_differences (full check, numerical gradient): one coordinate moves one unit, so the
  unperturbed forward (EvaluationPoint.forward, run once) serves every layer up to the perturbed
  one, the next layer is a rank-1 update, and only the layers above need full matmuls;
- direction_differences (directional check): each set has its own weights in every layer, one
  batched matmul per layer; the base set runs with them for the on/off pattern.
Activations are kept transposed, one (D, B) matrix per set, so a batch of P sets is (P, D, B):
the long batch dim B is the contiguous one, which the small matmuls and the elementwise ops here
run fastest on. Kinks: a set whose perturbation flips any ReLU on/off decision of the base set
(any unit, any sample) is flagged; its difference straddles a kink.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from gradlab.models import MLP

# Upper bound on the activations one chunk of perturbed sets may hold.
DEFAULT_MAX_BYTES = 16 * 2**20
# A difference that straddles a ReLU kink is redone with a step this much smaller.
KINK_RECHECK_FACTOR = 0.1


class Forward(NamedTuple):
    """The unperturbed forward, transposed: (D, B) per layer."""

    acts: list[Tensor]  # a_0 = x^T, a_1, ..., a_{L-1}: each layer's input, (D_{k-1}, B)
    pre: list[Tensor]  # z_1, ..., z_L (z_L = y_hat^T): each layer's pre-activation, (D_k, B)
    on: list[Tensor]  # relu only: z_k > 0 of each hidden layer, the base on/off pattern


@dataclass
class EvaluationPoint:
    """theta and the batch in the dtype the differences are taken in; the unperturbed forward is
    run on first use of ``forward``."""

    theta: Tensor  # (n,) a fresh copy
    shapes: dict[str, torch.Size]  # parameter name -> shape, in theta's order
    layers: list[tuple[Tensor, Tensor]]  # (W_k (D_k, D_{k-1}), b_k (D_k,)), views into theta
    spans: list[tuple[int, int]]  # layer k's parameters (W_k flat, then b_k) are theta[start:stop]
    relu: bool
    x: Tensor  # x^T (D_0, B)
    y: Tensor  # y^T (D_L, B)

    @functools.cached_property
    @torch.no_grad()
    def forward(self) -> Forward:
        acts, pre = [self.x], []
        for w, b in self.layers:
            pre.append(torch.addmm(b.unsqueeze(1), w, acts[-1]))  # W a + b, (D_k, B)
            if len(pre) < len(self.layers):
                acts.append(torch.relu(pre[-1]) if self.relu else torch.sigmoid(pre[-1]))
        return Forward(acts, pre, [z > 0 for z in pre[:-1]] if self.relu else [])


@torch.no_grad()
def evaluation_point(model: MLP, x: Tensor, y: Tensor, dtype: torch.dtype) -> EvaluationPoint:
    """Copy theta and the batch (transposed) to `dtype`."""
    names, params = zip(*model.named_parameters())
    theta = torch.cat([p.reshape(-1) for p in params]).to(dtype)  # a fresh copy
    layers, spans, offset = [], [], 0
    for w, b in zip(params[::2], params[1::2]):
        w_end = offset + w.numel()
        stop = w_end + b.numel()
        layers.append((theta[offset:w_end].view(w.shape), theta[w_end:stop]))
        spans.append((offset, stop))
        offset = stop
    return EvaluationPoint(
        theta=theta,
        shapes={name: p.shape for name, p in zip(names, params)},
        layers=layers,
        spans=spans,
        relu=model.activation == "relu",
        x=x.t().to(dtype, memory_format=torch.contiguous_format),
        y=y.t().to(dtype, memory_format=torch.contiguous_format),
    )


@torch.no_grad()
def coordinate_differences(
    point: EvaluationPoint,
    k: int,
    h: Tensor,
    rows: Tensor | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[Tensor, Tensor]:
    """fd_j = (L(theta + h_i e_i) - L(theta - h_i e_i)) / 2 for each coordinate i = rows[j] of
    layer k's parameters (W_k flat, then b_k; h (n_k,) their steps; rows None: all of them), and
    whether the perturbation flipped any ReLU on/off decision (a kink: then fd_j is not a
    derivative).

    A coordinate moves one unit u of layer k: z_k changes in row u only, by h * a_{k-1}[j] for
    W_k[u, j] (by h for b_k[u]), so does a_k, and z_{k+1} by a rank-1 update. Layers below k
    are the base forward's; only from layer k + 2 on does each set need full layers."""
    w, _ = point.layers[k]
    d_in, batch, last = w.shape[1], point.y.shape[1], k == len(point.layers) - 1
    width = sum(layer[0].shape[0] for layer in point.layers[k:])
    chunk = max(1, max_bytes // (2 * 2 * batch * width * h.element_size()))
    rows = torch.arange(h.numel()) if rows is None else rows
    base, rows = point.forward, rows.to(h.device)
    inputs = torch.cat([base.acts[k], torch.ones_like(point.y[:1])])  # a_{k-1}; ones for b_k
    fd = torch.empty(rows.numel(), dtype=h.dtype, device=h.device)
    kinked = torch.zeros(rows.numel(), dtype=torch.bool, device=h.device)
    for start in range(0, rows.numel(), chunk):
        i = rows[start : start + chunk].repeat(2)  # (P,) = (2c,): both signs
        c = i.numel() // 2
        step = torch.cat([h[i[:c]], -h[i[:c]]]).unsqueeze(1)  # (P, 1)
        is_w = i < w.numel()
        unit = torch.where(is_w, i // d_in, i - w.numel())  # the unit of layer k each set moves
        moved = torch.where(is_w, i % d_in, d_in)  # the input row its step scales
        z_unit = torch.addcmul(base.pre[k][unit], inputs[moved], step)  # z_k[u] (P, B)
        flips = torch.zeros(2 * c, dtype=torch.bool, device=h.device)
        if last:  # y_hat moves in row u only
            z = base.pre[k].expand(2 * c, -1, -1).clone()  # (P, D_L, B)
            z.scatter_(1, unit.view(-1, 1, 1).expand(-1, 1, batch), z_unit.unsqueeze(1))
        else:
            if point.relu:
                flips = _any_per_set((z_unit > 0).ne_(base.on[k][unit])).bool()
            a_unit = torch.relu(z_unit) if point.relu else torch.sigmoid(z_unit)
            # z_{k+1} = base + W_{k+1}[:, u] (change of a_k[u]): (P, D_{k+1}, B)
            z = torch.addcmul(
                base.pre[k + 1],
                point.layers[k + 1][0].t()[unit].unsqueeze(2),
                (a_unit - base.acts[k + 1][unit]).unsqueeze(1),
            )
            for j, (w_j, b_j) in enumerate(point.layers[k + 2 :], start=k + 1):
                # layers above: unperturbed weights, one batched matmul for all sets
                a, flipped = _activate(point.relu, z, base.on[j] if point.relu else None)
                flips = flips if flipped is None else flips | flipped.bool()
                z = torch.baddbmm(b_j.unsqueeze(1), w_j.expand(2 * c, -1, -1), a)
        losses = _loss(point, z)
        fd[start : start + c] = (losses[:c] - losses[c:]) / 2
        kinked[start : start + c] = flips[:c] | flips[c:]
    return fd, kinked


@torch.no_grad()
def direction_differences(
    point: EvaluationPoint, steps: Tensor, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[Tensor, Tensor]:
    """fd_j = (L(theta + s_j) - L(theta - s_j)) / 2 ~ g . s_j for each step row s_j of steps
    (m, n), any direction in parameter space, and whether it flipped any ReLU (a kink).
    Every set has its own weights in every layer: one batched matmul per layer. The base set
    theta goes through the same forward, as set 0: its on/off pattern is what flips are about."""
    batch = point.y.shape[1]
    per_set = batch * sum(w.shape[0] for w, _ in point.layers) + steps.shape[1]
    chunk = max(1, max_bytes // (2 * 2 * per_set * steps.element_size()))
    sizes = [t.numel() for layer in point.layers for t in layer]
    theta, parts = point.theta.unsqueeze(0), []
    for start in range(0, steps.shape[0], chunk):
        s = steps[start : start + chunk]
        c = s.shape[0]
        sets = torch.cat([theta, theta + s, theta - s])  # (P, n): base, then both signs
        params = sets.split(sizes, dim=1)  # per set W_1, b_1, W_2, ...: views
        a, flips = point.x.expand(sets.shape[0], -1, -1), None  # x^T for every set
        for j, (w, _) in enumerate(point.layers):
            weights = params[2 * j].view(-1, *w.shape)  # (P, D_j, D_{j-1})
            z = torch.baddbmm(params[2 * j + 1].unsqueeze(2), weights, a)  # (P, D_j, B)
            if j < len(point.layers) - 1:
                a, flipped = _activate(point.relu, z, z[0] > 0 if point.relu else None)
                flips = flipped if flips is None else flips.bitwise_or_(flipped)
        plus, minus = _loss(point, z)[1:].view(2, c).unbind()
        if flips is None:  # sigmoid: no kinks
            kinked = torch.zeros(c, dtype=torch.bool, device=s.device)
        else:
            kinked = flips[1:].view(2, c).amax(0).bool()
        parts.append(((plus - minus) / 2, kinked))
    return parts[0] if len(parts) == 1 else tuple(torch.cat(p) for p in zip(*parts))


def _activate(relu: bool, z: Tensor, on: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """A hidden layer's activation of z (P, D, B), in place, and (relu) whether each set left
    the on/off pattern `on` (D, B), as (P,) uint8."""
    if not relu:
        return z.sigmoid_(), None
    a = z.relu_()
    return a, _any_per_set(a.bool().ne_(on))  # a > 0 iff z > 0


def _loss(point: EvaluationPoint, y_hat: Tensor) -> Tensor:
    """MSE of each set (P,) from y_hat (P, D_L, B): gradlab's mean over all B * D_L elements."""
    return (y_hat - point.y).pow_(2).mean(dim=(1, 2))


def _any_per_set(mask: Tensor) -> Tensor:
    """(P,) uint8: whether mask (P, ...) holds any True per leading index. Bool any() is slow on
    the CPU; max over a uint8 view is the same reduction, vectorized."""
    return mask.view(torch.uint8).flatten(1).amax(1)


def default_steps(theta: Tensor, h: float | None = None) -> Tensor:
    """Per-element step h * max(1, |theta|), h defaulting to cbrt(machine eps) of theta's dtype."""
    if h is None:
        h = torch.finfo(theta.dtype).eps ** (1 / 3)
    return theta.abs().clamp_(min=1.0).mul_(h)


def coordinate_steps(h_vec: Tensor) -> Callable[[Tensor], Tensor]:
    """steps(rows) for S = diag(h_vec): row i perturbs element i alone by h_i."""

    def steps(rows: Tensor) -> Tensor:
        s = torch.zeros(rows.numel(), h_vec.numel(), dtype=h_vec.dtype, device=h_vec.device)
        s[torch.arange(rows.numel(), device=h_vec.device), rows] = h_vec[rows]
        return s

    return steps


def row_steps(s: Tensor) -> Callable[[Tensor], Tensor]:
    """steps(rows) for given step rows S (m, n)."""
    return lambda rows: s[rows]


def function_differences(
    fn: Callable[..., Tensor],
    xs: Sequence[Tensor],
    t: int,
    w: Tensor,
    steps: Callable[[Tensor], Tensor],
    rows: Tensor,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor:
    """For each step row s_j = steps(rows) (c, xs[t].numel()) of input t alone:
    fd_j = (F(x_t + s_j) - F(x_t - s_j)) / 2 ~ dF . s_j, where F = sum(w * fn(*xs)).

    All 2c perturbed copies of input t are stacked along a new leading dim (in front of every
    output dim, so inputs of fewer dims still broadcast right); the other inputs broadcast, each
    passed as a fresh clone because a Function may modify its inputs in place (mark_dirty)."""
    x = xs[t]
    lead = (1,) * (w.dim() - x.dim())  # align x's dims with the output's trailing dims
    chunk = max(1, max_bytes // (2 * 4 * max(w.numel(), x.numel()) * w.element_size()))
    m = rows.numel()
    out = torch.empty(m, dtype=w.dtype, device=w.device)
    for start in range(0, m, chunk):
        stop = min(m, start + chunk)
        c = stop - start
        s = steps(rows[start:stop]).view(c, *lead, *x.shape)
        args = [v.clone() for v in xs]
        args[t] = torch.cat([x + s, x - s])  # (2c, *lead, *x.shape)
        f = fn(*args)
        if f.shape != (2 * c, *w.shape):
            raise ValueError(
                f"fn must broadcast over a leading batch dim of its inputs: perturbing input{t} "
                f"as {tuple(args[t].shape)} gave an output of shape {tuple(f.shape)}, "
                f"expected {(2 * c, *w.shape)}"
            )
        total = (f * w).flatten(1).sum(1)  # (2c,)
        out[start:stop] = (total[:c] - total[c:]) / 2
    return out


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
    point: EvaluationPoint, h_vec: Tensor, max_bytes: int = DEFAULT_MAX_BYTES
) -> list[tuple[Tensor, Tensor | None, int]]:
    """Per layer (whose coordinates share its forward): the central-difference derivative of
    every coordinate (steps h_vec), with the kink re-check: (fd / h, excluded or None, kinks)."""
    out = []
    for layer, (a, b) in enumerate(point.spans):
        h = h_vec[a:b]
        diffs, excluded, n = with_kink_recheck(
            lambda rows, f, layer=layer, h=h: coordinate_differences(
                point, layer, h * f, rows, max_bytes
            )
        )
        out.append((diffs / h, excluded, n))
    return out


def direction_fd(
    point: EvaluationPoint, s: Tensor, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[Tensor, Tensor | None, int]:
    """Central differences along the step rows s (m, n), with the kink re-check."""
    return with_kink_recheck(
        lambda rows, f: direction_differences(point, s if rows is None else s[rows] * f, max_bytes)
    )
