"""Batched exact central differences of an MLP's loss: many perturbed parameter sets at once.

Everything here works on a flat parameter vector theta (n,): layer1.weight, layer1.bias,
layer2.weight, ... flattened in order. For a step s, fd = (L(theta + s) - L(theta - s)) / 2
~ g . s, computed by propagating the change (gradlab.fd.propagate): its rounding error is
relative, whatever the size of s. Three ways to give the steps, all batched over P sets:
- coordinate_differences (full check, numerical gradient): one coordinate of layer k moves one
  unit, so the layers below are the base forward's, the next layer gets a rank-1 update, and
  only the layers above need full matmuls;
- direction_differences: dense step rows (m, n), every set moving every layer;
- factor_differences: structured steps (Steps), per layer a rank-1 weight step u v^T and a bias
  step, from the first layer any of the sets moves: O(D B) per set and layer for the step itself.
Kinks: a set whose perturbation flips any ReLU on/off decision of the base forward (any unit,
any sample) is flagged: its difference straddles a kink, and is not a derivative.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gradlab.fd.point import DEFAULT_MAX_BYTES, KINK_RECHECK_FACTOR, EvaluationPoint
from gradlab.fd.propagate import (
    Delta,
    activation_change,
    layer_change,
    loss_difference,
    second_order,
)

Weight = Tensor | tuple[Tensor, Tensor]  # dense (P, D_out, D_in), or rank-1 factors (u, v)


@dataclass
class Steps:
    """P steps in parameter space, layer by layer from layer `start` (the layers below do not
    move): for each, the weight step (dense or rank-1 factors, or None) and the bias step
    ((P, D_out) or None), all to be multiplied by `scale`; `length` bounds the lengths of the
    scaled steps (it decides whether second-order terms are carried: gradlab.fd.propagate)."""

    start: int
    layers: list[tuple[Weight | None, Tensor | None]]
    length: float
    scale: float = 1.0

    def __len__(self) -> int:
        weight, bias = next((w, b) for w, b in self.layers if w is not None or b is not None)
        if bias is not None:
            return len(bias)
        return len(weight[0]) if isinstance(weight, tuple) else len(weight)

    def select(self, rows: slice | Tensor, factor: float = 1.0) -> Steps:
        """The steps of sets `rows`, `factor` times longer (a scale, nothing copied for all
        rows)."""
        layers = self.layers
        if not (isinstance(rows, slice) and rows == slice(None)):

            def pick(weight: Weight | None) -> Weight | None:
                if weight is None:
                    return None
                return (
                    (weight[0][rows], weight[1][rows])
                    if isinstance(weight, tuple)
                    else weight[rows]
                )

            layers = [(pick(w), None if b is None else b[rows]) for w, b in self.layers]
        return Steps(self.start, layers, self.length * abs(factor), self.scale * factor)


def default_steps(theta: Tensor, h: float | None = None) -> Tensor:
    """Per-element step h * max(1, |theta|), h defaulting to default_h(theta.dtype)."""
    return theta.abs().clamp_(min=1.0).mul_(default_h(theta.dtype) if h is None else h)


def default_h(dtype: torch.dtype) -> float:
    """sqrt(eps) of the dtype: exact differences round relatively whatever the step, so the step
    only sets the truncation error, ~h^2 (eps too: the rounding level); and a small step
    seldom straddles a ReLU kink."""
    return torch.finfo(dtype).eps ** 0.5


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
    whether the perturbation flipped any ReLU on/off decision (a kink).

    A coordinate moves one unit u of layer k: z_k changes in column u only, by h * a_{k-1}[:, j]
    for W_k[u, j] (by h for b_k[u]), so does a_k, and z_{k+1} by a rank-1 update. Layers below
    k are the base forward's; only from layer k + 2 on does each set need full layers."""
    w = point.layers[k][0]
    d_in, batch, last = w.shape[1], point.y.shape[0], k == len(point.layers) - 1
    width = sum(layer[0].shape[0] for layer in point.layers[k:])
    chunk = max(1, max_bytes // (6 * batch * width * h.element_size()))
    base, even = point.forward, second_order(float(h.abs().max()), h.dtype)
    rows = (torch.arange(h.numel()) if rows is None else rows).to(h.device)
    a = base.acts[k]
    inputs = torch.cat([a, torch.ones_like(a[:, :1])], 1)  # a_{k-1}, and ones for b_k
    fd = torch.empty(rows.numel(), dtype=h.dtype, device=h.device)
    kinked = torch.zeros(rows.numel(), dtype=torch.bool, device=h.device)

    def column(t: Tensor, unit: Tensor) -> Tensor:  # unit u's column of each set: (c, B, 1)
        return t[:, unit].t().contiguous().unsqueeze(2)

    own = None  # the base values of layer k, (2 or 4, D_k, B): a unit's column is then a row
    if not last:
        values = [base.pre[k], base.acts[k + 1]]
        values += [base.mask[k], base.size[k]] if point.relu else []
        own = torch.stack(values).transpose(1, 2).contiguous()

    for start in range(0, rows.numel(), chunk):
        i = rows[start : start + chunk]
        is_w = i < w.numel()
        unit = torch.where(is_w, i // d_in, i - w.numel())  # the unit of layer k each set moves
        moved = torch.where(is_w, i % d_in, d_in)  # the input column its step scales
        delta = Delta(column(inputs, moved) * h[i].view(-1, 1, 1), batch)  # z_k[:, u] (c, B, 1)
        if last:  # y_hat moves in column u only
            fd[start : start + len(i)] = _last_layer(point, unit, delta)
            continue
        z_u, a_u, *rest = own[:, unit].unsqueeze(3).unbind()  # (c, B, 1) each
        unit_base = (*rest, base.margin[k]) if point.relu else None
        delta, flips = activation_change(point.relu, z_u, a_u, unit_base, delta, even)
        w_next = point.layers[k + 1][0].t()[unit].unsqueeze(1)  # W_{k+1}[:, u] (c, 1, D)
        delta = Delta(delta.packed * w_next, batch)  # z_{k+1}: a rank-1 change per set
        rest = [(None, None)] * (len(point.layers) - k - 2)
        delta, more = _through(point, k + 2, delta, rest, even)
        fd[start : start + len(i)] = _loss_difference(point, delta)
        if (flips := _either(flips, more)) is not None:  # sigmoid: no kinks
            kinked[start : start + len(i)] = flips
    return fd, kinked


def _loss_difference(point: EvaluationPoint, delta: Delta) -> Tensor:
    labels = None if point.y.is_floating_point() else point.y
    return loss_difference(point.forward.output, delta, labels)


def _last_layer(point: EvaluationPoint, unit: Tensor, delta: Delta) -> Tensor:
    """The loss difference of coordinates of the last layer: set j moves output column
    unit[j] alone, by delta (c, B, 1)."""
    output = point.forward.output
    if point.y.is_floating_point():  # the mean over D_L columns sees 1 / D_L of it
        column = output[:, unit].t().unsqueeze(2)  # (c, B, 1)
        return loss_difference(column, delta) / output.shape[1]
    # cross-entropy: the full change of the logits, zero but in each set's own column
    full = torch.zeros(len(unit), *output.shape, dtype=output.dtype, device=output.device)
    index = unit.view(-1, 1, 1).expand(-1, output.shape[0], 1)
    full.scatter_(2, index, delta.odd)
    if delta.even is not None:
        even = torch.zeros_like(full).scatter_(2, index, delta.even)
        full = torch.cat([full, even], 1)
    return loss_difference(output, Delta(full, delta.batch), point.y)


def _through(
    point, start: int, delta: Delta | None, steps: list, even: bool, scale: float = 1.0
) -> tuple[Delta, Tensor | None]:
    """Carry the change `delta` of z_{start-1} (None: nothing moved yet) up through layers
    start.. (each moved by its entry of `steps`), with its even part or not; returns the
    output's change and the sets that flipped a ReLU on the way (None: no ReLU crossed)."""
    base, flips = point.forward, None
    for j, (weight, bias) in enumerate(steps, start=start):
        if delta is not None:  # layer j's input changes: through the activation of layer j - 1
            own = (base.mask[j - 1], base.size[j - 1], base.margin[j - 1]) if point.relu else None
            z, a = base.pre[j - 1], base.acts[j]
            delta, f = activation_change(point.relu, z, a, own, delta, even)
            flips = _either(flips, f)
        delta = layer_change(point.layers[j][0], base.acts[j], delta, weight, bias, even, scale)
    return delta, flips


def _either(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    return b if a is None else a if b is None else a | b


@torch.no_grad()
def factor_differences(
    point: EvaluationPoint, steps: Steps, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[Tensor, Tensor]:
    """fd_j = (L(theta + s_j) - L(theta - s_j)) / 2 ~ g . s_j for the P structured steps, and
    whether each flipped any ReLU on/off decision (a kink)."""
    batch = point.y.shape[0]
    moved = zip(point.layers[steps.start :], steps.layers)
    width = sum(w.shape[0] + w.shape[1] for w, _ in point.layers[steps.start :])
    dense = sum(w.numel() for (w, _), (s, _) in moved if isinstance(s, Tensor))
    chunk = max(1, max_bytes // ((8 * batch * width + dense) * point.theta.element_size()))
    p = len(steps)
    fd = torch.empty(p, dtype=point.theta.dtype, device=point.theta.device)
    kinked = torch.zeros(p, dtype=torch.bool, device=point.theta.device)
    even = second_order(steps.length, point.theta.dtype)
    for start in range(0, p, chunk):
        part = steps if chunk >= p else steps.select(slice(start, start + chunk))
        delta, flips = _through(point, steps.start, None, part.layers, even, steps.scale)
        fd[start : start + chunk] = _loss_difference(point, delta)
        if flips is not None:
            kinked[start : start + chunk] = flips
    return fd, kinked


def dense_steps(point: EvaluationPoint, s: Tensor) -> Steps:
    """Step rows s (m, n) over all of theta as Steps: per layer, dense weight and bias views."""
    layers = []
    for (w, _), (a, b) in zip(point.layers, point.spans):
        w_end = a + w.numel()
        layers.append((s[:, a:w_end].view(-1, *w.shape), s[:, w_end:b]))
    return Steps(0, layers, float(torch.linalg.vector_norm(s, dim=1).max()))


def direction_differences(
    point: EvaluationPoint, steps: Tensor, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[Tensor, Tensor]:
    """fd_j = (L(theta + s_j) - L(theta - s_j)) / 2 ~ g . s_j for each dense step row s_j of
    steps (m, n), any direction in parameter space, and whether it flipped any ReLU."""
    return factor_differences(point, dense_steps(point, steps), max_bytes)


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
    point: EvaluationPoint, steps: Steps | Tensor, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[Tensor, Tensor | None, int]:
    """Central differences along the steps (Steps, or dense rows (m, n)), with the kink
    re-check."""
    if isinstance(steps, Tensor):
        steps = dense_steps(point, steps)
    return with_kink_recheck(
        lambda rows, f: factor_differences(
            point, steps if rows is None else steps.select(rows, f), max_bytes
        )
    )
