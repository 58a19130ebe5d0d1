"""Product and quotient rules as custom autograd Functions: article 000's six, audited, plus fixes.

z = x * y and z = x / y, x and y of the same shape (as in the article), each written as a
torch.autograd.Function whose backward is one way of applying the product or quotient rule.
``published=True`` marks the six the article publishes; their math is kept as published, wrong
or not, so that the checks in tests/test_rules.py and experiments/product_quotient/ can catch it:

name                saves    backward (g = upstream gradient)           verdict
product_basic       x, y     g*y, g*x                                   right
product_log         x, y     g*y*(1+log(|x|+1e-8)), g*x*(1+log(|y|+..)) WRONG (except |x|=|y|=1)
product_optimized   x, y, z  g*(z/x), g*(z/y)                           NaN at 0, z under/overflow
product_log_fixed   x, y     g*(z/x), g*(z/y), z = x*y recomputed       NaN at 0, z under/overflow
quotient_basic      x, y     g/y, -g*x/y**2                             y**2 under/overflows
quotient_log        x, y     g/y*(1+log(|x|+..)), -g*x/y**2*(1+log(..)) WRONG (except |x|=|y|=1)
quotient_optimized  x, 1/y   g*yinv, -g*x*yinv*yinv                     right (0*inf at x=0, y~0)
quotient_log_fixed  x, y     g*(z/x), -g*(z/y), z = x/y recomputed      NaN at x = 0
quotient_guarded    y, z     g/y, -(g/y)*z (0 where z == 0)             right

product_autograd / quotient_autograd (torch.mul / torch.div) are the built-in reference.
product_basic is already the guarded product rule: its backward has no division, so it is exact
at 0 and its result under/overflows only where the true gradient does; no separate copy is kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

LOG_EPS = 1e-8  # the article's guard inside log(|x| + 1e-8)
EDGE_POINTS = ("0", "1e-30", "1e30")


class ProductBasic(torch.autograd.Function):
    """Published, right: d(xy)/dx = y, d(xy)/dy = x."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_z):
        x, y = ctx.saved_tensors
        grad_x = grad_z * y if ctx.needs_input_grad[0] else None
        grad_y = grad_z * x if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class ProductLog(torch.autograd.Function):
    """Published "log-differentiation" product, WRONG: the factor (1 + log|x|) is the derivative of
    x*log(x), not of x*y, so the gradient is off by that factor except where |x| = 1 (|y| = 1)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_z):
        x, y = ctx.saved_tensors
        grad_x = grad_y = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_z * y * (1 + torch.log(x.abs() + LOG_EPS))
        if ctx.needs_input_grad[1]:
            grad_y = grad_z * x * (1 + torch.log(y.abs() + LOG_EPS))
        return grad_x, grad_y


class ProductOptimized(torch.autograd.Function):
    """Published "optimized" product, the published math g*(z/x), g*(z/y) with z = x*y saved.

    Right only where x != 0 and y != 0: NaN (0/0) at x = 0, 0 instead of y where z underflows,
    inf where z overflows. Deviation from the article, which does not run: it calls
    ctx.mark_dirty(x, y) without modifying or returning x and y (PyTorch raises "Some elements
    marked as dirty ... were not returned as output"), and its backward reads x and y without
    having saved them. Here x and y are saved as well; since backward needs them, the published
    aim of keeping only z alive cannot be met by this rule."""

    @staticmethod
    def forward(ctx, x, y):
        z = x * y
        ctx.save_for_backward(x, y, z)
        return z

    @staticmethod
    def backward(ctx, grad_z):
        x, y, z = ctx.saved_tensors
        grad_x = grad_z * (z / x) if ctx.needs_input_grad[0] else None
        grad_y = grad_z * (z / y) if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class ProductLogFixed(torch.autograd.Function):
    """Log-differentiation done right: ln|z| = ln|x| + ln|y|, so dz/dx = z * d ln|z|/dx = z / x.

    The published log variant with its wrong factor replaced (still saving only x and y, z is
    recomputed); the same math as product_optimized, so also wrong at x = 0 or y = 0 (NaN)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad_z):
        x, y = ctx.saved_tensors
        z = x * y
        grad_x = grad_z * (z / x) if ctx.needs_input_grad[0] else None
        grad_y = grad_z * (z / y) if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class QuotientBasic(torch.autograd.Function):
    """Published, right: d(x/y)/dx = 1/y, d(x/y)/dy = -x/y**2. y**2 under/overflows first in
    float32: -inf at |y| ~ 1e-30, -0 at |y| ~ 1e30 where the true gradient is finite, and
    0/0 = NaN at x = 0 once |y| < ~2.6e-23."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x / y

    @staticmethod
    def backward(ctx, grad_z):
        x, y = ctx.saved_tensors
        grad_x = grad_z / y if ctx.needs_input_grad[0] else None
        grad_y = -grad_z * x / (y**2) if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class QuotientLog(torch.autograd.Function):
    """Published "log-differentiation" quotient, WRONG: the same spurious (1 + log|.|) factors as
    product_log; right only where |x| = 1 (for grad_x) and |y| = 1 (for grad_y)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x / y

    @staticmethod
    def backward(ctx, grad_z):
        x, y = ctx.saved_tensors
        grad_x = grad_y = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_z * (1 / y) * (1 + torch.log(x.abs() + LOG_EPS))
        if ctx.needs_input_grad[1]:
            grad_y = -grad_z * (x / y**2) * (1 + torch.log(y.abs() + LOG_EPS))
        return grad_x, grad_y


