"""torch.compile'd gradient methods (gradlab.grads.compiled) equal the plain ones in float64."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters
from torch.testing import assert_close

from gradlab.grads import METHODS
from gradlab.grads.compiled import CompileError, compile_error, compiled
from gradlab.models import MLPS as MODELS
from gradlab.models import two_layer_sigmoid

pytestmark = pytest.mark.slow  # torch.compile: seconds per compilation

F64 = torch.float64
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, CUDA])]


@pytest.fixture(scope="module")
def steps():
    """One compiled step per method for the whole module (each compiles once per model)."""
    reason = compile_error()
    if reason is not None:
        pytest.skip(f"torch.compile does not work on this machine: {reason}")
    return {"autograd": compiled(METHODS["autograd"]), "manual": compiled(METHODS["manual"])}


def batch(model, n=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, model.sizes[0], dtype=F64, generator=gen)
    y = torch.randn(n, model.sizes[-1], dtype=F64, generator=gen)
    return x.to(model.layer1.weight.device), y.to(model.layer1.weight.device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("name", ["autograd", "manual"])
def test_compiled_equals_plain_and_compiles_once(steps, name, model_name, device):
    if device != "cpu" and (reason := compile_error(device)) is not None:
        pytest.skip(f"torch.compile does not work on {device}: {reason}")
    step, method = steps[name], METHODS[name]
    model = MODELS[model_name](dtype=F64, device=device)
    x, y = batch(model)
    loss, grads = step(model, x, y)
    ref_loss, ref_grads = method(model, x, y)
    assert_close(loss, ref_loss)
    assert list(grads) == list(ref_grads)
    for name, ref in ref_grads.items():
        assert_close(grads[name], ref, msg=name)

    # Same shapes, another model instance and other data: served by the same compiled code.
    n_cached, n_graphs = len(step.cache), counters["stats"]["unique_graphs"]
    other = MODELS[model_name](dtype=F64, seed=1, device=device)
    x2, y2 = batch(other, seed=1)
    loss2, grads2 = step(other, x2, y2)
    assert len(step.cache) == n_cached and counters["stats"]["unique_graphs"] == n_graphs
    ref_loss2, ref_grads2 = method(other, x2, y2)
    assert_close(loss2, ref_loss2)
    for name, ref in ref_grads2.items():
        assert_close(grads2[name], ref, msg=name)


def test_compile_failure_is_a_clear_error():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("no C++ compiler here")

    step = compiled(METHODS["manual"], backend=broken_backend)
    model = two_layer_sigmoid(dtype=F64)
    with pytest.raises(CompileError, match="could not compile gradient method 'manual'.*C\\+\\+"):
        step(model, *batch(model))
    assert step.cache == {}  # a failed compilation is not cached
