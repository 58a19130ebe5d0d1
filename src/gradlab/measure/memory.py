"""Peak memory of one call: CUDA's allocator statistics, or on the CPU live tensor storage.

On CUDA: torch.cuda.max_memory_allocated over the call, minus what was allocated before it.
On the CPU (PyTorch has no CPU allocator statistics): a TorchDispatchMode sees every op the call
runs, forward and backward, adds the bytes of each newly created storage, and subtracts them
when the tensor is freed; the peak of that running total is what the call itself allocated.
Tracking costs far more than the call, so callers measure on a separate, untimed call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class _LiveBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self.seen: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self.seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in inputs or key in self.seen or key == 0:
                continue
            nbytes = storage.nbytes()
            self.seen.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._release, key, nbytes)
        return out


def peak_bytes(fn: Callable[[], Any], device: torch.device) -> tuple[Any, int]:
    """Run fn() once; return its result and the peak bytes it allocated on `device`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - before
    with _LiveBytes() as mode:
        result = fn()
    return result, mode.peak
