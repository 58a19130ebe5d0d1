"""The validation figures of a run on data with a split: the loss, and for class labels the
accuracy, of the model as it stands after a step."""

from __future__ import annotations

import torch
from torch import Tensor, nn

import gradlab.training.metrics as m
from gradlab.losses import loss


class Validation:
    """Every `every` steps (0: never) and after the last step."""

    def __init__(self, model: nn.Module, x: Tensor, y: Tensor, every: int, last_step: int):
        self.model, self.x, self.y, self.every, self.last_step = model, x, y, every, last_step

    def due(self, step: int) -> bool:
        return step == self.last_step or bool(self.every and step % self.every == 0)

    @torch.no_grad()
    def __call__(self) -> dict[str, float]:
        out = self.model(self.x)
        metrics = {m.VAL_LOSS: float(loss(out, self.y))}
        if not self.y.is_floating_point():
            metrics[m.VAL_ACC] = float((out.argmax(1) == self.y).double().mean())
        return metrics
