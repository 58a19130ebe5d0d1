"""What a gradient method hands back, made sure of before it is used: one well-formed gradient
per parameter, and whether any of it is NaN or infinite."""

from __future__ import annotations

import torch
from torch import Tensor, nn

# GradScaler's fused NaN/inf test (private, but what torch.amp itself calls); None if it goes.
_FUSED_CHECK = getattr(torch, "_amp_foreach_non_finite_check_and_unscale_", None)


class GradientMethodError(RuntimeError):
    """A gradient method raised or returned something that is not one gradient per parameter."""


def well_formed(result, names: list[str], params: list[nn.Parameter], method: str):
    """(loss, [gradient per parameter]) from a method's result, or GradientMethodError naming
    the method and the parameter."""
    try:
        loss, grads = result
    except (TypeError, ValueError):
        raise GradientMethodError(
            f"gradient method {method!r} returned {type(result).__name__}, "
            "expected (loss, {parameter name: gradient})"
        ) from None
    if not isinstance(grads, dict):
        raise GradientMethodError(
            f"gradient method {method!r} returned {type(grads).__name__}, "
            "expected a dict {parameter name: gradient}"
        )
    out = []
    for name, p in zip(names, params):
        g = grads.get(name)
        problem = None
        if g is None:
            problem = "is missing"
        elif not isinstance(g, Tensor):
            problem = f"is a {type(g).__name__}, not a tensor"
        elif g.shape != p.shape:
            problem = f"has shape {tuple(g.shape)}, expected {tuple(p.shape)}"
        elif g.dtype != p.dtype or g.device != p.device:
            problem = f"is {g.dtype} on {g.device}, expected {p.dtype} on {p.device}"
        if problem:
            raise GradientMethodError(f"gradient method {method!r}: gradient of {name!r} {problem}")
        out.append(g)
    return loss, out


class AllFinite:
    """Whether no gradient holds a NaN or an infinity, in one kernel where possible.

    It runs every step, between two timed gradient calls, so it is kept to one fused op:
    GradScaler's check, which multiplies by 1.0 in place (values unchanged); where a tensor
    refuses that (an expanded view, whose elements share memory), the plain test runs."""

    def __init__(self):
        self.found: Tensor | None = None  # the fused check's flag and scale, on the device
        self.one: Tensor | None = None

    def __call__(self, grads: list[Tensor]) -> bool:
        device = grads[0].device
        if self.found is None or self.found.device != device:
            self.found = torch.zeros(1, dtype=torch.float32, device=device)
            self.one = torch.ones(1, dtype=torch.float32, device=device)
        if _FUSED_CHECK is not None:
            try:
                self.found.zero_()
                with torch.no_grad():
                    _FUSED_CHECK(grads, self.found, self.one)
                return not self.found.item()
            except RuntimeError:
                pass
        return all(bool(g.isfinite().all()) for g in grads)
