"""DigitsCNN: its loss convention and its deterministic, dtype-independent init."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.testing import assert_close

from gradlab.losses import cross_entropy_loss
from gradlab.models.cnn import DigitsCNN, digits_cnn

F64 = torch.float64


def test_cross_entropy_convention():
    logits, labels = torch.randn(7, 10, dtype=F64), torch.randint(0, 10, (7,))
    assert_close(cross_entropy_loss(logits, labels), F.cross_entropy(logits, labels))
    by_hand = (logits.logsumexp(1) - logits[torch.arange(7), labels]).mean()
    assert_close(cross_entropy_loss(logits, labels), by_hand, rtol=1e-14, atol=0)


def test_init_is_deterministic_and_dtype_independent():
    a, b, c = DigitsCNN(seed=3), digits_cnn(seed=3, d_in=4, hidden=16), DigitsCNN(seed=4)
    d64 = DigitsCNN(seed=3, dtype=F64)
    shapes = {
        "conv.weight": (8, 1, 3, 3),
        "conv.bias": (8,),
        "fc.weight": (10, 128),
        "fc.bias": (10,),
    }
    assert {n: tuple(p.shape) for n, p in a.named_parameters()} == shapes
    for (name, p), q, r, p64 in zip(
        a.named_parameters(), b.parameters(), c.parameters(), d64.parameters()
    ):
        assert torch.equal(p, q), name
        assert not torch.equal(p, r), name
        assert torch.equal(p, p64.to(torch.float32)), name  # drawn in float64, then cast
        fan_in = 9 if name.startswith("conv") else 128
        assert p64.abs().max() <= 1 / math.sqrt(fan_in), name  # U(-1/sqrt(fan_in), 1/sqrt(fan_in))
