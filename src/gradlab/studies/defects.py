"""Planted defects: autograd's gradient with one thing wrong, as gradient methods a run can
train with (grad=custom grad.method=gradlab.studies.defects.<kind> plus the size and tensor
in DEFECT_SIZE / DEFECT_PARAM, or defect(kind, size, param) in code). They are what the
detection study measures the checks against (experiments/verdict/).

Sized kinds put a defect delta of norm `size` * |g_t| on one tensor t:
    scale    g_t (1 + size): a wrong factor
    element  one entry (the largest) off by size |g_t|
    noise    a fixed random direction of norm size |g_t| (a defect confined to one tensor)
    leak     g + size * (the previous call's gradient): a buffer not cleared between steps
Fixed kinds (their size is what the mistake makes it):
    sign        one entry (the largest) with its sign flipped
    transpose   a square weight's gradient transposed
    dropped     one sample left out of the sum, the mean still over all B
    mean        the mean taken over B - 1 samples
Lower precision (the math is right):
    bfloat16, float16   the whole backward rounded through that dtype
    fd_naive            central differences from two losses in the model's own dtype, step
                        cbrt(eps): what the articles do (float32: ~1e-3 off)
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from gradlab.grads import METHODS
from gradlab.losses import mse_loss

SIZED = ("scale", "element", "noise", "leak")
FIXED = ("sign", "transpose", "dropped", "mean")
PRECISION = ("bfloat16", "float16", "fd_naive")
KINDS = (*SIZED, *FIXED, *PRECISION)

_autograd = METHODS["autograd"]


def defect(kind: str, size: float = 1e-5, param: str | None = None):
    """A gradient method with the defect `kind` (of `size`, on tensor `param`; default the
    last layer's bias, the smallest tensor, or the first square weight for transpose)."""
    if kind not in KINDS:
        raise ValueError(f"unknown defect {kind!r}; allowed: {', '.join(KINDS)}")
    state: dict[str, Tensor] = {}

    def method(model, x, y):
        if kind in ("dropped", "mean"):
            return _sample_defect(kind, model, x, y)
        if kind == "fd_naive":
            return _fd_naive(model, x, y)
        loss, grads = _autograd(model, x, y)
        name = param or _default_param(kind, grads)
        if kind in PRECISION:
            low = getattr(torch, kind)
            return loss, {n: g.to(low).to(g.dtype) for n, g in grads.items()}
        g = grads[name]
        if kind == "leak":
            previous = state.get(f"{name}:{g.dtype}", torch.zeros_like(g))
            state[f"{name}:{g.dtype}"] = g.clone()
            grads[name] = g + size * previous
        else:
            grads[name] = _sized(kind, g, size)
        return loss, grads

    method.__name__ = method.__qualname__ = f"defect_{kind}"
    return method


def _default_param(kind: str, grads: dict[str, Tensor]) -> str:
    if kind == "transpose":
        square = [n for n, g in grads.items() if g.dim() == 2 and g.shape[0] == g.shape[1]]
        if not square:
            raise ValueError("defect transpose needs a square weight (three_layer_relu has one)")
        return square[0]
    return list(grads)[-1]


def _sized(kind: str, g: Tensor, size: float) -> Tensor:
    norm, flat = g.norm(), g.reshape(-1)
    if kind == "scale":
        return g * (1 + size)
    if kind == "transpose":
        return g.t().clone()
    out = flat.clone()
    i = int(flat.abs().argmax())
    if kind == "sign":
        out[i] = -out[i]
    elif kind == "element":
        out[i] += size * norm * (1 if out[i] >= 0 else -1)
    else:  # noise: a fixed direction (seeded by the shape), norm size |g|
        gen = torch.Generator().manual_seed(flat.numel())
        d = torch.randn(flat.numel(), generator=gen, dtype=torch.float64).to(g)
        out += d * (size * norm / d.norm())
    return out.view(g.shape)


def _sample_defect(kind: str, model, x: Tensor, y: Tensor):
    """dropped: the first sample left out of the sum (mean still over B); mean: over B - 1."""
    names, params = zip(*model.named_parameters())
    with torch.enable_grad():
        residual = model(x) - y
        if kind == "dropped":
            loss = residual[1:].square().sum() / residual.numel()
        else:
            loss = residual.square().sum() / (residual.numel() - residual.shape[1])
        grads = torch.autograd.grad(loss, params)
    return mse_loss(model(x), y).detach(), dict(zip(names, grads))


@torch.no_grad()
def _fd_naive(model, x: Tensor, y: Tensor):
    """Central differences from two losses per coordinate, in the model's dtype, with the step
    cbrt(eps) * max(1, |theta_i|) that balances their truncation and rounding."""
    names, params = zip(*model.named_parameters())
    grads = {}
    for name, p in zip(names, params):
        flat, g = p.view(-1), torch.empty(p.numel(), dtype=p.dtype, device=p.device)
        for i in range(flat.numel()):
            keep = float(flat[i])
            h = torch.finfo(p.dtype).eps ** (1 / 3) * max(1.0, abs(keep))
            flat[i] = keep + h
            plus = mse_loss(model(x), y)
            flat[i] = keep - h
            minus = mse_loss(model(x), y)
            flat[i] = keep
            g[i] = (plus - minus) / (2 * h)
        grads[name] = g.view(p.shape)
    return mse_loss(model(x), y), grads


def from_env(model, x, y):
    """The defect DEFECT_KIND of DEFECT_SIZE on DEFECT_PARAM (environment), for the CLI. The
    method (and a leak's buffer) is kept for the process; reset() starts a fresh one."""
    kind = os.environ.get("DEFECT_KIND", "scale")
    size = float(os.environ.get("DEFECT_SIZE", "1e-5"))
    param = os.environ.get("DEFECT_PARAM") or None
    key = (kind, size, param)
    if _ENV.get("key") != key:
        _ENV.update(key=key, method=defect(kind, size, param))
    return _ENV["method"](model, x, y)


_ENV: dict = {}


def reset() -> None:
    """Forget from_env's method: the next call builds a fresh one (an empty leak buffer)."""
    _ENV.clear()
