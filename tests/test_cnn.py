"""DigitsCNN's loss: softmax cross-entropy with integer labels, as F.cross_entropy."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.testing import assert_close

from gradlab.losses import cross_entropy_loss

F64 = torch.float64


def test_cross_entropy_convention():
    logits, labels = torch.randn(7, 10, dtype=F64), torch.randint(0, 10, (7,))
    assert_close(cross_entropy_loss(logits, labels), F.cross_entropy(logits, labels))
    by_hand = (logits.logsumexp(1) - logits[torch.arange(7), labels]).mean()
    assert_close(cross_entropy_loss(logits, labels), by_hand, rtol=1e-14, atol=0)