class QuotientOptimized(torch.autograd.Function):
    """Published "optimized" quotient, right and runs as published: z = x * (1/y), saving x and
    yinv = 1/y (a new tensor the graph keeps alive, where quotient_basic keeps only inputs)."""

    @staticmethod
    def forward(ctx, x, y):
        y_inv = 1.0 / y
        ctx.save_for_backward(x, y_inv)
        return x * y_inv

    @staticmethod
    def backward(ctx, grad_z):
        x, y_inv = ctx.saved_tensors
        grad_x = grad_z * y_inv if ctx.needs_input_grad[0] else None
        grad_y = -grad_z * x * y_inv * y_inv if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class QuotientLogFixed(torch.autograd.Function):
    """Log-differentiation done right: ln|z| = ln|x| - ln|y|, so dz/dx = z/x and dz/dy = -z/y.
    Right for x != 0; NaN (0/0) in grad_x at x = 0."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x / y

    @staticmethod
    def backward(ctx, grad_z):
        x, y = ctx.saved_tensors
        z = x / y
        grad_x = grad_z * (z / x) if ctx.needs_input_grad[0] else None
        grad_y = -grad_z * (z / y) if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class QuotientGuarded(torch.autograd.Function):
    """Quotient rule that stays right at x = 0 and for |x|, |y| ~ 1e-30 or 1e30 in float32.

    grad_y = -g*x/y**2 is computed as -(g/y) * z: both factors are quantities the caller already
    meets (the x-gradient and the output), so it under/overflows only where they do, never
    through y**2. The one inf*0 left, g/y = inf at z = 0 (x = 0, tiny y), is set to the exact 0.
    Saves y and the output z, as many tensors as quotient_basic."""

    @staticmethod
    def forward(ctx, x, y):
        z = x / y
        ctx.save_for_backward(y, z)
        return z

    @staticmethod
    def backward(ctx, grad_z):
        y, z = ctx.saved_tensors
        grad_x_full = grad_z / y
        grad_y = None
        if ctx.needs_input_grad[1]:
            grad_y = (-grad_x_full * z).masked_fill_(z == 0, 0.0)
        return (grad_x_full if ctx.needs_input_grad[0] else None), grad_y


product_basic = ProductBasic.apply
product_log = ProductLog.apply
product_optimized = ProductOptimized.apply
product_log_fixed = ProductLogFixed.apply
quotient_basic = QuotientBasic.apply
quotient_log = QuotientLog.apply
quotient_optimized = QuotientOptimized.apply
quotient_log_fixed = QuotientLogFixed.apply
quotient_guarded = QuotientGuarded.apply

# name -> (fn(x, y) -> z, published in article 000, op)
VARIANTS: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], bool, str]] = {
    "product_autograd": (torch.mul, False, "product"),
    "product_basic": (product_basic, True, "product"),
    "product_log": (product_log, True, "product"),
    "product_optimized": (product_optimized, True, "product"),
    "product_log_fixed": (product_log_fixed, False, "product"),
    "quotient_autograd": (torch.div, False, "quotient"),
    "quotient_basic": (quotient_basic, True, "quotient"),
    "quotient_log": (quotient_log, True, "quotient"),
    "quotient_optimized": (quotient_optimized, True, "quotient"),
    "quotient_log_fixed": (quotient_log_fixed, False, "quotient"),
    "quotient_guarded": (quotient_guarded, False, "quotient"),
}


def exact_grads(op: str, x: Tensor, y: Tensor, grad_z: Tensor) -> tuple[Tensor, Tensor]:
    """The true (grad_x, grad_y) of `op`, evaluated in float64 from the given values."""
    x, y, g = (t.detach().to(torch.float64) for t in (x, y, grad_z))
    if op == "product":
        return g * y, g * x
    if op == "quotient":
        return g / y, -g * x / (y * y)
    raise ValueError(f"unknown op {op!r}; allowed: product, quotient")


def max_rel_error(got: Tensor, exact: Tensor) -> float:
    """Largest elementwise |got - exact| / |exact| (0 where both are 0, inf where only exact is);
    NaN if got holds a NaN, inf if got is inf where exact is finite."""
    got, exact = got.detach().to(torch.float64), exact.to(torch.float64)
    if bool(got.isnan().any()):
        return math.nan
    diff = (got - exact).abs()
    both_zero = (got == exact) & (exact == 0)
    rel = torch.where(both_zero, torch.zeros_like(diff), diff / exact.abs())
    return float(rel.max()) if rel.numel() else 0.0


def random_operands(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> tuple[Tensor, Tensor]:
    """x, y with |.| in [0.1, 10] but |log|.|| >= 0.2 (away from 0 and +-1), random signs."""

    def one() -> Tensor:
        mag = torch.empty(shape, dtype=torch.float64).uniform_(
            0.2, math.log(10), generator=generator
        )
        sign = torch.randint(0, 2, shape, generator=generator) * 2 - 1
        flip = torch.randint(0, 2, shape, generator=generator) * 2 - 1  # |.| below or above 1
        return (sign * torch.exp(flip * mag)).to(dtype)

    return one(), one()


def edge_operands(
    point: str, shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """x, y at one of EDGE_POINTS: "0" sets x = 0 (y stays random: y = 0 is the quotient's pole);
    "1e-30" / "1e30" scale both random operands by that, so x*y under/overflows float32 (and
    y**2 does, for the quotient) while every true gradient stays representable."""
    x, y = random_operands(shape, generator, torch.float64)
    if point == "0":
        return torch.zeros(shape, dtype=dtype), y.to(dtype)
    if point in ("1e-30", "1e30"):
        scale = float(point)
        return (x * scale).to(dtype), (y * scale).to(dtype)
    raise ValueError(f"unknown edge point {point!r}; allowed: {', '.join(EDGE_POINTS)}")


def gradcheck_passes(
    fn: Callable[[Tensor, Tensor], Tensor], x: Tensor, y: Tensor, point: str | None = None
) -> bool:
    """torch.autograd.gradcheck verdict of fn at float64 (x, y), without raising.

    At random points (point None) and at "0": gradcheck's defaults (eps 1e-6, atol 1e-5, rtol
    1e-3). At "1e-30" / "1e30" those defaults are blind (atol 1e-5 passes any gradient of size
    1e-30; a step of 1e-6 vanishes next to 1e30), so the step is scaled, eps = 1e-6 * 1e(+-30),
    and the test is purely relative, atol = 0, rtol = 1e-3."""
    x, y = (t.detach().to(torch.float64).requires_grad_() for t in (x, y))
    if point in (None, "0"):
        return torch.autograd.gradcheck(fn, (x, y), raise_exception=False)
    eps = 1e-6 * float(point)
    return torch.autograd.gradcheck(fn, (x, y), eps=eps, atol=0.0, raise_exception=False)
