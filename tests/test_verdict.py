"""The verdict of a training step (gradlab.check.Checker): the math judged in float64, the
precision of the run's dtype judged apart, the fallbacks, the sampled full check; and the exact
differences it rests on."""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest
import torch

from gradlab import fd
from gradlab.check import MATH_TOL, PRECISION_FACTOR, Checker, CheckSettings
from gradlab.check import directions as dirs
from gradlab.grads import METHODS
from gradlab.models import MLPS as MODELS
from gradlab.models import three_layer_relu
from gradlab.studies.defects import defect

AUTOGRAD = METHODS["autograd"]
# correct float64 gradients meet the exact differences to rounding: far below this
CLEAN = 1e-12


def _setup(model_name, make_batch, dtype):
    model = MODELS[model_name](seed=0, dtype=dtype)
    return (model, *make_batch(model))


def _verdict(method, model, x, y, mode="directional", settings=None, **kw):
    checker = Checker(model, method, AUTOGRAD, settings or CheckSettings())
    checker.reseed(0)
    _, grads = method(model, x, y)
    return checker(mode, x, y, grads, **kw)


@pytest.mark.parametrize("mode", ["directional", "full"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", list(METHODS))
def test_correct_methods_pass_math_and_precision(method, dtype, mode, make_batch):
    for name in MODELS:
        model, x, y = _setup(name, make_batch, dtype)
        v = _verdict(METHODS[method], model, x, y, mode)
        assert v.passed and v.math.tol == MATH_TOL, (name, v)
        assert v.math.rel_err < CLEAN and v.math.kinks == 0, (name, v.math)
        if dtype == torch.float64:
            assert v.basis == "run dtype" and v.precision is None
        else:  # the run gradient against the verified float64 one: float32 rounding only
            assert v.basis == "float64 re-run" and not v.precision.finding, v.precision
            assert v.rel_err == v.precision.rel_err < 1e-4


@pytest.mark.parametrize("mode", ["directional", "full"])
@pytest.mark.parametrize("dtype,size", [(torch.float32, 1e-5), (torch.float64, 1e-8)])
@pytest.mark.parametrize("kind", ["scale", "element", "noise"])
def test_a_small_defect_in_one_tensor_is_a_math_failure_naming_it(
    kind, dtype, size, mode, make_batch
):
    # the goal: a defect of 1e-5 of one tensor's norm in a float32 run, 1e-8 in a float64 run,
    # on the smallest tensor (the output bias, a tiny share of the gradient's norm)
    for name in MODELS:
        model, x, y = _setup(name, make_batch, dtype)
        last = f"layer{len(model.sizes) - 1}.bias"
        v = _verdict(defect(kind, size, last), model, x, y, mode)
        assert not v.passed and v.math.failing_params == [last], (name, v.math)
        assert v.math.rel_err_per_param[last] > 3 * MATH_TOL


@pytest.mark.parametrize("kind", ["bfloat16", "float16"])
def test_a_backward_rounded_below_the_run_dtype_is_a_precision_finding(kind, make_batch):
    model, x, y = _setup("three_layer_relu", make_batch, torch.float32)
    v = _verdict(defect(kind), model, x, y)
    assert v.passed, v.math  # the math is right, judged at that dtype's own level
    assert v.basis == f"float64 re-run (its values are {kind})"
    assert v.precision.finding and v.precision.effective_dtype == kind
    assert v.precision.ratio > PRECISION_FACTOR  # how much worse than float32 itself


def test_naive_float32_differences_are_a_precision_finding(make_batch):
    model, x, y = _setup("two_layer_sigmoid", make_batch, torch.float32)
    v = _verdict(defect("fd_naive"), model, x, y)
    assert v.precision.finding and v.precision.ratio > PRECISION_FACTOR
    assert v.precision.dtype_rel_err is not None  # float32 autograd's error on that batch


def test_a_float64_run_computed_in_float32_is_a_precision_finding(make_batch):
    def in_float32(model, x, y):
        loss, grads = AUTOGRAD(model, x, y)
        return loss, {n: g.float().double() for n, g in grads.items()}

    model, x, y = _setup("three_layer_relu", make_batch, torch.float64)
    v = _verdict(in_float32, model, x, y)
    assert v.passed and v.basis == "run dtype (its values are float32)"
    assert v.precision.finding and v.precision.effective_dtype == "float32"


def test_a_method_that_cannot_run_in_float64_falls_back_and_says_so(make_batch):
    def float32_only(model, x, y):
        if x.dtype != torch.float32:
            raise TypeError("this backward is written for float32")
        return AUTOGRAD(model, x, y)

    model, x, y = _setup("three_layer_relu", make_batch, torch.float32)
    v = _verdict(float32_only, model, x, y)
    assert v.passed and v.precision is None
    assert v.basis.startswith("run dtype (the method cannot run in float64: TypeError")
    assert v.math.tol > MATH_TOL  # judged at what float32 achieves on the batch
    wrong = _verdict(defect("scale", 0.1), model, x, y)  # a real bug still fails there
    assert not wrong.passed


def test_a_sampled_full_check_covers_every_tensor(make_batch):
    model = three_layer_relu(hidden=64, seed=0)
    x, y = make_batch(model)
    v = _verdict(AUTOGRAD, model, x, y, "full", budget_s=0.0)
    assert 0 < v.math.coverage < 1 and v.passed
    assert set(v.math.rel_err_per_param) == {n for n, _ in model.named_parameters()}
    calls = []
    complete = _verdict(AUTOGRAD, model, x, y, "full", progress=lambda *a: calls.append(a))
    assert complete.math.coverage == 1.0 and calls[-1][0] == calls[-1][1] > 0


def test_rank1_projections_equal_the_dense_directions(make_batch):
    model, x, y = _setup("three_layer_relu", make_batch, torch.float64)
    point = fd.evaluation_point(model, x, y, torch.float64)
    g = torch.randn(point.theta.numel(), dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    for d in (dirs.global_directions(point, 4, gen), dirs.tensor_directions(point, 4, gen)):
        dense = _dense(d, point)
        torch.testing.assert_close(d.project(g), dense @ g, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(dense.norm(dim=1), torch.ones(len(dense), dtype=torch.float64))


def _dense(d: dirs.Directions, point) -> torch.Tensor:
    rows = []
    for group in d.groups:
        block = torch.zeros(len(group), point.theta.numel(), dtype=torch.float64)
        for j, (weight, t) in enumerate(group.layers, start=group.start):
            if weight is not None:
                (u, v), (a, b) = weight, point.spans[j]
                block[:, a : b - t.shape[1]] = (u.unsqueeze(2) * v.unsqueeze(1)).flatten(1)
                block[:, b - t.shape[1] : b] = t
        rows.append(block * group.scale)
    return torch.cat(rows)


@pytest.mark.parametrize("model_name", list(MODELS))
def test_exact_differences_meet_autograd_to_rounding(model_name, make_batch):
    # the reference is exact to rounding at the default step: no subtraction of two losses
    model, x, y = _setup(model_name, make_batch, torch.float64)
    point = fd.evaluation_point(model, x, y, torch.float64)
    _, g = AUTOGRAD(model, x, y)
    g = torch.cat([t.reshape(-1) for t in g.values()])
    d = dirs.global_directions(point, 8, torch.Generator().manual_seed(1))
    h = fd.default_h(torch.float64)
    values, kinked = fd.factor_differences(point, d.scaled(h)[0])
    assert not bool(kinked.any())
    assert float(((values / h - d.project(g)).abs() / d.project(g).abs()).max()) < CLEAN
    coords = torch.cat([v for v, _, _ in fd.coordinate_fd(point, fd.default_steps(point.theta))])
    assert float((coords - g).norm() / g.norm()) < CLEAN


def test_a_nan_in_one_tensor_fails_that_tensor_only(make_batch):
    def nan_bias(model, x, y):
        loss, grads = AUTOGRAD(model, x, y)
        grads["layer2.bias"] = torch.full_like(grads["layer2.bias"], math.nan)
        return loss, grads

    model, x, y = _setup("three_layer_relu", make_batch, torch.float64)
    v = _verdict(nan_bias, model, x, y)
    assert not v.passed and v.math.failing_params == ["layer2.bias"]
    assert v.math.rel_err_per_param["layer2.bias"] == math.inf


@pytest.mark.slow
def test_a_slice_of_the_false_alarm_soak():
    # experiments/verdict/soak.py, shortened: every model, optimizer and dtype, two methods
    soak = runpy.run_path(str(Path(__file__).resolve().parents[1] / "experiments/verdict/soak.py"))
    result = soak["main"](["--steps", "12", "--long-steps", "60", "--seeds", "0",
                           "--methods", "manual", "tape", "--no-write"])  # fmt: skip
    runs = result["runs"]
    assert len(runs) == 2 * 2 * 3 * 2 + 2 * 2 * 2 + 2 * 2  # grid, long (adam), kinks (relu sgd)
    assert all(r["status"] == "completed" and r["checks"] > 0 for r in runs)
    assert sum(r["math_failures"] for r in runs) == 0
    assert sum(r["precision_findings"] for r in runs) == 0
    assert sum(r["kinks"] for r in runs if r["group"] == "kinks") > 0
