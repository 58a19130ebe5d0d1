"""The finite-difference checker: passes correct gradients, fails planted bugs and names the
tensor, handles ReLU kinks, float32 gradients, h and bad input; its batched differences
against plain forwards of the nn.Module."""

from __future__ import annotations

import math

import pytest
import torch

from gradlab import check, fd
from gradlab.check import DEFAULT_TOL, check_function, check_gradient
from gradlab.grads import METHODS
from gradlab.losses import mse_loss
from gradlab.models import MLP, three_layer_relu
from gradlab.models import MLPS as MODELS
from gradlab.studies import rules

F64 = torch.float64
# "directional": k global directions, escalating to per-tensor ones on a failure or a kink;
# "per_tensor": the directional mode with k directions per tensor on every call
MODES = ["full", "directional", "per_tensor"]
# a correct float64 gradient against the (exact) differences: at rounding level, far below
MAX_REL_ERR = {"two_layer_sigmoid": 1e-7, "three_layer_relu": 1e-6}


@pytest.fixture(params=list(MODELS))
def model_name(request):
    return request.param


def _setup(model_name, make_batch, dtype=F64):
    model = MODELS[model_name](seed=0, dtype=dtype)
    x, y = make_batch(model)
    return model, x, y


def _check(model, x, y, grads, mode, **kw):
    gen = torch.Generator().manual_seed(0)
    if mode == "per_tensor":
        mode, kw = "directional", {**kw, "per_tensor": True}
    return check_gradient(model, x, y, grads, mode=mode, generator=gen, **kw)


def _compared(model, mode: str) -> int:
    """What a check of every tensor compares: each element (full), or k = 4 directions per
    tensor (per_tensor, and a directional check that escalated to it)."""
    if mode == "full":
        return sum(p.numel() for p in model.parameters())
    return 4 * len(list(model.parameters()))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", list(METHODS))
def test_passes_every_correct_method(method, mode, model_name, make_batch):
    model, x, y = _setup(model_name, make_batch)
    _, grads = METHODS[method](model, x, y)
    r = _check(model, x, y, grads, mode)
    assert r.passed and r.tol == DEFAULT_TOL[F64]
    assert r.rel_err < MAX_REL_ERR[model_name], r
    assert r.cos_sim == pytest.approx(1.0, abs=1e-12) and r.failing_params == []
    assert r.kinks == 0 and r.excluded == 0
    if mode == "directional":  # k global directions passed: no per-tensor figures, no escalation
        assert r.rel_err_per_param == {} and r.worst_param == "" and r.n_compared == 4
    else:
        assert list(r.rel_err_per_param) == list(grads)
        assert max(r.rel_err_per_param.values()) < MAX_REL_ERR[model_name], r
        assert r.n_compared == _compared(model, mode)


