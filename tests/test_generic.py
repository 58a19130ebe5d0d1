"""The checker on any nn.Module (plain differences through torch.func): a correct gradient
passes, a planted defect and a user's wrong autograd.Function are caught, the generic numerical
method equals autograd, and on an MLP the generic reference agrees with the exact one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradlab.check import Checker, CheckSettings
from gradlab.fd import generic
from gradlab.grads import METHODS
from gradlab.models import three_layer_relu

F64 = torch.float64
autograd = METHODS["autograd"]


class TinyConv(nn.Module):
    """conv -> ReLU -> linear over 1x6x6 inputs, with integer labels: not an MLP."""

    def __init__(self, backward_scale: float = 1.0):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = nn.Conv2d(1, 3, 3), nn.Linear(3 * 4 * 4, 4)
        self.backward_scale = backward_scale

    def forward(self, x):
        z = self.conv(x.view(-1, 1, 6, 6))
        a = ScaledReLU.apply(z, self.backward_scale) if self.backward_scale != 1.0 else z.relu()
        return self.fc(a.flatten(1))


class ScaledReLU(torch.autograd.Function):
    """A user's ReLU whose backward is off by a factor: what the checker must catch through
    grad=autograd."""

    @staticmethod
    def forward(ctx, z, scale):
        ctx.save_for_backward(z)
        ctx.scale = scale
        return z.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * (z > 0) * ctx.scale, None


def _batch(dtype):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(16, 36, generator=generator).to(dtype)
    return x, torch.randint(0, 4, (16,), generator=generator)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("mode", ["directional", "full"])
def test_correct_gradient_of_any_module_passes(dtype, mode):
    model = TinyConv().to(dtype)
    x, y = _batch(dtype)
    _, grads = autograd(model, x, y)
    verdict = Checker(model, autograd, autograd, CheckSettings())(mode, x, y, grads)
    assert verdict.passed, verdict.math
    assert verdict.math.rel_err < 1e-7
    if dtype == torch.float32:  # autograd in float32: within its own dtype's error
        assert verdict.precision is not None and not verdict.precision.finding


def test_planted_defect_in_any_module_is_caught_and_named():
    model = TinyConv().to(F64)
    x, y = _batch(F64)

    def wrong(model, x, y):
        loss, grads = autograd(model, x, y)
        return loss, {**grads, "fc.bias": grads["fc.bias"] * (1 + 1e-4)}

    _, grads = wrong(model, x, y)
    verdict = Checker(model, wrong, autograd, CheckSettings())("directional", x, y, grads)
    assert not verdict.passed
    assert verdict.math.failing_params == ["fc.bias"]


def test_a_users_wrong_function_inside_the_model_is_caught_through_autograd():
    model = TinyConv(backward_scale=1.001).to(F64)
    x, y = _batch(F64)
    _, grads = autograd(model, x, y)
    verdict = Checker(model, autograd, autograd, CheckSettings())("directional", x, y, grads)
    assert not verdict.passed
    assert "conv.weight" in verdict.math.failing_params


def test_numerical_of_any_module_equals_autograd_in_float64():
    model = TinyConv().to(F64)
    x, y = _batch(F64)
    loss_ref, ref = autograd(model, x, y)
    loss, grads = METHODS["numerical"](model, x, y)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-13, atol=0)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref[name], rtol=1e-6, atol=1e-8)


def test_the_generic_reference_agrees_with_the_exact_one_on_an_mlp():
    model = three_layer_relu(seed=0, dtype=F64)
    x = torch.randn(32, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    y = torch.randn(32, 1, dtype=F64, generator=torch.Generator().manual_seed(3))
    _, grads = autograd(model, x, y)
    checker = Checker(model, autograd, autograd, CheckSettings())
    exact = checker("full", x, y, grads)
    checker.generic = True
    plain = checker("full", x, y, grads)
    assert exact.passed and plain.passed
    assert exact.math.tol == 1e-9 < plain.math.tol  # plain differences: their own floor
    assert plain.math.rel_err < 1e-7


def test_an_unvmappable_module_falls_back_to_one_set_at_a_time():
    class Opaque(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor([0.5, -0.25], dtype=F64))

        def forward(self, x):
            if float(self.w.detach().sum()) > 10:  # data-dependent control flow: vmap cannot run it
                return x
            return x * self.w

    x, y = torch.randn(8, 2, dtype=F64), torch.randn(8, 2, dtype=F64)
    point = generic.generic_point(Opaque(), x, y)
    values, _, excluded, _ = generic.differences(point, torch.eye(2, dtype=F64) * 1e-5)
    assert not point.vmappable and excluded is None
    _, ref = autograd(Opaque(), x, y)
    torch.testing.assert_close(values, ref["w"], rtol=1e-7, atol=1e-10)
