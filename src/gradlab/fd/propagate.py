"""Exact differences: what a perturbation of the parameters does to the net, without cancellation.

A central difference needs L(theta + s) - L(theta - s). Computed from the two losses, it keeps
only the digits the two have in common: its rounding error is ~eps |y_hat| / (|s| |J s|) of the
result, which limits how small s may be and swamps the difference where the gradient is small
(near convergence, where it is a sum over samples that nearly cancels). Here the change of every
layer is propagated instead, so each quantity keeps its own relative precision, whatever the step:

    a step of sign +/- changes layer j's pre-activation by  dz_j = +/-O_j + E_j,
    O_j the odd part (it flips with the step's sign), E_j the even part (second order and up).
    Layer j moved by (S_j, t_j), its input by da = +/-o + e:
        O_j = S_j (a + e) + W_j o + t_j          E_j = S_j o + W_j e
    An activation maps dz to da = act(z + dz) - act(z), both signs at once:
        relu: da = dz * 1[z > 0] wherever |dz| < |z| (no on/off flip: the common case, checked
            first for the whole layer, then entry by entry); where a sign flips,
            act(z + dz) - act(z) directly, and the set is reported (it straddles a kink)
        sigmoid: act(z + d) - act(z) = act(z + d) * act(-z) * (1 - exp(-d)), with expm1
    The loss, r = y_hat - y: L(+) - L(-) = mean((r + O + E)^2 - (r - O + E)^2) = 4 mean(O (r + E)).

So the central difference (L(+) - L(-)) / 2 = 2 mean(O (r + E)) carries a relative rounding
error ~eps whatever the step, and only its truncation ~|s|^2 remains: a small step makes it
exact to rounding. E itself changes the result by ~|s|^2 relative, so below a step of
the step second_order() names (|s|^2 < 256 eps) it is not carried: O goes on alone, at half
the work. A change is kept as one (P, B, D) tensor [O] for P perturbed sets while it is
exactly linear, else (P, 2B, D) [O; E] (stacked along the batch dim), so that a layer's shared W
multiplies all sets and both parts in one matrix product."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class Delta(NamedTuple):
    """The change of one layer's values in P sets: packed (P, B, D) = odd part only (the even
    part is zero), or (P, 2B, D) = the odd part stacked on the even part."""

    packed: Tensor
    batch: int

    @property
    def odd(self) -> Tensor:
        return self.packed[:, : self.batch]

    @property
    def even(self) -> Tensor | None:
        return self.packed[:, self.batch :] if self.packed.shape[1] > self.batch else None


def apply_weight(
    weight: Tensor | tuple[Tensor, Tensor], inputs: Tensor, scale: float = 1.0
) -> Tensor:
    """scale * inputs @ S^T for the weight steps S of P sets: dense S (P, D_out, D_in), or
    rank-1 factors (u (P, D_out), v (P, D_in)) meaning S = u v^T; inputs (P, C, D_in) or a
    shared (C, D_in) -> (P, C, D_out)."""
    if isinstance(weight, tuple):
        u, v = weight
        if inputs.dim() == 2:  # shared inputs: one product for all sets
            projected = torch.mm(v, inputs.t()).unsqueeze(2)  # (P, C, 1)
        else:
            projected = torch.bmm(inputs, v.unsqueeze(2))  # (P, C, 1): v . x, O(C D) per set
        if scale != 1.0:
            projected.mul_(scale)
        return projected * u.unsqueeze(1)
    out = torch.matmul(inputs, weight.transpose(1, 2))
    return out if scale == 1.0 else out.mul_(scale)


def second_order(step: float, dtype: torch.dtype) -> bool:
    """Whether a step this long needs the even part carried: |s|^2 above 256 eps."""
    return step > 16 * torch.finfo(dtype).eps ** 0.5


def layer_change(
    w: Tensor,
    a: Tensor,
    delta: Delta | None,
    weight: Tensor | tuple[Tensor, Tensor] | None,
    bias: Tensor | None,
    keep_even: bool = True,
    scale: float = 1.0,
) -> Delta:
    """The change of z = a W^T + b in P sets, from the change `delta` of its input a (B, D_in)
    (None: a does not move) and the layer's own steps: `weight` (see apply_weight) and `bias`
    (P, D_out), each None where the layer does not move, both times `scale`; keep_even=False
    leaves the even part out."""
    batch = a.shape[0]
    packed = None
    if delta is None:  # the first layer that moves: z changes by S a + t, exactly linear
        if weight is not None:
            packed = apply_weight(weight, a, scale)
    else:
        flat = delta.packed.reshape(-1, w.shape[1])
        packed = torch.mm(flat, w.t()).view(*delta.packed.shape[:2], -1)  # [W o; W e], all sets
        if weight is not None and not keep_even:  # O = S a + W o (+ t)
            packed.add_(apply_weight(weight, a, scale))
        elif weight is not None:
            even = delta.even
            top = a.expand(len(packed), -1, -1) if even is None else even + a
            s_part = apply_weight(weight, torch.cat([top, delta.odd], dim=1), scale)  # [S(a+e); So]
            if even is None:  # W e = 0: the even part is S o alone
                s_part[:, :batch] += packed
                packed = s_part
            else:
                packed = packed.add_(s_part)
    if bias is not None:
        t = bias.unsqueeze(1)  # (P, 1, D_out)
        if packed is None:
            return Delta(t.expand(-1, batch, -1) * scale, batch)
        packed[:, :batch].add_(t, alpha=scale)
    return Delta(packed, batch)


def activation_change(
    relu: bool,
    z: Tensor,
    a: Tensor,
    base: tuple[Tensor, Tensor, float] | None,
    delta: Delta,
    keep_even: bool = True,
) -> tuple[Delta, Tensor | None]:
    """The change of act(z) for the change `delta` of z (base z, a = act(z), shared (B, D) or
    per set (P, B, 1); relu: base = (1[z > 0] in z's dtype, |z|, the layer's smallest |z|)), and
    for relu which of the P sets flipped an on/off decision ((P,) bool, None when none did).
    keep_even=False leaves the even part out. `delta` is consumed (may be overwritten)."""
    odd, even, batch = delta.odd, delta.even, delta.batch
    if relu:
        mask, size, margin = base
        low, high = delta.packed.min(), delta.packed.max()
        unflipped = 2 * max(-float(low), float(high)) < margin  # |o| + |e| below every |z|
        if not unflipped:  # entry by entry
            change = delta.packed.abs()
            change = change if even is None else change[:, :batch] + change[:, batch:]
            unflipped = bool(torch.lt(change, size).all())
        if unflipped:  # no sign can change: da = dz * 1[z > 0], in place (delta is consumed)
            both = mask if even is None else torch.cat([mask, mask], -2)
            return Delta(delta.packed.mul_(both), batch), None
        d_p, d_m = (odd, -odd) if even is None else (even + odd, even - odd)
        plus, minus, on = z + d_p, z + d_m, mask > 0
        flipped = (plus > 0).ne_(on).bitwise_or_((minus > 0).ne_(on))  # (P, B, D)
        d_plus = torch.where(flipped, plus.clamp(min=0) - a, d_p * mask)
        d_minus = torch.where(flipped, minus.clamp(min=0) - a, d_m * mask)
        flips = any_per_set(flipped)
    else:
        d = torch.cat([odd if even is None else even + odd, -odd if even is None else even - odd])
        zz = torch.cat([z, z]) if z.dim() == 3 else z  # z of each set (coordinates), or shared
        # act(z + d) - act(z) for both signs at once: (2P, B, D)
        both = torch.sigmoid(zz + d).mul_(torch.sigmoid(-zz)).mul_(torch.expm1(-d).neg_())
        d_plus, d_minus = both.chunk(2)
        flips = None
    odd = (d_plus - d_minus) / 2
    if not keep_even:
        return Delta(odd, batch), flips
    return Delta(torch.cat([odd, (d_plus + d_minus) / 2], dim=1), batch), flips


def loss_difference(output: Tensor, delta: Delta, labels: Tensor | None = None) -> Tensor:
    """(L(+) - L(-)) / 2 per set (P,) for the output's change `delta`. mse (labels None, output
    the residual r): 2 mean(O (r + E)). cross-entropy (output the softmax p, labels (B,)):
    the mean over the batch of lse(z + d+) - lse(z + d-) - 2 O[label], halved, with
    lse(z + d) - lse(z) = log1p(sum_c p_c expm1(d_c)), d+- = +-O + E."""
    even = delta.even
    if labels is None:
        r = output if even is None else even + output
        return (delta.odd * r).sum(dim=(1, 2)).mul_(2 / r.shape[-2:].numel())
    odd = delta.odd
    plus, minus = (odd, -odd) if even is None else (even + odd, even - odd)
    shift = [torch.log1p((output * torch.expm1(d)).sum(-1)) for d in (plus, minus)]  # (P, B)
    picked = odd.gather(-1, labels.view(1, -1, 1).expand(len(odd), -1, 1)).squeeze(-1)
    return (shift[0] - shift[1] - 2 * picked).mean(1) / 2


def any_per_set(mask: Tensor) -> Tensor:
    """(P,) bool: whether mask (P, ...) holds any True per leading index. Bool any() is slow on
    the CPU; max over a uint8 view is the same reduction, vectorized."""
    return mask.view(torch.uint8).flatten(1).amax(1).bool()
