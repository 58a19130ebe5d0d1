"""Timings of every gradient method and of the gradient check: warm, repeated, median per call.

Each figure is torch.utils.benchmark's median over blocks of repeated calls, after a warm-up
call, with the current torch thread count (scripts/bench_grads.py sets 1 by default). Ratios
(the targets below) are only meaningful between figures of one run on one machine: they are
computed from the rows of the same run.

check_loop is the articles' gradient check, kept here only as the baseline the batched checker
is measured against: perturb one parameter element in place, forward the nn.Module, restore.
"""

from __future__ import annotations

import copy
import datetime
import os
import platform
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor
from torch.utils import benchmark

from gradlab.check import check_gradient
from gradlab.grads import METHODS, resolve
from gradlab.models import MLP, MODELS, build_model, mse_loss

BATCH = 100
DTYPES = {"float32": torch.float32, "float64": torch.float64}
CHECKS = ("check_loop", "check_full", "check_directional")
# Issue 2's targets: numerator method / denominator method, both in dtype, compared with
# bound, on the models named (None: every model).
TARGETS = (
    ("manual", "autograd", "float32", "<=", 0.5, None),
    ("function", "autograd", "float32", "<=", 1.2, None),
    ("check_loop", "check_full", "float64", ">=", 10.0, ("three_layer_relu",)),
    ("check_directional", "autograd", "float64", "<=", 3.0, ("three_layer_relu",)),
)


@dataclass
class Row:
    model: str
    method: str
    dtype: str
    batch: int
    median_us: float


@torch.no_grad()
def check_loop(
    model: MLP, x: Tensor, y: Tensor, grads: dict[str, Tensor], h: float | None = None
) -> float:
    """The articles' check: central differences one element at a time on a float64 copy of
    the nn.Module (perturb in place, forward, restore), then ||g - g_fd|| / ||g_fd||."""
    model = copy.deepcopy(model).double()
    x, y = x.double(), y.double()
    h = torch.finfo(torch.float64).eps ** (1 / 3) if h is None else h
    diff_sq = ref_sq = 0.0
    for name, p in model.named_parameters():
        flat, g_fd = p.data.view(-1), torch.empty(p.numel(), dtype=torch.float64)
        for i in range(flat.numel()):
            orig = flat[i].item()
            step = h * max(1.0, abs(orig))
            flat[i] = orig + step
            plus = mse_loss(model(x), y).item()
            flat[i] = orig - step
            minus = mse_loss(model(x), y).item()
            flat[i] = orig
            g_fd[i] = (plus - minus) / (2 * step)
        diff_sq += float((grads[name].double().reshape(-1) - g_fd).pow(2).sum())
        ref_sq += float(g_fd.pow(2).sum())
    return (diff_sq / ref_sq) ** 0.5 if ref_sq else diff_sq**0.5


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


def run(
    models: Sequence[str] = tuple(MODELS),
    methods: Sequence[str] = (*METHODS, *CHECKS),
    dtypes: Sequence[str] = tuple(DTYPES),
    batch: int = BATCH,
    quick: bool = False,
    rounds: int = 10,
) -> list[Row]:
    """One row per (model, method, dtype): gradient methods in each of `dtypes`, checks once
    per model in float64 (they evaluate in float64 whatever the gradient's dtype).

    Each case is timed in `rounds` short turns, the cases taking turns, and the median is over
    all blocks of all rounds: a burst of load from other processes (seconds long on this shared
    machine) then spoils a few blocks of every case instead of every block of one case."""
    cases = {}  # (model, method, dtype) -> a no-argument call
    for model_name in models:
        for dtype_name in dtypes:
            model = build_model(model_name, dtype=DTYPES[dtype_name])
            x, y = make_batch(model, DTYPES[dtype_name], batch)
            for method in methods:
                if method not in CHECKS:
                    cases[model_name, method, dtype_name] = _call(method, model, x, y)
        model = build_model(model_name, dtype=torch.float64)
        x, y = make_batch(model, torch.float64, batch)
        for method in methods:
            if method in CHECKS:
                cases[model_name, method, "float64"] = _call(method, model, x, y)
    rounds, min_run_time = (1, 0.01) if quick else (rounds, 0.05)
    timers = {}
    for key, fn in cases.items():
        fn()  # warm-up
        timers[key] = timer(fn)
    blocks: dict[tuple[str, str, str], list[float]] = {key: [] for key in timers}
    for _ in range(rounds):
        for key, case_timer in timers.items():
            blocks[key] += case_timer.blocked_autorange(min_run_time=min_run_time).times
    return [
        Row(*key, batch, round(statistics.median(times) * 1e6, 1)) for key, times in blocks.items()
    ]


def _call(method: str, model: MLP, x: Tensor, y: Tensor) -> Callable[[], object]:
    """A no-argument call of a gradient method, or of a check of autograd's gradient."""
    if method not in CHECKS:
        grad_fn = resolve(method)
        return lambda: grad_fn(model, x, y)
    _, grads = METHODS["autograd"](model, x, y)
    if method == "check_loop":
        return lambda: check_loop(model, x, y, grads)
    mode, gen = method.removeprefix("check_"), torch.Generator().manual_seed(0)
    return lambda: check_gradient(model, x, y, grads, mode=mode, k=4, generator=gen)


def ratios(rows: Sequence[Row]) -> list[dict[str, object]]:
    """Every target whose two figures were measured, per model: ratio, bound, met."""
    times = {(r.model, r.method, r.dtype): r.median_us for r in rows}
    out = []
    for model in dict.fromkeys(r.model for r in rows):
        for num, den, dtype, op, bound, on_models in TARGETS:
            measured = (model, num, dtype) in times and (model, den, dtype) in times
            if measured and (on_models is None or model in on_models):
                ratio = times[model, num, dtype] / times[model, den, dtype]
                met = ratio <= bound if op == "<=" else ratio >= bound
                out.append(
                    {
                        "model": model,
                        "ratio": f"{num}/{den}",
                        "dtype": dtype,
                        "value": round(ratio, 3),
                        "target": f"{op} {bound}",
                        "met": met,
                    }
                )
    return out


def report(rows: Sequence[Row]) -> dict[str, object]:
    """The JSON document a run writes: environment, rows, target ratios."""
    return {"env": environment(), "rows": [asdict(r) for r in rows], "ratios": ratios(rows)}


def format_table(result: dict[str, object]) -> str:
    """The rows as a fixed-width table, then each target ratio with met / NOT met."""
    lines = [f"{'model':<18} {'method':<18} {'dtype':<8} {'batch':>5} {'median_us':>11}"]
    for r in result["rows"]:
        lines.append(
            f"{r['model']:<18} {r['method']:<18} {r['dtype']:<8} {r['batch']:>5} "
            f"{r['median_us']:>11.1f}"
        )
    lines.append("")
    for t in result["ratios"]:
        verdict = "met" if t["met"] else "NOT met"
        lines.append(
            f"{t['model']:<18} {t['ratio']:<27} {t['dtype']:<8} {t['value']:>7.3f} "
            f"(target {t['target']}) {verdict}"
        )
    return "\n".join(lines)
