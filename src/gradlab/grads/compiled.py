"""torch.compile as an option of the gradient step: any gradient method, compiled once per shape.

``compiled(autograd)`` has the signature of every gradient method. It hands the *whole* method to
torch.compile (default backend inductor, ``dynamic=False``), one compiled callable per
(method, MLP sizes and activation, dtype, device, batch shapes): the first call with a
new key compiles (seconds), later calls run the cached code. What that compiles to:

- ``manual`` (pure tensor ops under no_grad) is traced into a single graph;
- ``autograd`` has one graph break at ``torch.autograd.grad`` (dynamo does not trace it by
  default): the forward is compiled with its backward (AOTAutograd), and ``autograd.grad`` runs
  eagerly through that compiled backward. Tracing it too (the private
  ``torch._dynamo.config.trace_autograd_ops``) gives one graph; on this 2-core CPU that was about
  10% faster than the graph-break version, still slower than plain autograd, and the flag would
  have to be patched around every call that may (re)compile. Not worth a private flag here.

On CPU, inductor generates C++ and needs a working C++ compiler; when compiling fails (no
compiler, unsupported backend) the first call raises CompileError saying so, instead of an
inductor traceback. ``compile_error()`` probes, once per process, whether torch.compile works here.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable

import torch
from torch import Tensor

from gradlab.grads import GradMethod, method_name
from gradlab.models import MLP


class CompileError(RuntimeError):
    """torch.compile could not build a gradient method on this machine."""


def cache_key(model: MLP, x: Tensor, y: Tensor) -> Hashable:
    """What a compiled step is specialized on: the MLP's layer sizes, activation and parameter
    dtype, the batch's shapes, dtypes and device (cheap: no walk over the parameters)."""
    dtype = model.layer1.weight.dtype
    data = (x.device.type, tuple(x.shape), x.dtype, tuple(y.shape), y.dtype)
    return type(model), tuple(model.sizes), model.activation, dtype, data


def compiled(method_fn: GradMethod, **compile_kwargs) -> GradMethod:
    """``method_fn`` under torch.compile (``compile_kwargs`` go to torch.compile), same signature.

    The returned step keeps its compiled callables in ``step.cache`` (key: ``cache_key``), so
    ``len(step.cache)`` is the number of compilations it has done.
    """
    compile_kwargs.setdefault("dynamic", False)  # one specialization per key, as cached here
    name = method_name(method_fn)
    cache: dict[Hashable, GradMethod] = {}

    def step(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        key = cache_key(model, x, y)
        fn = cache.get(key)
        if fn is None:
            fn = cache[key] = torch.compile(method_fn, **compile_kwargs)
        try:
            return fn(model, x, y)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            del cache[key]
            raise CompileError(
                f"torch.compile could not compile gradient method {name!r} on {x.device.type} "
                f"({type(e).__name__}: {str(e).strip().splitlines()[0]}). On CPU the default "
                "inductor backend needs a working C++ compiler (g++ or clang++; set CXX); run "
                "without compilation, or pass backend='eager' or 'aot_eager' to check the rest."
            ) from e

    step.cache = cache
    step.__name__ = step.__qualname__ = f"compiled_{name.rpartition('.')[2]}"
    step.__doc__ = f"{name} under torch.compile({compile_kwargs}), compiled once per shape."
    return step


def _probe(x: Tensor) -> Tensor:
    return torch.sin(x) * 2 + 1


@functools.cache
def compile_error(device: str = "cpu") -> str | None:
    """None when torch.compile (inductor) compiles and runs a tiny function on ``device``, else
    why not. Cached: the probe costs the process's one-off inductor start-up (seconds)."""
    try:
        x = torch.arange(4.0, device=device)
        out = torch.compile(_probe, dynamic=False)(x)
        if not torch.allclose(out, _probe(x)):
            return "torch.compile ran but computed a wrong result"
    except Exception as e:  # any failure means: not usable here, and the message says why
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    return None