class _LogLinear(torch.autograd.Function):
    """Article 000's 'log-differentiation' bug planted in a linear layer: the weight gradient
    multiplied by (1 + log(|x| + 1e-8)) of the layer input."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def backward(ctx, grad_z):
        x, weight = ctx.saved_tensors
        grad_w = grad_z.t().mm(x * (1 + torch.log(x.abs() + 1e-8)))
        return grad_z.mm(weight), grad_w, grad_z.sum(0)


def _log_linear_grads(model, x, y):
    names, params = zip(*model.named_parameters())
    a = x
    for i, layer in enumerate(model.layers):
        a = _LogLinear.apply(a, layer.weight, layer.bias)
        if i < len(model.layers) - 1:
            a = torch.sigmoid(a) if model.activation == "sigmoid" else torch.relu(a)
    return dict(zip(names, torch.autograd.grad(mse_loss(a, y), params)))


@pytest.mark.parametrize("mode", MODES)
def test_fails_the_log_factor_bug_on_the_weights_only(mode, model_name, make_batch):
    model, x, y = _setup(model_name, make_batch)
    r = _check(model, x, y, _log_linear_grads(model, x, y), mode)
    assert not r.passed and r.rel_err > 1e-2
    assert r.failing_params == [n for n, _ in model.named_parameters() if n.endswith("weight")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("param", ["layer1.bias", "layer2.bias"])
def test_fails_a_sign_flip_and_names_that_tensor(param, mode, model_name, make_batch):
    model, x, y = _setup(model_name, make_batch)
    _, grads = METHODS["manual"](model, x, y)
    grads[param] = -grads[param]
    r = _check(model, x, y, grads, mode)
    assert not r.passed
    assert r.failing_params == [param] and r.worst_param == param


def test_a_small_tensor_slightly_wrong_is_not_lost_in_the_global_directions(
    make_batch, monkeypatch
):
    # two_layer_sigmoid's layer1.bias holds a few % of the gradient's norm: 1e-5 off (10x the
    # float64 tolerance) it barely moves the global error, so the global stage only passes a
    # gradient clearly below tol and leaves the rest to the per-tensor directions
    model, x, y = _setup("two_layer_sigmoid", make_batch)
    _, grads = METHODS["autograd"](model, x, y)
    grads["layer1.bias"] = grads["layer1.bias"] * (1 + 1e-5)
    seeds = range(10)

    def verdicts() -> list[bool]:
        return [
            check_gradient(model, x, y, grads, generator=torch.Generator().manual_seed(seed)).passed
            for seed in seeds
        ]

    results = [
        check_gradient(model, x, y, grads, generator=torch.Generator().manual_seed(seed))
        for seed in seeds
    ]
    assert [r.passed for r in results] == [False] * len(seeds)
    assert all(r.failing_params == ["layer1.bias"] for r in results)
    monkeypatch.setattr(check.gradient, "GLOBAL_MARGIN", 1.0)  # a global check judged at tol
    assert any(verdicts())  # ... lets some of them through: what the margin is for


@pytest.mark.parametrize("mode", MODES)
def test_nan_or_zero_gradient_fails_without_an_exception(mode, make_batch):
    model, x, y = _setup("three_layer_relu", make_batch)
    _, grads = METHODS["autograd"](model, x, y)
    nan = dict(grads, **{"layer2.weight": grads["layer2.weight"].clone().fill_(math.nan)})
    r = _check(model, x, y, nan, mode)
    assert not r.passed and r.failing_params == ["layer2.weight"]
    assert r.rel_err == math.inf and r.rel_err_per_param["layer2.weight"] == math.inf
    zero = {name: torch.zeros_like(g) for name, g in grads.items()}
    r = _check(model, x, y, zero, mode)
    assert not r.passed and r.cos_sim == 0.0


def _kinked_relu_net(make_batch):
    """three_layer_relu with hidden unit 3 of layer 1 at pre-activation 1e-12 for sample 0:
    a step of the default size (~1.5e-8, a tenth of it on the kink re-check) on any parameter
    feeding it moves it across 0."""
    model = three_layer_relu(seed=0, dtype=F64)
    x, y = make_batch(model)
    with torch.no_grad():
        z = model.layer1(x)
        model.layer1.bias[3] -= z[0, 3] - 1e-12
        assert abs(float(model.layer1(x)[0, 3]) - 1e-12) < 1e-15
    return model, x, y


@pytest.mark.parametrize("mode", MODES)
def test_relu_kinks_are_counted_rechecked_and_excluded(mode, make_batch):
    model, x, y = _kinked_relu_net(make_batch)
    _, grads = METHODS["autograd"](model, x, y)
    r = _check(model, x, y, grads, mode)
    assert r.kinks > 0 and r.excluded > 0, r
    assert r.passed and r.rel_err < 1e-6, r  # kinked entries are not mismatches
    # every global direction moves layer 1: the directional check escalates to per-tensor
    # directions, and excludes only the rows that still straddle the kink
    assert r.n_compared + r.excluded == _compared(model, mode)


def test_the_kink_is_real(make_batch):
    # the numerical method's central difference at layer1.bias[3] straddles the kink: it is
    # off by about half of sample 0's share, which is what the checker must not count
    model, x, y = _kinked_relu_net(make_batch)
    _, exact = METHODS["autograd"](model, x, y)
    _, straddled = METHODS["numerical"](model, x, y)
    off = (straddled["layer1.bias"][3] - exact["layer1.bias"][3]).abs()
    assert off > 1e-4 * exact["layer1.bias"].norm()


@pytest.mark.parametrize("mode", MODES)
def test_float32_gradients_are_checked_in_float64(mode, model_name, make_batch):
    model, x, y = _setup(model_name, make_batch, dtype=torch.float32)
    _, grads = METHODS["autograd"](model, x, y)
    r = _check(model, x, y, grads, mode)
    assert r.passed and r.tol == DEFAULT_TOL[torch.float32]
    # float32 rounding of the gradient only; float32 differences would be off by ~1e-3
    assert r.rel_err < 1e-5, r


def test_h_override_is_used(make_batch):
    model, x, y = _setup("two_layer_sigmoid", make_batch)
    _, grads = METHODS["autograd"](model, x, y)
    assert _check(model, x, y, grads, "full", h=1e-4).passed
    coarse = _check(model, x, y, grads, "full", h=0.5)  # truncation error ~h^2 now shows
    assert not coarse.passed and coarse.rel_err > 1e-3


def test_rejects_bad_arguments(make_batch):
    model, x, y = _setup("three_layer_relu", make_batch)
    _, grads = METHODS["autograd"](model, x, y)
    with pytest.raises(ValueError, match="unknown check mode 'exact'"):
        check_gradient(model, x, y, grads, mode="exact")
    with pytest.raises(ValueError, match="missing parameters: layer2.bias"):
        check_gradient(model, x, y, {n: g for n, g in grads.items() if n != "layer2.bias"})
    with pytest.raises(ValueError, match="wrong shape for: layer1.weight"):
        check_gradient(model, x, y, dict(grads, **{"layer1.weight": grads["layer1.weight"].t()}))


@torch.no_grad()
def _loss_at(model: MLP, theta: torch.Tensor, x, y) -> float:
    """The loss of the nn.Module with its parameters set to theta: a plain forward."""
    model = MLP(model.sizes, model.activation, dtype=F64)
    torch.nn.utils.vector_to_parameters(theta, model.parameters())
    return float(mse_loss(model(x), y))


@pytest.mark.parametrize("model_name", ["two_layer_sigmoid", "three_layer_relu"])
def test_batched_differences_equal_plain_forwards(model_name, make_batch):
    model, x, y = _setup(model_name, make_batch)
    point = fd.evaluation_point(model, x, y, F64)
    theta, n = point.theta, point.theta.numel()
    gen = torch.Generator().manual_seed(1)

    def plain(step):
        return (_loss_at(model, theta + step, x, y) - _loss_at(model, theta - step, x, y)) / 2

    # a few coordinates of every layer (the rank-1 path), with a large step to make them count
    for k, (a, b) in enumerate(point.spans):
        h = torch.full((b - a,), 1e-2, dtype=F64)
        rows = torch.tensor(sorted({0, (b - a) // 2, b - a - 1}))
        values, _ = fd.coordinate_differences(point, k, h, rows)
        for row, value in zip(rows.tolist(), values.tolist()):
            step = torch.zeros(n, dtype=F64)
            step[a + row] = 1e-2
            assert value == pytest.approx(plain(step), rel=1e-9, abs=1e-15)
    # dense directions over all layers at once (the batched path)
    steps = 1e-2 * torch.randn(5, n, dtype=F64, generator=gen)
    values, _ = fd.direction_differences(point, steps, max_bytes=1)  # one row per chunk too
    for step, value in zip(steps, values.tolist()):
        assert value == pytest.approx(plain(step), rel=1e-9, abs=1e-15)


class _ProductLog(rules.ProductBasic):  # only grad_x wrong, as the article's factor
    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y * (1 + torch.log(x.abs() + 1e-8)), grad * x


class _ProductRaises(rules.ProductBasic):
    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("saved nothing")


@pytest.mark.parametrize("mode", check.MODES)  # per input: no global directions here
def test_check_function(mode):
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 4, generator=gen), torch.randn(4, generator=gen)  # y broadcasts
    ok = check_function(rules.product_basic, [x, y], mode=mode)
    assert ok.passed and ok.rel_err < 1e-8 and list(ok.rel_err_per_param) == ["input0", "input1"]
    wrong = check_function(_ProductLog.apply, [x, y], mode=mode)
    assert not wrong.passed and wrong.failing_params == ["input0"]
    broken = check_function(_ProductRaises.apply, [x, y], mode=mode)
    assert not broken.passed and broken.rel_err == math.inf and "saved nothing" in broken.error


def _kink_between_dtypes(model, x):
    """Set one layer-1 bias so that float32 computes a pre-activation of exactly <= 0 (ReLU off)
    where float64 has it a hair above 0 (on); returns whether that was possible."""
    w, b = model.layer1.weight.detach(), model.layer1.bias.detach()
    for s in range(x.shape[0]):
        for u in range(w.shape[0]):
            exact = (w[u].double() @ x[s].double()).item()
            trial = b.clone()
            trial[u] = -torch.tensor(exact, dtype=torch.float32)
            for _ in range(5):  # nudge b up ulp by ulp
                z32 = torch.addmm(trial.unsqueeze(0), x, w.t())[s, u].item()
                z64 = (w[u].double() @ x[s].double() + trial[u].double()).item()
                if z32 <= 0 < z64:
                    b.copy_(trial)
                    return True
                trial[u] = torch.nextafter(trial[u], torch.tensor(1.0))
    return False


def test_float32_method_on_the_other_side_of_a_kink_is_not_a_mismatch(make_batch):
    # the float32 gradient there is the other one-sided derivative, legitimately: not a mismatch
    model, x, y = _setup("three_layer_relu", make_batch, dtype=torch.float32)
    x, y = x[:1], y[:1]  # one sample: its side of the kink decides unit u's whole gradient
    if not _kink_between_dtypes(model, x):
        pytest.skip("could not place a kink between float32 and float64 rounding")
    _, grads = METHODS["autograd"](model, x, y)
    for mode in MODES:
        r = _check(model, x, y, grads, mode)
        assert r.passed and r.excluded > 0, r


@pytest.mark.parametrize("make", ["global_directions", "tensor_directions"])
def test_dense_and_rank1_projections_agree(make, monkeypatch):
    from gradlab import fd
    from gradlab.check import directions

    model = three_layer_relu(seed=0, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(20, 4, generator=gen).double(), torch.randn(20, 1, generator=gen).double()
    point = fd.evaluation_point(model, x, y, torch.float64)
    g = torch.randn(point.theta.numel(), generator=gen, dtype=torch.float64)
    dense = getattr(directions, make)(point, 4, torch.Generator().manual_seed(1)).project(g)
    monkeypatch.setattr(directions, "DENSE_MAX", 0)  # the rank-1 products, as for a large net
    rank1 = getattr(directions, make)(point, 4, torch.Generator().manual_seed(1)).project(g)
    torch.testing.assert_close(dense, rank1, rtol=1e-13, atol=1e-15)
