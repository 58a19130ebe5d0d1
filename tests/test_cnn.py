"""DigitsCNN's gradient methods against autograd (float64 and float32), gradcheck of every custom
Function in function_cnn, deterministic init, and training on sklearn's digits (slow)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from gradlab.grads import function_cnn, manual_cnn
from gradlab.grads.function import linear, relu
from gradlab.losses import cross_entropy_loss
from gradlab.models.cnn import DigitsCNN, digits_cnn

F64 = torch.float64
METHODS = {"manual": manual_cnn.gradient, "function": function_cnn.gradient}
NAMES = ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]
# Exact methods in float64 sum the same products in another order (batch x pixels <= 64 * 37
# terms per conv gradient element): rounding ~sqrt(n) * eps ~ 1e-14 of the terms' magnitude, so
# rtol 1e-12 is ~100x loose and still ~1e10x tighter than a real bug; atol 1e-14 for elements
# that cancel to ~0 (the gradients here are ~1e-3..1).
EXACT_TOL = {"rtol": 1e-12, "atol": 1e-14}
# float32: eps = 1.2e-7 and n ~ 4e3 summands (batch 64 x 64 pixels) give ~sqrt(n) * eps ~ 1e-5
# relative, so rtol 1e-4 leaves 10x; atol 1e-6 as the MLPs' float32 test.
FLOAT32_TOL = {"rtol": 1e-4, "atol": 1e-6}


def autograd_gradient(model, x, labels):
    """The reference: torch.autograd.grad of the loss by definition."""
    names, params = zip(*model.named_parameters())
    loss = cross_entropy_loss(model(x), labels)
    return loss.detach(), dict(zip(names, torch.autograd.grad(loss, params)))


def _batch(n: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x (n, 1, 8, 8) drawn in float64 and cast, labels int64 (n,) in 0..9."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=gen, dtype=F64)
    return x.to(dtype), torch.randint(0, 10, (n,), generator=gen)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("batch,channels", list(itertools.product([1, 37], [1, 8])))
def test_method_equals_autograd_float64(method, batch, channels):
    model = DigitsCNN(channels, seed=1, dtype=F64)
    x, labels = _batch(batch, F64)
    loss_ref, ref = autograd_gradient(model, x, labels)
    loss, grads = METHODS[method](model, x, labels)
    assert list(grads) == NAMES  # every parameter, in parameter order
    assert loss.shape == () and not loss.requires_grad
    assert_close(loss, loss_ref, rtol=1e-13, atol=0)
    for name, g in grads.items():
        assert g.shape == ref[name].shape and g.dtype == F64, name
        assert_close(g, ref[name], **EXACT_TOL, msg=lambda m, p=name: f"{method} {p}: {m}")


@pytest.mark.parametrize("method", list(METHODS))
def test_method_equals_autograd_float32(method):
    model = digits_cnn(seed=0)
    x, labels = _batch(64, torch.float32)
    loss_ref, ref = autograd_gradient(model, x, labels)
    loss, grads = METHODS[method](model, x, labels)
    assert_close(loss, loss_ref, rtol=1e-6, atol=0)
    for name, g in grads.items():
        assert g.dtype == torch.float32, name
        assert_close(g, ref[name], **FLOAT32_TOL, msg=lambda m, p=name: f"{method} {p}: {m}")


@pytest.mark.parametrize("batch", [1, 5])
def test_im2col_equals_unfold(batch):
    x, _ = _batch(batch, F64)
    cols = F.unfold(x, 3, padding=1)  # (B, 9, 64)
    assert torch.equal(manual_cnn.im2col(x), cols.permute(1, 2, 0).reshape(9, 64 * batch))
    for shape, kernel, padding in [((batch, 1, 8, 8), 3, 1), ((batch, 2, 5, 4), 3, 0)]:
        y = torch.randn(shape, dtype=F64)
        assert torch.equal(
            function_cnn.unfold(y, kernel, padding), F.unfold(y, kernel, padding=padding)
        )


def test_cross_entropy_convention():
    logits, labels = torch.randn(7, 10, dtype=F64), torch.randint(0, 10, (7,))
    assert_close(cross_entropy_loss(logits, labels), F.cross_entropy(logits, labels))
    by_hand = (logits.logsumexp(1) - logits[torch.arange(7), labels]).mean()
    assert_close(cross_entropy_loss(logits, labels), by_hand, rtol=1e-14, atol=0)


def test_init_is_deterministic_and_dtype_independent():
    a, b, c = DigitsCNN(seed=3), digits_cnn(seed=3), DigitsCNN(seed=4)
    d64 = DigitsCNN(seed=3, dtype=F64)
    shapes = {
        "conv.weight": (8, 1, 3, 3),
        "conv.bias": (8,),
        "fc.weight": (10, 128),
        "fc.bias": (10,),
    }
    assert {n: tuple(p.shape) for n, p in a.named_parameters()} == shapes
    for (name, p), q, r, p64 in zip(
        a.named_parameters(), b.parameters(), c.parameters(), d64.parameters()
    ):
        assert torch.equal(p, q), name
        assert not torch.equal(p, r), name
        assert torch.equal(p, p64.to(torch.float32)), name  # drawn in float64, then cast
        fan_in = 9 if name.startswith("conv") else 128
        assert p64.abs().max() <= 1 / math.sqrt(fan_in), name  # U(-1/sqrt(fan_in), 1/sqrt(fan_in))


def test_pooling_rejects_windows_that_do_not_tile():
    with pytest.raises(ValueError, match="do not tile"):
        function_cnn.avg_pool2d(torch.randn(1, 1, 5, 4), 2)


def test_gradcheck_of_the_whole_chain():
    # the Functions chained as function_cnn.gradient does, the input x checked too (the conv's
    # fold path); gradcheck's step of 1e-6 moves a pre-activation by < 1e-4, so every one must be
    # farther than that from the ReLU's kink
    model = DigitsCNN(2, seed=0, dtype=F64)
    x, labels = _batch(3, F64)
    with torch.no_grad():
        assert model.conv(x).abs().min() > 1e-4, "too close to a ReLU kink: pick another seed"

    def net(x, conv_w, conv_b, fc_w, fc_b):
        h = function_cnn.avg_pool2d(relu(function_cnn.conv2d(x, conv_w, conv_b, 1)), 2)
        return function_cnn.cross_entropy(linear(h.flatten(1), fc_w, fc_b), labels)

    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    assert torch.autograd.gradcheck(net, (x.requires_grad_(), *params))
