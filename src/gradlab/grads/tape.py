"""Gradient by a tape-based mini autograd: article 002's ComputationGraph, done right.

The article records (op, inputs, output) in a list and walks it backwards, applying each op's
backward and accumulating the gradient of an input used more than once. This version keeps that
idea and fixes what the published sketch gets wrong or leaves out:

- the tape is the topological order: an op can only use values recorded before it, so walking the
  records in reverse visits every output after all of its consumers (no graph sort needed);
- gradients of a reused input are *summed out of place* (``g_a = g_a + g``): the published
  ``+=``-style update would mutate a tensor that Add's backward hands to both of its inputs;
- an op whose output never reaches the loss is skipped instead of raising KeyError;
- ``add``/``mul`` broadcast like torch, and their backward sums the gradient over the broadcast
  dimensions (a bias (O,) added to (B, O) gets the batch sum);
- ``requires_grad`` is tracked as in torch: ops on constants only (the data x, y) are not recorded,
  and a backward computes an input's gradient only when that input needs one.

Values are plain tensors: leaves are detached, so torch autograd never sees any of this. Each op's
forward and its backward sit side by side (micrograd style); only these primitives have a backward,
anything else (a linear layer: ``x @ W.T + b``) is composed from them.

The method records the MLP's forward from these primitives and sweeps the tape in reverse. A linear
layer is composed, not a primitive: z = x @ W^T + b is transpose, matmul and a broadcasting add,
so the bias gradient comes out of add's backward as the batch sum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from gradlab.models import MLP

Backward = Callable[[Tensor], "tuple[Tensor | None, ...]"]


class Var:
    """A tensor recorded on a tape: its value, its slot in the tape, whether it needs a gradient."""

    __slots__ = ("tape", "value", "index", "requires_grad")

    def __init__(self, tape: Tape, value: Tensor, index: int, requires_grad: bool):
        self.tape, self.value, self.index, self.requires_grad = tape, value, index, requires_grad

    @property
    def shape(self) -> torch.Size:
        return self.value.shape

    @property
    def T(self) -> Var:
        return self.tape.transpose(self)

    def __add__(self, other: Var) -> Var:
        return self.tape.add(self, other)

    def __mul__(self, other: Var) -> Var:
        return self.tape.mul(self, other)

    def __matmul__(self, other: Var) -> Var:
        return self.tape.matmul(self, other)

    def __repr__(self) -> str:
        return f"Var(#{self.index}, shape={tuple(self.shape)}, requires_grad={self.requires_grad})"


def unbroadcast(grad: Tensor, shape: torch.Size) -> Tensor:
    """Sum ``grad`` down to ``shape``: the backward of broadcasting a ``shape`` tensor up to it."""
    if grad.shape == shape:
        return grad
    lead = grad.dim() - len(shape)  # dimensions broadcasting prepended
    stretched = [lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1]
    return grad.sum(dim=list(range(lead)) + stretched, keepdim=False).reshape(shape)


class Tape:
    """Records ops on Vars as (input slots, output slot, backward) and differentiates in reverse."""

    def __init__(self):
        self.vars: list[Var] = []
        self.records: list[tuple[tuple[int, ...], int, Backward]] = []

    def leaf(self, value: Tensor, requires_grad: bool = True) -> Var:
        """Put an input on the tape (detached: the tape, not torch autograd, owns its gradient)."""
        return self._new(value.detach(), requires_grad)

    def _new(self, value: Tensor, requires_grad: bool) -> Var:
        var = Var(self, value, len(self.vars), requires_grad)
        self.vars.append(var)
        return var

    def _record(self, inputs: tuple[Var, ...], value: Tensor, backward: Backward) -> Var:
        if any(v.tape is not self for v in inputs):
            raise ValueError("an op's inputs must be on the tape that records it")
        out = self._new(value, any(v.requires_grad for v in inputs))
        if out.requires_grad:
            self.records.append((tuple(v.index for v in inputs), out.index, backward))
        return out

    # ---- the primitives: forward, then the backward that maps d out to (d input, ...) ----

    def add(self, a: Var, b: Var) -> Var:
        """out = a + b (broadcasting); d a = g summed over a's broadcast dims, same for b."""

        def backward(g):
            return (
                unbroadcast(g, a.shape) if a.requires_grad else None,
                unbroadcast(g, b.shape) if b.requires_grad else None,
            )

        return self._record((a, b), a.value + b.value, backward)

    def mul(self, a: Var, b: Var) -> Var:
        """out = a * b (elementwise, broadcasting); d a = g * b, d b = g * a."""

        def backward(g):
            return (
                unbroadcast(g * b.value, a.shape) if a.requires_grad else None,
                unbroadcast(g * a.value, b.shape) if b.requires_grad else None,
            )

        return self._record((a, b), a.value * b.value, backward)

    def matmul(self, a: Var, b: Var) -> Var:
        """out = a @ b, a (M, K), b (K, N); d a = g @ b^T (M, K), d b = a^T @ g (K, N)."""
        if a.value.dim() != 2 or b.value.dim() != 2:
            raise ValueError(f"matmul takes two matrices, got {tuple(a.shape)} @ {tuple(b.shape)}")

        def backward(g):  # g: (M, N)
            return (
                g.mm(b.value.t()) if a.requires_grad else None,
                a.value.t().mm(g) if b.requires_grad else None,
            )

        return self._record((a, b), a.value.mm(b.value), backward)

    def transpose(self, a: Var) -> Var:
        """out = a^T for a matrix; d a = g^T."""
        return self._record((a,), a.value.t(), lambda g: (g.t(),))

    def relu(self, a: Var) -> Var:
        """out = max(a, 0); d a = g * 1[out > 0] (0 at the kink, as torch.relu)."""
        out = a.value.clamp(min=0)
        return self._record((a,), out, lambda g: (g * (out > 0),))

    def sigmoid(self, a: Var) -> Var:
        """s = 1 / (1 + exp(-a)); d a = g * s * (1 - s), from the output alone."""
        s = torch.sigmoid(a.value)
        return self._record((a,), s, lambda g: (g * s * (1 - s),))

    def mse(self, y_hat: Var, y: Var) -> Var:
        """L = mean((y_hat - y)^2) (0-d); d y_hat = 2 (y_hat - y) g / N, d y = -d y_hat."""
        diff = y_hat.value - y.value

        def backward(g):
            d = diff * (g * 2.0 / diff.numel())
            return (d if y_hat.requires_grad else None, -d if y.requires_grad else None)

        return self._record((y_hat, y), diff.pow(2).mean(), backward)

    def cross_entropy(self, logits: Var, labels: Tensor) -> Var:
        """L = mean_b(logsumexp(z_b) - z_b[label_b]) (0-d) for integer labels (B,), a constant;
        d logits = (softmax(z) - onehot(label)) g / B."""
        log_p = logits.value.log_softmax(1)  # (B, C)
        picked = log_p.gather(1, labels.unsqueeze(1))  # (B, 1)

        def backward(g):
            p = log_p.exp().scatter_add_(1, labels.unsqueeze(1), torch.full_like(picked, -1.0))
            return (p * (g / len(labels)),)

        return self._record((logits,), -picked.mean(), backward)

    # ---- reverse sweep ----

    def gradients(
        self, out: Var, inputs: Sequence[Var], grad_out: Tensor | None = None
    ) -> list[Tensor]:
        """d out / d input for each input (like torch.autograd.grad); ``grad_out`` seeds a
        non-scalar ``out``. An input that ``out`` does not depend on gets zeros."""
        if grad_out is None:
            if out.value.numel() != 1:
                raise ValueError(f"grad_out is required for a non-scalar output {tuple(out.shape)}")
            grad_out = torch.ones_like(out.value)
        wanted = {v.index for v in inputs}
        grads: list[Tensor | None] = [None] * len(self.vars)
        grads[out.index] = grad_out
        for input_slots, out_slot, backward in reversed(self.records):
            if grads[out_slot] is None:
                continue  # does not reach `out` (or was recorded after it)
            g = grads[out_slot]
            if out_slot not in wanted:
                grads[out_slot] = None  # consumed: free it early
            for slot, g_in in zip(input_slots, backward(g)):
                if g_in is not None:
                    # Out of place: a backward may hand the same tensor to several inputs (add).
                    grads[slot] = g_in if grads[slot] is None else grads[slot] + g_in
        return [
            grads[v.index] if grads[v.index] is not None else torch.zeros_like(v.value)
            for v in inputs
        ]


def linear(x: Var, weight: Var, bias: Var) -> Var:
    """z = x @ W^T + b; x: (B, I), W: (O, I), b: (O,) -> (B, O)."""
    return x @ weight.T + bias


@torch.no_grad()
def gradient(model: MLP, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and gradients by recording the forward on a Tape and sweeping it in reverse."""
    t = Tape()
    act = t.sigmoid if model.activation == "sigmoid" else t.relu
    params = {name: t.leaf(p) for name, p in model.named_parameters()}
    *hidden, last = range(1, len(model.layers) + 1)
    a = t.leaf(x, requires_grad=False)  # (B, D_0): data needs no gradient
    for k in hidden:
        a = act(linear(a, params[f"layer{k}.weight"], params[f"layer{k}.bias"]))  # (B, D_k)
    y_hat = linear(a, params[f"layer{last}.weight"], params[f"layer{last}.bias"])  # (B, D_L)
    if y.is_floating_point():
        loss = t.mse(y_hat, t.leaf(y, requires_grad=False))
    else:  # class labels
        loss = t.cross_entropy(y_hat, y)
    grads = t.gradients(loss, list(params.values()))
    return loss.value, dict(zip(params, grads))
