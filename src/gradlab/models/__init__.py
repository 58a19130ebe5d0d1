"""The nets gradlab trains: plain nn.Modules, built by name (the user's own as model=custom)."""

from __future__ import annotations

from torch import nn

from gradlab.models.cnn import DigitsCNN, digits_cnn
from gradlab.models.custom import custom
from gradlab.models.mlp import MLP, three_layer_relu, two_layer_sigmoid

MLPS = {"two_layer_sigmoid": two_layer_sigmoid, "three_layer_relu": three_layer_relu}
MODELS = {**MLPS, "digits_cnn": digits_cnn, "custom": custom}


def build_model(name: str, **kw) -> nn.Module:
    """Build a model by name: one of MODELS, with that builder's keywords."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    return MODELS[name](**kw)


def model_name(model: nn.Module) -> str:
    """What a model is called in summaries: its class, and an MLP's sizes."""
    if isinstance(model, MLP):
        return f"MLP {'-'.join(map(str, model.sizes))} {model.activation}"
    return type(model).__name__


__all__ = [
    "MLP",
    "DigitsCNN",
    "MLPS",
    "MODELS",
    "build_model",
    "model_name",
    "three_layer_relu",
    "two_layer_sigmoid",
]
