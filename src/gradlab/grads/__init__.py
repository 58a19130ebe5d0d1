"""Gradient methods: name -> callable(model, x, y) -> (loss, {parameter name: gradient}).

Every method has the same signature: given a model and a batch (x, and y: real targets (B, D_out)
or class labels (B,)) it returns the 0-d loss (gradlab.losses: mse or cross-entropy by y) and a
dict with one gradient tensor per named parameter, shaped like the parameter. autograd and
numerical take any nn.Module; the hand-written methods take the models they were written for
(SPECIFIC; for_model() refuses the others). Users bring their own method as an import path
("package.module.function" or "package.module:function") to any callable of that signature.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from torch import Tensor

from gradlab.grads import (
    autograd,
    function,
    function_cnn,
    fused,
    manual,
    manual_cnn,
    numerical,
    tape,
)
from gradlab.models import MLP, DigitsCNN

GradMethod = Callable[[MLP, Tensor, Tensor], "tuple[Tensor, dict[str, Tensor]]"]

# each method is its module's ``gradient`` function
METHODS: dict[str, GradMethod] = {
    "autograd": autograd.gradient,
    "manual": manual.gradient,
    "function": function.gradient,
    "fused": fused.gradient,
    "numerical": numerical.gradient,
    "tape": tape.gradient,
}


# the hand-written methods, per model class they were written for
SPECIFIC: dict[str, dict[type, GradMethod]] = {
    "manual": {MLP: manual.gradient, DigitsCNN: manual_cnn.gradient},
    "function": {MLP: function.gradient, DigitsCNN: function_cnn.gradient},
    "fused": {MLP: fused.gradient},
    "tape": {MLP: tape.gradient},
}


def for_model(method: str | GradMethod, model) -> GradMethod:
    """resolve(method), the implementation written for `model`'s class where the method is a
    hand-written one; ValueError (one line) for a model it was not written for."""
    if not isinstance(method, str) or method not in SPECIFIC:
        return resolve(method)
    for cls, fn in SPECIFIC[method].items():
        if isinstance(model, cls):
            return fn
    written = ", ".join(cls.__name__ for cls in SPECIFIC[method])
    raise ValueError(
        f"grad.method={method} is written for {written} only and cannot handle the model "
        f"{type(model).__name__}; use grad=autograd, grad=numerical or your own method"
    )


def resolve(method: str | GradMethod) -> GradMethod:
    """A built-in method by name, a callable as is, or a callable found by its import path."""
    if callable(method):
        return method
    if method in METHODS:
        return METHODS[method]
    if "." not in method and ":" not in method:
        raise ValueError(
            f"unknown gradient method {method!r}; allowed: {', '.join(METHODS)}, "
            "or an import path such as 'mypkg.mymodule.my_grad'"
        )
    module_name, _, attr = method.replace(":", ".").rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot import gradient method {method!r}: {e}") from None
    if not callable(fn):
        raise ValueError(f"gradient method {method!r} is not callable")
    return fn


def method_name(fn: GradMethod) -> str:
    """The name a method goes by: its key in METHODS, else its import path."""
    for name, method in METHODS.items():
        if method is fn:
            return name
    for name, per_model in SPECIFIC.items():
        if any(method is fn for method in per_model.values()):
            return name
    qualname = getattr(fn, "__qualname__", type(fn).__name__)
    module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if module else qualname
