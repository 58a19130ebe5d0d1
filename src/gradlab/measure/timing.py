"""Timers: warm, repeated medians per call (torch.utils.benchmark), and what a figure was
measured on.

Ratios between figures are only meaningful within one run on one machine.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
from collections.abc import Callable, Hashable, Sequence

import torch
from torch import Tensor
from torch.utils import benchmark

from gradlab.grads import resolve
from gradlab.models import MLP, build_model

BATCH = 100
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def timer(fn: Callable[[], object]) -> benchmark.Timer:
    """A torch.utils.benchmark Timer of fn() at torch's default thread count."""
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())


def median_us(fn: Callable[[], object], min_run_time: float) -> float:
    """Median time of one warm fn() call in microseconds (one block measurement)."""
    fn()
    return timer(fn).blocked_autorange(min_run_time=min_run_time).median * 1e6


def environment() -> dict[str, object]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "loadavg_1min": round(os.getloadavg()[0], 2),  # other processes sharing the cores
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def make_batch(model: MLP, dtype: torch.dtype, batch: int) -> tuple[Tensor, Tensor]:
    """A fixed random batch (seed 0), drawn in float64 so every dtype sees the same numbers."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, model.sizes[0], generator=gen, dtype=torch.float64)
    y = torch.randn(batch, model.sizes[-1], generator=gen, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def method_cases(
    models: Sequence[str], methods: Sequence[str], dtypes: Sequence[str], batch: int = BATCH
) -> dict[tuple[str, str, str], Callable[[], object]]:
    """(model, method, dtype) -> a no-argument call of that gradient method on a fixed batch."""
    cases = {}
    for model_name in models:
        for dtype_name in dtypes:
            model = build_model(model_name, dtype=DTYPES[dtype_name])
            x, y = make_batch(model, DTYPES[dtype_name], batch)
            for method in methods:
                grad_fn = resolve(method)
                cases[model_name, method, dtype_name] = lambda f=grad_fn, m=model, a=x, b=y: f(
                    m, a, b
                )
    return cases


def round_robin_medians(
    cases: dict[Hashable, Callable[[], object]], rounds: int = 10, min_run_time: float = 0.05
) -> dict[Hashable, float]:
    """Median microseconds per call of each case, warm. Each case is timed in `rounds` short
    turns, the cases taking turns, and the median is over all blocks of all rounds: a burst of
    load from other processes (seconds long on a shared machine) then spoils a few blocks of
    every case instead of every block of one case."""
    timers = {}
    for key, fn in cases.items():
        fn()  # warm-up
        timers[key] = timer(fn)
    blocks: dict[Hashable, list[float]] = {key: [] for key in timers}
    for _ in range(rounds):
        for key, case_timer in timers.items():
            blocks[key] += case_timer.blocked_autorange(min_run_time=min_run_time).times
    return {key: round(statistics.median(times) * 1e6, 1) for key, times in blocks.items()}
