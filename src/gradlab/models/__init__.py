"""The nets gradlab trains: plain nn.Modules, built by name."""

from __future__ import annotations

from gradlab.models.mlp import MLP, three_layer_relu, two_layer_sigmoid

MODELS = {"two_layer_sigmoid": two_layer_sigmoid, "three_layer_relu": three_layer_relu}


def build_model(name: str, **kw) -> MLP:
    """Build a model by name: one of MODELS."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    return MODELS[name](**kw)


__all__ = ["MLP", "MODELS", "build_model", "three_layer_relu", "two_layer_sigmoid"]
