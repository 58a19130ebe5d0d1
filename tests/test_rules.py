"""Article 000's product/quotient Functions: gradcheck, edge points, agreement with check.py."""

from __future__ import annotations

import pytest
import torch

from gradlab.check import check_function
from gradlab.studies import rules

PUBLISHED = [name for name, (_, published, _) in rules.VARIANTS.items() if published]
WRONG_EVERYWHERE = {"product_log", "quotient_log"}
# float64 gradcheck failures at the edge points (scaled step, relative test; see gradcheck_passes)
EDGE_FAILS = {
    ("product_log", "0"),
    ("product_log", "1e-30"),
    ("product_log", "1e30"),
    ("product_optimized", "0"),  # z/x = 0/0 = NaN
    ("product_log_fixed", "0"),
    ("quotient_log", "0"),
    ("quotient_log", "1e-30"),
    ("quotient_log", "1e30"),
    ("quotient_log_fixed", "0"),
}
# float32 gradients off the exact ones at the edge points (float64 reaches neither extreme)
FLOAT32_EDGE_FAILS = EDGE_FAILS | {
    ("product_optimized", "1e-30"),  # z = x*y underflows to 0: gradient 0 instead of y
    ("product_optimized", "1e30"),  # z overflows: gradient inf
    ("product_log_fixed", "1e-30"),
    ("product_log_fixed", "1e30"),
    ("quotient_basic", "1e-30"),  # y**2 underflows: -inf
    ("quotient_basic", "1e30"),  # y**2 overflows: -0
}
SHAPE = (8,)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_published_six_and_variant_table():
    assert PUBLISHED == [
        "product_basic",
        "product_log",
        "product_optimized",
        "quotient_basic",
        "quotient_log",
        "quotient_optimized",
    ]
    assert {op for _, _, op in rules.VARIANTS.values()} == {"product", "quotient"}


@pytest.mark.parametrize("name", list(rules.VARIANTS))
def test_forward_is_the_product_or_quotient(name):
    fn, _, op = rules.VARIANTS[name]
    x, y = rules.random_operands(SHAPE, _gen())
    expected = x * y if op == "product" else x / y
    torch.testing.assert_close(fn(x, y), expected, rtol=1e-15, atol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(rules.VARIANTS))
def test_gradcheck_at_random_points(name, seed):
    fn = rules.VARIANTS[name][0]
    x, y = rules.random_operands(SHAPE, _gen(seed))
    assert rules.gradcheck_passes(fn, x, y) is (name not in WRONG_EVERYWHERE)


@pytest.mark.parametrize("name", sorted(WRONG_EVERYWHERE))
def test_log_variants_are_right_only_at_unit_magnitude(name):
    fn = rules.VARIANTS[name][0]
    x = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    y = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    assert rules.gradcheck_passes(fn, x, y)


@pytest.mark.parametrize("point", rules.EDGE_POINTS)
@pytest.mark.parametrize("name", list(rules.VARIANTS))
def test_gradcheck_at_edge_points(name, point):
    fn = rules.VARIANTS[name][0]
    x, y = rules.edge_operands(point, SHAPE, _gen(), torch.float64)
    assert rules.gradcheck_passes(fn, x, y, point) is ((name, point) not in EDGE_FAILS)


@pytest.mark.parametrize("point", rules.EDGE_POINTS)
@pytest.mark.parametrize("name", list(rules.VARIANTS))
def test_float32_gradient_at_edge_points(name, point):
    fn, _, op = rules.VARIANTS[name]
    gen = _gen()
    x, y = (t.requires_grad_() for t in rules.edge_operands(point, SHAPE, gen, torch.float32))
    g = torch.randn(SHAPE, generator=gen)
    grads = torch.autograd.grad(fn(x, y), (x, y), g)
    errs = [rules.max_rel_error(a, b) for a, b in zip(grads, rules.exact_grads(op, x, y, g))]
    ok = all(e <= 1e-6 for e in errs)  # float32: a few roundings, ~1e-7
    assert ok is ((name, point) not in FLOAT32_EDGE_FAILS), errs


@pytest.mark.parametrize(
    "name", [n for n, (_, _, op) in rules.VARIANTS.items() if op == "quotient"]
)
def test_quotient_grad_y_at_zero_over_subnormal_y(name):
    """x = 0, |y| <= 1e-30 in float32: g/y and 1/y overflow, so x/y**2 and x*yinv*yinv are 0*inf."""
    fn = rules.VARIANTS[name][0]
    x = torch.zeros(3, requires_grad=True)
    y = torch.tensor([1e-39, -1e-40, 1e-30], requires_grad=True)
    _, grad_y = torch.autograd.grad(fn(x, y), (x, y), torch.ones(3))
    nan_expected = name in {"quotient_basic", "quotient_log", "quotient_optimized"}
    assert bool(grad_y.isnan().any()) is nan_expected
    if not nan_expected:
        assert torch.equal(grad_y, torch.zeros(3))


@pytest.mark.parametrize("name", list(rules.VARIANTS))
def test_gradient_of_one_input_only(name):
    """needs_input_grad: with y a constant, the x-gradient alone is still the (variant's) one."""
    fn, _, op = rules.VARIANTS[name]
    x, y = rules.random_operands(SHAPE, _gen())
    x.requires_grad_()
    g = torch.randn(SHAPE, generator=_gen(1), dtype=torch.float64)
    (gx,) = torch.autograd.grad(fn(x, y), (x,), g)
    exact = rules.exact_grads(op, x, y, g)[0]
    assert (rules.max_rel_error(gx, exact) <= 1e-12) is (name not in WRONG_EVERYWHERE)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", PUBLISHED)
def test_check_function_agrees_with_gradcheck(name, seed):
    fn = rules.VARIANTS[name][0]
    x, y = rules.random_operands(SHAPE, _gen(seed))
    result = check_function(fn, [x, y], mode="full")
    assert result.passed is rules.gradcheck_passes(fn, x, y)
    assert result.passed is (name not in WRONG_EVERYWHERE)


class _OptimizedProductAsPublished(torch.autograd.Function):
    """Article 000's "optimized" product, verbatim (reshape and all)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.mark_dirty(x, y)
        ctx.x_shape = x.shape
        ctx.y_shape = y.shape
        result = x * y
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        grad_x = grad_output * (result / x)  # noqa: F821 -- x was never saved: as published
        grad_y = grad_output * (result / y)  # noqa: F821
        return grad_x.reshape(ctx.x_shape), grad_y.reshape(ctx.y_shape)


def test_published_optimized_product_does_not_run_as_written():
    x, y = (t.requires_grad_() for t in rules.random_operands(SHAPE, _gen()))
    with pytest.raises(RuntimeError, match="marked as dirty"):
        _OptimizedProductAsPublished.apply(x.clone(), y.clone())
