"""The false-alarm soak: correct methods, trained as users train them, must never fail a check.

    python experiments/verdict/soak.py [--steps 150] [--long-steps 3000] [--seeds 0 1 2]

Every built-in method on both models, with sgd, adam and gd, in float32 and float64, over
several seeds, each run checked at every step (directional; a full check every 50 steps); then
long runs down to a loss below 1e-6 (the default checks: directional every 20 steps), and ReLU
runs with a step large enough to straddle kinks. Each run goes through gradlab's own training
(gradlab.app.run.train) and its metrics.csv is read back: a checked step fails when its math
error exceeds MATH_TOL, it is a precision finding when the measured ratio exceeds
PRECISION_FACTOR. Writes soak.json and soak.md here and the README's soak section.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from gradlab.app.cli import compose
from gradlab.app.run import train
from gradlab.check import MATH_TOL, PRECISION_FACTOR
from gradlab.grads import METHODS
from gradlab.measure.timing import environment
from gradlab.studies.results import write_results
from gradlab.training import metrics as m
from gradlab.training.record import read_metrics

HERE = Path(__file__).resolve().parent
CONF = HERE.parents[1] / "conf"
# what each model trains on, and a learning rate per optimizer that trains it
SETUPS = {
    "two_layer_sigmoid": (["data=xor"], {"sgd": 0.5, "adam": 0.05, "gd": 0.5}),
    "three_layer_relu": ([], {"sgd": 0.1, "adam": 0.01, "gd": 0.1}),
}


def grid(steps: int, long_steps: int, seeds: list[int], methods: list[str]) -> list[tuple]:
    """(group, overrides) of every run of the soak."""
    runs = []
    for model, (data, lrs) in SETUPS.items():
        for method, opt, dtype, seed in itertools.product(
            methods, lrs, ("float32", "float64"), seeds
        ):
            base = [f"model={model}", *data, f"grad={method}", f"optimizer={opt}", f"dtype={dtype}"]
            base += [f"optimizer.lr={lrs[opt]}", f"seed={seed}"]
            every = ["check.directional_every=1", "check.full_every=50"]
            runs.append(("grid", [*base, f"trainer.max_steps={steps}", *every]))
            if seed == seeds[0] and opt == "adam":  # down to a loss below 1e-6
                runs.append(("long", [*base, f"trainer.max_steps={long_steps}"]))
            if seed == seeds[0] and opt == "sgd" and model == "three_layer_relu":
                kinks = ["check.h=1e-4", *every]  # a step that straddles kinks now and then
                runs.append(("kinks", [*base, f"trainer.max_steps={steps}", *kinks]))
    return runs


def soak_run(group: str, overrides: list[str]) -> dict:
    """One run through gradlab's training; its checks counted from metrics.csv."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(CONF, ["logger=csv", "trainer.mem_every=0", *overrides])
        s = train(cfg, Path(tmp))
        rows = [r for r in read_metrics(Path(tmp) / "metrics.csv") if m.MATH_REL_ERR in r]
    errors = [
        max(v for k, v in r.items() if k == m.MATH_REL_ERR or k.startswith(m.REL_ERR_PREFIX))
        for r in rows
    ]
    ratios = [r[m.PRECISION_RATIO] for r in rows if m.PRECISION_RATIO in r]
    return {
        "group": group,
        **{k: getattr(s, k) for k in ("model", "grad", "optimizer", "dtype", "seed", "status")},
        "checks": len(rows),
        "math_failures": sum(e > MATH_TOL for e in errors),
        "precision_findings": sum(r > PRECISION_FACTOR for r in ratios),
        "math_rel_err_max": max(errors, default=None),
        "precision_ratio_max": max(ratios, default=None),
        "kinks": int(sum(r.get(m.KINKS, 0) for r in rows)),
        "loss_final": s.loss_final,
        "loss_min": min((r[m.LOSS] for r in rows), default=None),
        "grad_check": s.grad_check,
        "first_fail": s.grad_check_first_fail,
    }


def table(runs: list[dict]) -> str:
    """One row per (group, model, dtype, method) over optimizers and seeds."""
    keys = list(dict.fromkeys((r["group"], r["model"], r["dtype"], r["grad"]) for r in runs))
    lines = [
        "| set | model | dtype | method | runs | checked steps | math failures | precision "
        "findings | max math err | max precision ratio | kinks | lowest loss |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        rs = [r for r in runs if (r["group"], r["model"], r["dtype"], r["grad"]) == key]
        err = max((r["math_rel_err_max"] or 0.0) for r in rs)
        ratios = [r["precision_ratio_max"] for r in rs if r["precision_ratio_max"] is not None]
        ratio = f"{max(ratios):.3g}" if ratios else "-"
        loss = min(r["loss_min"] for r in rs if r["loss_min"] is not None)
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(rs)} | "
            f"{sum(r['checks'] for r in rs)} | {sum(r['math_failures'] for r in rs)} | "
            f"{sum(r['precision_findings'] for r in rs)} | {err:.1e} | "
            f"{ratio} | {sum(r['kinks'] for r in rs)} | {loss:.1e} |"
        )
    total = sum(r["checks"] for r in runs)
    fails = sum(r["math_failures"] for r in runs)
    found = sum(r["precision_findings"] for r in runs)
    where = sorted({f"{r['grad']} {r['dtype']}" for r in runs if r["precision_findings"]})
    lines += [
        "",
        f"{len(runs)} runs, {total} checked steps: {fails} math failures, {found} "
        f"precision findings (math tolerance {MATH_TOL:g}, precision factor "
        f"{PRECISION_FACTOR:g}), the findings all of {', '.join(where) or 'no run'}; "
        f"every run's status: {', '.join(sorted({r['status'] for r in runs}))}. "
        "Ratios '-': never measured (float64 runs, or the error never came near it).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=150, help="steps of each grid run")
    parser.add_argument("--long-steps", type=int, default=3000, help="steps of the long runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--out-dir", type=Path, default=HERE)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--render", type=Path, help="only rewrite the table from this JSON")
    args = parser.parse_args(argv)
    if args.render:
        result = json.loads(args.render.read_text())
        write_results(args.out_dir, "soak", result, table(result["runs"]))
        return result
    torch.set_num_threads(1)
    start, runs = time.perf_counter(), []
    for i, (group, overrides) in enumerate(
        grid(args.steps, args.long_steps, args.seeds, args.methods)
    ):
        runs.append(soak_run(group, overrides))
        print(
            f"{i + 1}: {group} {' '.join(overrides)} -> {runs[-1]['checks']} checks, "
            f"{runs[-1]['math_failures']} failures",
            file=sys.stderr,
            flush=True,
        )
    result = {"env": environment(), "seconds": round(time.perf_counter() - start), "runs": runs}
    markdown = table(runs)
    print(markdown)
    if not args.no_write:
        write_results(args.out_dir, "soak", result, markdown)
    return result


if __name__ == "__main__":
    main()
