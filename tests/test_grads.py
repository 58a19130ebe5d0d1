"""Every gradient method against autograd in float64, the custom Functions by gradcheck,
deterministic init, resolve(), and the benchmark's JSON schema."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import runpy
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from gradlab.grads import METHODS, resolve
from gradlab.losses import mse_loss
from gradlab.models import MLP, three_layer_relu, two_layer_sigmoid

F64 = torch.float64
# the modules (gradlab.grads exports the methods under the same names)
FUNCTION_MODULES = [
    importlib.import_module(f"gradlab.grads.{m}") for m in ("function", "fused", "function_cnn")
]
# (id, model sizes, activation, batch): the articles' two nets, batch 1, width 1, other sizes
CASES = [
    ("sigmoid-2-4-1", [2, 4, 1], "sigmoid", 100),
    ("relu-4-16-16-1", [4, 16, 16, 1], "relu", 100),
    ("sigmoid-batch1", [2, 4, 1], "sigmoid", 1),
    ("relu-batch1", [4, 16, 16, 1], "relu", 1),
    ("sigmoid-width1", [2, 1, 1], "sigmoid", 100),
    ("relu-width1", [4, 1, 1, 1], "relu", 100),
    ("sigmoid-3-7-2", [3, 7, 2], "sigmoid", 37),
    ("relu-5-9-9-3", [5, 9, 9, 3], "relu", 37),
]
# grad=numerical on an MLP takes the checker's exact differences (gradlab.fd.mlp): in float64
# they meet autograd to rounding, so float64 tolerances with room for the differences' own
# rounding. (Away from ReLU kinks: see _kink_margin.)
NUMERICAL_TOL = {"rtol": 1e-10, "atol": 1e-12}


@torch.no_grad()
def _kink_margin(model: MLP, x: torch.Tensor) -> float:
    """Smallest |pre-activation| of the hidden ReLU layers: a central difference whose step
    moves one of them across 0 straddles a kink, where no method is expected to agree."""
    margin, a = math.inf, x
    for layer in model.layers[:-1]:
        z = layer(a)
        margin, a = min(margin, float(z.abs().min())), torch.relu(z)
    return margin


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def case(request, make_batch):
    _, sizes, activation, n = request.param
    model = MLP(sizes, activation, seed=0, dtype=F64)
    x, y = make_batch(model, n)
    if activation == "relu":  # the FD step moves a pre-activation by ~1e-5 at most
        assert _kink_margin(model, x) > 1e-4, "case too close to a ReLU kink: pick another seed"
    return model, x, y


@pytest.mark.parametrize("name", list(METHODS))
def test_method_equals_autograd_float64(name, case):
    model, x, y = case
    loss_ref, ref = METHODS["autograd"](model, x, y)
    loss, grads = METHODS[name](model, x, y)
    tol = NUMERICAL_TOL if name == "numerical" else {"rtol": 1e-12, "atol": 1e-14}
    assert list(grads) == list(ref)  # every parameter, in parameter order
    assert_close(loss, loss_ref, rtol=1e-13, atol=0)
    for param, g in grads.items():
        assert g.shape == ref[param].shape and g.dtype == F64, param
        assert_close(g, ref[param], **tol, msg=lambda m, p=param: f"{name} {p}: {m}")


@pytest.mark.parametrize("name", list(METHODS))
@pytest.mark.parametrize("sizes,activation", [([3, 7, 4], "sigmoid"), ([5, 9, 9, 3], "relu")])
def test_method_equals_autograd_float64_cross_entropy(name, sizes, activation):
    # integer class labels select softmax cross-entropy (gradlab.losses.loss)
    model = MLP(sizes, activation, seed=0, dtype=F64)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(37, sizes[0], dtype=F64, generator=generator)
    y = torch.randint(0, sizes[-1], (37,), generator=generator)
    if activation == "relu":
        assert _kink_margin(model, x) > 1e-4, "case too close to a ReLU kink: pick another seed"
    loss_ref, ref = METHODS["autograd"](model, x, y)
    assert_close(loss_ref, torch.nn.functional.cross_entropy(model(x), y), rtol=1e-14, atol=0)
    loss, grads = METHODS[name](model, x, y)
    tol = NUMERICAL_TOL if name == "numerical" else {"rtol": 1e-12, "atol": 1e-14}
    assert_close(loss, loss_ref, rtol=1e-13, atol=0)
    for param, g in grads.items():
        assert_close(g, ref[param], **tol, msg=lambda m, p=param: f"{name} {p}: {m}")


@pytest.mark.parametrize("name", [n for n in METHODS if n != "numerical"])
def test_method_equals_autograd_float32(name, make_batch):
    # numerical is left out: float32 central differences are only ~1e-3 accurate by design
    model = three_layer_relu(seed=0)
    x, y = make_batch(model)
    _, ref = METHODS["autograd"](model, x, y)
    _, grads = METHODS[name](model, x, y)
    for param, g in grads.items():
        assert g.dtype == torch.float32, param
        assert_close(g, ref[param], rtol=1e-4, atol=1e-6)


def test_init_is_deterministic_and_dtype_independent():
    for build in (two_layer_sigmoid, three_layer_relu):
        a, b = build(seed=3), build(seed=3)
        c, d64 = build(seed=4), build(seed=3, dtype=F64)
        for (name, p), q, r, p64 in zip(
            a.named_parameters(), b.parameters(), c.parameters(), d64.parameters()
        ):
            assert torch.equal(p, q), name
            assert not torch.equal(p, r), name
            assert torch.equal(p, p64.to(torch.float32)), name  # drawn in float64, then cast


def test_mse_convention():
    y_hat, y = torch.randn(5, 2, dtype=F64), torch.randn(5, 2, dtype=F64)
    assert_close(mse_loss(y_hat, y), torch.nn.functional.mse_loss(y_hat, y))


def _operand(*shape, seed, away_from_zero=False):
    t = torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))
    if away_from_zero:  # keep ReLU inputs off the kink, where gradcheck's step would straddle it
        t = t + t.sign() * 0.1
    return t.requires_grad_()


# Inputs for gradcheck of every custom Function in function.py and fused.py, by class name;
# each tuple is one call (requires_grad marks what is checked).
GRADCHECK_INPUTS = {
    "LinearFunction": [
        (_operand(5, 3, seed=0), _operand(4, 3, seed=1), _operand(4, seed=2)),
        (_operand(5, 3, seed=0).detach(), _operand(4, 3, seed=1), _operand(4, seed=2)),
    ],
    "SigmoidFunction": [(_operand(5, 4, seed=3),)],
    "ReLUFunction": [(_operand(5, 4, seed=4, away_from_zero=True),)],
    "MSEFunction": [
        (_operand(6, 2, seed=5), _operand(6, 2, seed=6)),
        (_operand(6, 2, seed=5), _operand(6, 2, seed=6).detach()),
    ],
    "CrossEntropyFunction": [
        (_operand(6, 3, seed=10), torch.tensor([0, 2, 1, 2, 0, 1])),
        (_operand(1, 4, seed=11), torch.tensor([3])),
    ],
    "Conv2dFunction": [
        (_operand(2, 2, 5, 4, seed=0), _operand(3, 2, 3, 3, seed=1), _operand(3, seed=2), 1),
        (
            _operand(2, 2, 5, 4, seed=0).detach(),
            _operand(3, 2, 3, 3, seed=1),
            _operand(3, seed=2),
            1,
        ),
        (
            _operand(2, 1, 6, 5, seed=3),
            _operand(2, 1, 2, 2, seed=4).detach(),
            _operand(2, seed=5),
            0,
        ),
    ],
    "AvgPool2dFunction": [(_operand(2, 3, 4, 6, seed=6), 2), (_operand(1, 2, 6, 6, seed=7), 3)],
    "LinearActFunction": [
        (_operand(5, 3, seed=7), _operand(4, 3, seed=8), _operand(4, seed=9), "sigmoid"),
        (_operand(5, 3, seed=7).detach(), _operand(4, 3, seed=8), _operand(4, seed=9), "sigmoid"),
        # relu: a bias of +-3 keeps every pre-activation clear of 0 under gradcheck's step
        (
            _operand(5, 3, seed=7),
            _operand(4, 3, seed=8),
            torch.tensor([3.0, -3, 3, -3], dtype=F64, requires_grad=True),
            "relu",
        ),
    ],
}


def _custom_functions():
    for module in FUNCTION_MODULES:
        for name, obj in vars(module).items():
            is_function = inspect.isclass(obj) and issubclass(obj, torch.autograd.Function)
            if is_function and obj.__module__ == module.__name__:
                yield name, obj


def test_every_custom_function_has_a_gradcheck_case():
    assert {name for name, _ in _custom_functions()} == set(GRADCHECK_INPUTS)


@pytest.mark.parametrize(
    "name,fn", list(_custom_functions()), ids=lambda v: getattr(v, "__name__", v)
)
def test_gradcheck(name, fn):
    for inputs in GRADCHECK_INPUTS[name]:
        assert torch.autograd.gradcheck(fn.apply, inputs), name


def user_grad(model, x, y):
    """A user's own gradient method, found by resolve() through its import path."""
    return METHODS["autograd"](model, x, y)


