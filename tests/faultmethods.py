"""Broken gradient methods, used as users' own methods (grad.method=faultmethods.NAME) in tests
and scripts/faults.sh. Each wraps gradlab's autograd and breaks one thing."""

from __future__ import annotations

import os
import signal
import time

import torch

from gradlab.grads import METHODS

autograd = METHODS["autograd"]


def raises(model, x, y):
    raise RuntimeError("boom from a user's method")


def missing_bias(model, x, y):
    loss, grads = autograd(model, x, y)
    grads.pop("layer1.bias")
    return loss, grads


def wrong_shape(model, x, y):
    loss, grads = autograd(model, x, y)
    grads["layer1.weight"] = grads["layer1.weight"].t()
    return loss, grads


def wrong_dtype(model, x, y):
    loss, grads = autograd(model, x, y)
    grads["layer1.weight"] = grads["layer1.weight"].to(torch.float16)
    return loss, grads


def not_a_dict(model, x, y):
    loss, grads = autograd(model, x, y)
    return loss, list(grads.values())


def sign_flip_bias(model, x, y):
    """A plausible bug: the last layer's bias gradient with the wrong sign."""
    loss, grads = autograd(model, x, y)
    last = f"layer{len(model.sizes) - 1}.bias"
    grads[last] = -grads[last]
    return loss, grads


def out_of_memory(model, x, y):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (simulated)")


calls = 0


def raises_at_step_13(model, x, y):
    """Autograd for 13 calls (steps 0..12 when trainer.mem_every=0), then raises. Reset `calls`
    before a run. Only the run's own float32 calls count: the checks also call the method on
    float64 copies."""
    global calls
    calls += x.dtype == torch.float32
    if calls > 13:
        raise RuntimeError("boom at step 13")
    return autograd(model, x, y)


def sigint_at_step_13(model, x, y):
    """Autograd that sends its own process SIGINT (Ctrl-C) in its 14th call (step 13 when
    trainer.mem_every=0): the run stops at the next step, inside a group of trainer.inner_steps.
    Only the run's own float32 calls count, as in raises_at_step_13. FAULTMETHODS_SIGINT_CALL
    moves the call (0: never, for the run that resumes it: a checkpoint resumes with its own
    method)."""
    global calls
    calls += x.dtype == torch.float32
    if calls == int(os.environ.get("FAULTMETHODS_SIGINT_CALL", "14")):
        os.kill(os.getpid(), signal.SIGINT)
    return autograd(model, x, y)


def slow_autograd(model, x, y):
    """Autograd, 20 ms a call: a run that trains long enough to be pre-empted or killed."""
    time.sleep(0.02)
    return autograd(model, x, y)
