"""The articles' data: random regression with a fixed teacher net, and XOR. No validation split
(the teacher's function is the whole truth; XOR has four points)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gradlab.models.mlp import MLP

TEACHER_HIDDEN = 16  # a teacher for a model that is not an MLP: d_in -> 16 ReLU -> 16 -> d_out


def regression(
    loss: str,
    seed: int,
    model: nn.Module | None = None,
    n_samples: int = 100,
    noise: float = 0.0,
    d_in: int | None = None,
    d_out: int | None = None,
):
    """x ~ N(0, 1) (n_samples, d_in); the targets from a fixed teacher net (seed + 1): of the
    model's own architecture when it is an MLP (d_in and d_out are then the model's), else a
    ReLU MLP d_in -> 16 -> 16 -> d_out. mse: y = teacher(x) + noise; cross_entropy: the labels
    argmax teacher(x) (noise is then added to the logits), d_out >= 2 classes."""
    if isinstance(model, MLP):
        for key, given, own in (("d_in", d_in, model.sizes[0]), ("d_out", d_out, model.sizes[-1])):
            if given is not None and given != own:
                raise ValueError(f"data.{key}={given} does not fit the MLP's {key}={own}")
        sizes, activation = model.sizes, model.activation
    elif d_in is None or d_out is None:
        raise ValueError(
            "data=regression for a model that is not an MLP needs data.d_in and data.d_out"
        )
    else:
        sizes, activation = [d_in, TEACHER_HIDDEN, TEACHER_HIDDEN, d_out], "relu"
    if loss == "cross_entropy" and sizes[-1] < 2:
        raise ValueError(f"loss=cross_entropy on data=regression needs d_out >= 2, got {sizes[-1]}")
    gen = torch.Generator().manual_seed(int(seed) + 7919)
    x = torch.randn(n_samples, sizes[0], generator=gen, dtype=torch.float64)
    net = MLP(sizes, activation, seed=int(seed) + 1, dtype=torch.float64)
    with torch.no_grad():
        y = net(x) + noise * torch.randn(n_samples, sizes[-1], generator=gen, dtype=torch.float64)
    if loss == "cross_entropy":
        return x, y.argmax(1), None, None, sizes[-1]
    return x, y, None, None, None


def xor(loss: str, seed: int, model: nn.Module | None = None, n_samples: int = 4):
    """The four XOR points repeated to n_samples; mse: y (n, 1) in {0, 1}; cross_entropy: the
    labels, two classes."""
    pts = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    x = pts.repeat(-(-n_samples // 4), 1)[:n_samples]
    labels: Tensor = (x[:, 0] != x[:, 1]).long()
    if loss == "cross_entropy":
        return x, labels, None, None, 2
    return x, labels.to(torch.float64).unsqueeze(1), None, None, None