def test_resolve_builtin_callable_and_import_path():
    assert resolve("manual") is METHODS["manual"]
    assert resolve(user_grad) is user_grad
    assert resolve(f"{__name__}.user_grad") is user_grad
    assert resolve(f"{__name__}:user_grad") is user_grad


@pytest.mark.parametrize(
    "path,message",
    [
        ("nope", "unknown gradient method 'nope'"),
        ("no_such_module_xyz.fn", "cannot import"),
        (f"{__name__}.no_such_function", "cannot import"),
        (f"{__name__}.NUMERICAL_TOL", "not callable"),
    ],
)
def test_resolve_rejects_with_a_clear_message(path, message):
    with pytest.raises(ValueError, match=message):
        resolve(path)


def test_bench_quick_writes_the_json_schema(tmp_path):
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_grads.py"
    main = runpy.run_path(str(script))["main"]
    out = tmp_path / "bench.json"
    main(
        ["--quick", "--models", "two_layer_sigmoid", "--methods", "autograd", "manual",
         "check_full", "--dtypes", "float32", "--out", str(out)]
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert set(result["env"]) >= {"torch", "python", "cpu", "cores", "threads", "date"}
    keys = [(r["model"], r["method"], r["dtype"]) for r in result["rows"]]
    assert keys == [
        ("two_layer_sigmoid", "autograd", "float32"),
        ("two_layer_sigmoid", "manual", "float32"),
        ("two_layer_sigmoid", "check_full", "float64"),  # checks always evaluate in float64
    ]
    for row in result["rows"]:
        assert set(row) == {"model", "method", "dtype", "batch", "median_us"}
        assert row["batch"] == 100 and isinstance(row["median_us"], float)
    (ratio,) = result["ratios"]  # manual/autograd; check targets are on three_layer_relu only
    assert set(ratio) == {"model", "ratio", "dtype", "value", "target", "met"}
    assert ratio["ratio"] == "manual/autograd" and isinstance(ratio["met"], bool)
