"""Random unit directions in parameter space and the per-tensor layout they are cut to."""

from __future__ import annotations

import functools

import torch
from torch import Tensor


@functools.lru_cache(maxsize=64)
def segments(sizes: tuple[int, ...], device: torch.device) -> Tensor:
    """(n,) the index of the tensor each flat entry belongs to (tensors of `sizes`, in order).
    Cached per layout: the result must not be modified."""
    return torch.arange(len(sizes), device=device).repeat_interleave(
        torch.tensor(sizes, device=device)
    )


@functools.lru_cache(maxsize=64)
def blocks(sizes: tuple[int, ...], device: torch.device) -> Tensor:
    """(T, 1, n) bool: entry i belongs to tensor t. Cached per layout: must not be modified."""
    seg = segments(sizes, device)
    return (torch.arange(len(sizes), device=device).unsqueeze(1) == seg).unsqueeze(1)


def unit_directions(sizes: tuple[int, ...], k: int, generator) -> Tensor:
    """k random unit directions per tensor (T * k, n): rows t*k..(t+1)*k supported on tensor t.
    The same k draws over all entries, cut to each tensor's block."""
    # drawn in float32 (several times faster than float64 on the CPU): any direction will do
    u = torch.randn(k, sum(sizes), generator=generator).to(torch.float64)
    u = (u * blocks(sizes, u.device)).view(len(sizes) * k, -1)
    return u.div_(torch.linalg.vector_norm(u, dim=1, keepdim=True))
