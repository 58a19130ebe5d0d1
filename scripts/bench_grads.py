"""Time every gradient method and the gradient check; print a table and the target ratios.

    python scripts/bench_grads.py --out experiments/bench_grads.json [--threads 1] [--quick]

Each figure is torch.utils.benchmark's median over blocks of repeated calls, after a warm-up
call (gradlab.measure.timing). Ratios (the targets below) are computed from the rows of one run.

check_loop is the articles' gradient check, kept here only as the baseline the batched checker
is measured against: perturb one parameter element in place, forward the nn.Module, restore.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor

from gradlab.check import check_gradient
from gradlab.grads import METHODS
from gradlab.losses import mse_loss
from gradlab.measure.timing import (
    BATCH,
    DTYPES,
    environment,
    make_batch,
    method_cases,
    round_robin_medians,
)
from gradlab.models import MLP, build_model
from gradlab.models import MLPS as MODELS  # the MLPs: the methods written for them all

CHECKS = ("check_loop", "check_full", "check_directional")
# The targets these figures are held to: numerator method / denominator method, both in dtype,
# compared with bound, on the models named (None: every model).
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


def run(
    models: Sequence[str] = tuple(MODELS),
    methods: Sequence[str] = (*METHODS, *CHECKS),
    dtypes: Sequence[str] = tuple(DTYPES),
    batch: int = BATCH,
    quick: bool = False,
    rounds: int = 10,
) -> list[Row]:
    """One row per (model, method, dtype): gradient methods in each of `dtypes`, checks once
    per model in float64 (they evaluate in float64 whatever the gradient's dtype), all timed
    in turns (gradlab.measure.timing.round_robin_medians)."""
    grads = [m for m in methods if m not in CHECKS]
    checks = [m for m in methods if m in CHECKS]
    cases = {}
    for model_name in models:  # per model: its methods in each dtype, then its checks in float64
        cases.update(method_cases([model_name], grads, dtypes, batch))
        model = build_model(model_name, dtype=torch.float64)
        x, y = make_batch(model, torch.float64, batch)
        for check in checks:
            cases[model_name, check, "float64"] = _check_call(check, model, x, y)
    rounds, min_run_time = (1, 0.01) if quick else (rounds, 0.05)
    medians = round_robin_medians(cases, rounds, min_run_time)
    return [Row(*key, batch, us) for key, us in medians.items()]


def _check_call(method: str, model: MLP, x: Tensor, y: Tensor) -> Callable[[], object]:
    """A no-argument call of a check of autograd's gradient."""
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    parser.add_argument("--quick", action="store_true", help="short runs (smoke tests)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument(
        "--methods",
        nargs="+",
        default=[*METHODS, *CHECKS],
        help=f"gradient methods (or import paths) and checks: {', '.join(CHECKS)}",
    )
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--rounds", type=int, default=10, help="turns per case (median over all)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1, as training: on 2 shared cores a second MKL "
        "thread that cannot get a core stalls these tiny matmuls by milliseconds)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = run(args.models, args.methods, args.dtypes, args.batch, args.quick, args.rounds)
    result = report(rows)
    print(format_table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
