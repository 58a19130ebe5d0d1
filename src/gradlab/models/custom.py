"""The user's own model: the import path of a class or factory returning an nn.Module, called
with the user's keyword arguments. Whatever cannot give a trainable module is a ValueError with
one line naming the key and the problem."""

from __future__ import annotations

import importlib

import torch
from torch import nn


def find(target: str):
    """The object at import path "pkg.module.Name" (or "pkg.module:Name")."""
    module_name, _, attr = target.replace(":", ".").rpartition(".")
    if not module_name:
        raise ValueError(f"model.target={target!r} is not an import path such as pkg.module.Name")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or the user's module failing as it loads
        raise ValueError(
            f"model.target={target}: cannot import {module_name} ({type(e).__name__}: {e}); "
            "is its package on PYTHONPATH?"
        ) from None
    if not hasattr(module, attr):
        raise ValueError(f"model.target={target}: {module_name} has no attribute {attr!r}")
    return getattr(module, attr)


def custom(
    target: str,
    kwargs: dict | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> nn.Module:
    """target(**kwargs), its initial values drawn under `seed`, in `dtype` on `device`."""
    build, kwargs = find(target), dict(kwargs or {})
    if not callable(build):
        raise ValueError(
            f"model.target={target} is an object of type {type(build).__name__}, not callable"
        )
    with torch.random.fork_rng(devices=[]):  # the user's init draws from torch's global RNG
        torch.manual_seed(int(seed))
        try:
            model = build(**kwargs)
        except TypeError as e:
            raise ValueError(f"model.kwargs={kwargs}: {target} rejects them: {e}") from None
        except Exception as e:
            raise ValueError(f"model.target={target} raised {type(e).__name__}: {e}") from None
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"model.target={target} returned an object of type {type(model).__name__}, "
            "not a torch.nn.Module"
        )
    if not any(True for _ in model.parameters()):
        raise ValueError(f"model.target={target} returned a module without parameters")
    return model.to(device=device, dtype=dtype)
