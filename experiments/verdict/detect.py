"""Planted defects against the checks: how soon each is flagged, and what other checks say.

    python experiments/verdict/detect.py [--steps 40] [--model three_layer_relu]

Each defect of gradlab.studies.defects (on the output bias, the smallest tensor, unless it
needs another) trains through gradlab's own training for --steps steps in float32 and in
float64, with the default checks (a full check at step 0 and every 200, a directional one every
20) and with directional checks only; a defect is flagged by the first check that fails the
math or finds a precision problem. Beside that, on the first batch: torch.autograd.gradcheck in
float64 (its default tolerances, the method's gradient as the backward) and a fixed-tolerance
float32 check (the float32 gradient against float64 differences at 1e-2, gradlab's former
verdict, and at 2e-3, JAX check_grads' float32 tolerance). Writes detect.json, detect.md and
the README's detect section.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from gradlab.app.cli import compose
from gradlab.app.run import train
from gradlab.check import check_gradient
from gradlab.data import make_dataset
from gradlab.losses import mse_loss
from gradlab.measure.timing import environment
from gradlab.models import build_model
from gradlab.studies import defects
from gradlab.studies.results import write_results
from gradlab.training import metrics as m
from gradlab.training.record import read_metrics

HERE = Path(__file__).resolve().parent
CONF = HERE.parents[1] / "conf"
SIZES = (1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
CADENCES = {"default": [], "directional": ["check.full_every=0"]}


def cases() -> list[tuple[str, float | None]]:
    return [(k, s) for k in defects.SIZED for s in SIZES] + [
        (k, None) for k in (*defects.FIXED, *defects.PRECISION)
    ]


def flagged(kind: str, size: float | None, dtype: str, cadence: str, steps: int, model: str):
    """(checks until flagged, its step, what flagged it) of one training run, or None."""
    os.environ.update(DEFECT_KIND=kind, DEFECT_SIZE=str(size or 0.0))
    defects.reset()  # every run starts with a fresh method
    overrides = [
        f"model={model}",
        "grad=custom",
        "grad.method=gradlab.studies.defects.from_env",
        "grad.name=defect",
        f"dtype={dtype}",
        f"trainer.max_steps={steps}",
        "logger=csv",
        "trainer.mem_every=0",
        *CADENCES[cadence],
    ]
    with tempfile.TemporaryDirectory() as tmp:
        s = train(compose(CONF, overrides), Path(tmp))
        checked = [
            int(r["step"]) for r in read_metrics(Path(tmp) / "metrics.csv") if m.MATH_REL_ERR in r
        ]
    found = []
    for record, what in ((s.grad_check_first_fail, "math"), (s.grad_precision_first, "precision")):
        if record:
            found.append((record["step"], what, record["param"]))
    if not found:
        return None
    step, what, param = min(found)
    first_seen = 1 if kind == "leak" else 0  # a leak shows from the second call on
    return sum(first_seen <= c <= step for c in checked), step, what, param


def other_checks(kind: str, size: float | None, model_name: str) -> dict[str, bool]:
    """Whether gradcheck (float64) and fixed-tolerance float32 checks flag the defect."""
    out = {}
    method = defects.defect(kind, size or 0.0)
    for dtype in (torch.float64, torch.float32):
        model = build_model(model_name, dtype=dtype)
        data = make_dataset("regression", model, dtype=dtype)
        x, y = data.batch(0)
        method(model, x, y)  # a first call, so that a leak has something to leak
        _, grads = method(model, x, y)
        if dtype == torch.float64:
            out["gradcheck"] = not _gradcheck_passes(method, model, x, y)
        else:
            for tol in (1e-2, 2e-3):
                r = check_gradient(model, x, y, grads, mode="full", tol=tol)
                out[f"fixed {tol:g}"] = not r.passed
    return out


def _gradcheck_passes(method, model, x, y) -> bool:
    """torch.autograd.gradcheck of the loss as a function of the parameters, with the method's
    gradient as its backward (float64, gradcheck's default tolerances)."""
    names, params = zip(*model.named_parameters())

    def load(values) -> None:
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)

    class Loss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *values):
            load(values)
            ctx.save_for_backward(*values)
            with torch.no_grad():
                return mse_loss(model(x), y)

        @staticmethod
        def backward(ctx, grad):
            load(ctx.saved_tensors)
            _, grads = method(model, x, y)
            return tuple(grad * grads[n].detach() for n in names)

    start = [p.detach().clone().requires_grad_() for p in params]
    try:
        return torch.autograd.gradcheck(Loss.apply, start, raise_exception=False)
    finally:
        with torch.no_grad():
            for p, v in zip(params, start):
                p.copy_(v)


def cell(found) -> str:
    if found is None:
        return "missed"
    checks, step, what, param = found
    return f"check {checks} (step {step}): {what}, {param}"


def table(rows: list[dict], steps: int) -> str:
    lines = [
        "| defect | size | float32 | float64 | float32, directional only | float64, "
        "directional only | gradcheck (float64) | fixed 1e-2 (float32) | fixed 2e-3 "
        "(float32) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        size = "" if r["size"] is None else f"{r['size']:g}"
        runs = [
            cell(r["flagged"][k])
            for k in (
                "float32 default",
                "float64 default",
                "float32 directional",
                "float64 directional",
            )
        ]
        others = [
            "flagged" if r["others"][k] else "passes"
            for k in ("gradcheck", "fixed 0.01", "fixed 0.002")
        ]
        lines.append(f"| {r['kind']} | {size} | " + " | ".join(runs + others) + " |")
    lines += [
        "",
        f"Each run trains {steps} steps of {rows[0]['model']} (the defect on "
        "layer3.bias; transpose on layer2.weight); 'check n (step s)': the n-th check that "
        "saw the defect flagged it, at step s, by its math or its precision, naming that "
        "tensor. The default checks run a full check at step 0, so the directional-only columns "
        "show what a directional check alone finds.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--model", default="three_layer_relu")
    parser.add_argument("--out-dir", type=Path, default=HERE)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--render", type=Path, help="only rewrite the table from this JSON")
    args = parser.parse_args(argv)
    if args.render:
        result = json.loads(args.render.read_text())
        write_results(args.out_dir, "detect", result, table(result["rows"], result["steps"]))
        return result
    torch.set_num_threads(1)
    rows = []
    for kind, size in cases():
        found = {
            f"{d} {c}": flagged(kind, size, d, c, args.steps, args.model)
            for d in ("float32", "float64")
            for c in CADENCES
        }
        rows.append(
            {
                "kind": kind,
                "size": size,
                "model": args.model,
                "flagged": found,
                "others": other_checks(kind, size, args.model),
            }
        )
        print(kind, size, found, rows[-1]["others"], file=sys.stderr, flush=True)
    result = {"env": environment(), "steps": args.steps, "rows": rows}
    markdown = table(rows, args.steps)
    print(markdown)
    if not args.no_write:
        write_results(args.out_dir, "detect", result, markdown)
    return result


if __name__ == "__main__":
    main()
