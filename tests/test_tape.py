"""The tape (gradlab.grads.tape) against torch autograd in float64: each op, reuse,
broadcasting, MLPs."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gradlab.grads import METHODS
from gradlab.grads.tape import Tape, unbroadcast
from gradlab.losses import mse_loss
from gradlab.models import MLP

autograd = METHODS["autograd"]

F64 = torch.float64


def rand(*shape, seed=0):
    return torch.randn(shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


# (name, tape op, torch op, input shapes): each primitive, with its broadcasting cases.
OPS = [
    ("add", Tape.add, torch.add, [(5, 3), (5, 3)]),
    ("add bias", Tape.add, torch.add, [(5, 3), (3,)]),
    ("add column", Tape.add, torch.add, [(5, 1), (5, 3)]),
    ("mul", Tape.mul, torch.mul, [(5, 3), (5, 3)]),
    ("mul broadcast", Tape.mul, torch.mul, [(1, 3), (4, 5, 3)]),
    ("matmul", Tape.matmul, torch.mm, [(5, 4), (4, 3)]),
    ("transpose", Tape.transpose, torch.t, [(5, 3)]),
    ("relu", Tape.relu, torch.relu, [(6, 4)]),
    ("sigmoid", Tape.sigmoid, torch.sigmoid, [(6, 4)]),
    ("mse", Tape.mse, mse_loss, [(6, 2), (6, 2)]),
]


@pytest.mark.parametrize("name, op, torch_op, shapes", OPS, ids=[o[0] for o in OPS])
def test_op_value_and_backward_match_autograd(name, op, torch_op, shapes):
    values = [rand(*s, seed=i) for i, s in enumerate(shapes)]
    t = Tape()
    leaves = [t.leaf(v) for v in values]
    out = op(t, *leaves)
    grad_out = rand(*out.shape, seed=99)  # a random cotangent, not just ones
    grads = t.gradients(out, leaves, grad_out)

    ref_in = [v.clone().requires_grad_() for v in values]
    ref_out = torch_op(*ref_in)
    ref_grads = torch.autograd.grad(ref_out, ref_in, grad_out)
    assert_close(out.value, ref_out.detach(), rtol=0, atol=0)
    for g, ref in zip(grads, ref_grads):
        assert g.shape == ref.shape
        assert_close(g, ref)


def test_reused_input_accumulates():
    # y = x*x + x: dy/dx = 2x + 1. x feeds three uses, across two ops.
    t = Tape()
    x_value = rand(4, seed=1)
    x = t.leaf(x_value)
    y = x * x + x
    (g,) = t.gradients(y, [x], torch.ones(4, dtype=F64))
    assert_close(g, 2 * x_value + 1)


def test_add_gives_both_inputs_independent_gradients():
    # The article's sketch: a = x*y; b = a + y; out = b*x. add hands g to both a and y; summing
    # into y's gradient in place would corrupt a's. Expected: d/dx = 2xy + y, d/dy = x^2 + x.
    t = Tape()
    xv, yv = torch.tensor(2.0, dtype=F64), torch.tensor(3.0, dtype=F64)
    x, y = t.leaf(xv), t.leaf(yv)
    out = (x * y + y) * x
    gx, gy = t.gradients(out, [x, y])
    assert_close(gx, 2 * xv * yv + yv)
    assert_close(gy, xv * xv + xv)


def test_unused_input_and_dead_branch():
    t = Tape()
    a, b = t.leaf(rand(3, seed=1)), t.leaf(rand(3, seed=2))
    dead = t.sigmoid(b)  # recorded, but never reaches out
    out = a * a
    ga, gb, gdead = t.gradients(out, [a, b, dead], torch.ones(3, dtype=F64))
    assert_close(ga, 2 * a.value)
    assert_close(gb, torch.zeros(3, dtype=F64))
    assert_close(gdead, torch.zeros(3, dtype=F64))


def test_constants_are_not_recorded():
    t = Tape()
    x, c = t.leaf(rand(2, 3), requires_grad=False), t.leaf(rand(3, 4, seed=1), requires_grad=False)
    w = t.leaf(rand(4, 2, seed=2))
    h = x @ c  # constants only: no record, no gradient
    assert not h.requires_grad and t.records == []
    out = h @ w
    assert out.requires_grad and len(t.records) == 1


def test_vars_of_another_tape_are_refused():
    a, b = Tape().leaf(rand(3)), Tape().leaf(rand(3))
    with pytest.raises(ValueError, match="on the tape that records it"):
        a + b


def test_non_scalar_output_needs_a_seed():
    t = Tape()
    x = t.leaf(rand(3))
    with pytest.raises(ValueError, match="grad_out is required"):
        t.gradients(x * x, [x])


def test_unbroadcast_sums_over_stretched_dims():
    g = rand(4, 5, 3)
    assert_close(unbroadcast(g, torch.Size([3])), g.sum((0, 1)))
    assert_close(unbroadcast(g, torch.Size([5, 1])), g.sum(0).sum(1, keepdim=True))
    assert unbroadcast(g, g.shape) is g


@pytest.mark.parametrize(
    "sizes, activation", [([2, 4, 1], "sigmoid"), ([4, 16, 16, 1], "relu"), ([3, 5, 2], "relu")]
)
@pytest.mark.parametrize("batch", [1, 7, 100])
def test_tape_method_equals_autograd(sizes, activation, batch):
    model = MLP(sizes, activation, seed=3, dtype=F64)
    x, y = rand(batch, sizes[0], seed=4), rand(batch, sizes[-1], seed=5)
    loss, grads = METHODS["tape"](model, x, y)
    ref_loss, ref_grads = autograd(model, x, y)
    assert_close(loss, ref_loss)
    assert list(grads) == list(ref_grads)
    for name, ref in ref_grads.items():
        assert grads[name].shape == ref.shape, name
        assert_close(grads[name], ref, msg=name)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("sizes, activation", [([2, 4, 1], "sigmoid"), ([4, 16, 16, 1], "relu")])
def test_tape_method_equals_autograd_on_cuda(sizes, activation):
    model = MLP(sizes, activation, seed=3, dtype=F64, device="cuda")
    x, y = rand(100, sizes[0], seed=4).cuda(), rand(100, sizes[-1], seed=5).cuda()
    loss, grads = METHODS["tape"](model, x, y)
    ref_loss, ref_grads = autograd(model, x, y)
    assert_close(loss, ref_loss)
    for name, ref in ref_grads.items():
        assert_close(grads[name], ref, msg=name)


def test_tape_method_leaves_torch_autograd_alone():
    model = MLP([4, 16, 16, 1], "relu", dtype=F64)
    loss, grads = METHODS["tape"](model, rand(10, 4), rand(10, 1, seed=1))
    assert loss.grad_fn is None and all(g.grad_fn is None for g in grads.values())
    assert all(p.grad is None for p in model.parameters())
