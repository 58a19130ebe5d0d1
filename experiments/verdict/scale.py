"""What the checks cost as the net grows: three_layer_relu at widths 4 to 4096.

    python experiments/verdict/scale.py [--widths 4 16 64 256 1024 4096] [--steps 200]

For each width, on the default run's data (100 samples, full batch) and method (manual,
float32): the gradient's time, one directional and one full check's (the whole verdict: the
float64 re-run, the differences, the precision; the full one within its budget of
check.full_max_gradients gradients), timed standalone (warm medians), and from them the default
cadence's cost per step in gradients (a full check every full_every steps standing for that
step's directional one, a directional check every directional_every). Then the real command,
`python src/train.py model.hidden=W trainer.max_steps=STEPS logger=csv`, with the default checks
and with check=none: wall time of each and the checks' time over the gradients' time as the run
itself logged it (summary.json's check_time_ratio); and the issue's run at hidden 1024 with
batch 256. Writes scale.json, scale.md and the README's scale section.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from gradlab.app.cli import compose
from gradlab.app.job import build_job
from gradlab.app.validate import validate
from gradlab.measure.timing import environment, median_us
from gradlab.studies.results import write_results

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ISSUE_RUN = ["model.hidden=1024", "data.batch_size=256", "data.n_samples=1024"]


def standalone(width: int) -> dict:
    """Warm medians (ms) of the gradient and of one check of each mode, at this width."""
    cfg = validate(compose(ROOT / "conf", [f"model.hidden={width}", "logger=none"]))
    with tempfile.TemporaryDirectory() as tmp:
        job = build_job(cfg, Path(tmp))
    model, grad_fn, checks = job.model, job.runner.grad_fn, job.runner.checks
    x, y = job.data.batch(0)
    _, grads = grad_fn(model, x, y)
    run_time = 0.5 if width < 1024 else 2.0
    grad_ms = median_us(lambda: grad_fn(model, x, y), run_time) / 1e3
    budget_s = checks.settings.full_max_gradients * grad_ms / 1e3
    directional = median_us(lambda: checks.checker("directional", x, y, grads), run_time) / 1e3
    verdict = checks.checker("full", x, y, grads, budget_s)
    full = median_us(lambda: checks.checker("full", x, y, grads, budget_s), run_time) / 1e3
    s = checks.settings
    per_step = (
        directional * (1 / s.directional_every - 1 / math.lcm(s.directional_every, s.full_every))
        + full / s.full_every
    )
    return {
        "width": width,
        "params": sum(p.numel() for p in model.parameters()),
        "grad_ms": grad_ms,
        "directional_ms": directional,
        "full_ms": full,
        "full_coverage": verdict.math.coverage,
        "directional_in_gradients": directional / grad_ms,
        "full_in_gradients": full / grad_ms,
        "per_step_in_gradients": per_step / grad_ms,
    }


def cli(args: list[str]) -> tuple[float, dict]:
    """Wall seconds of `python src/train.py ARGS` and its summary.json."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        env = {**os.environ, "CI": "true", "WANDB_MODE": "disabled"}
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(ROOT / "src" / "train.py"), *args, f"hydra.run.dir={run_dir}"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.strip()[-400:]}")
        return wall, json.loads((run_dir / "summary.json").read_text())


def in_situ(overrides: list[str]) -> dict:
    """The run with the default checks and with check=none."""
    checked_s, checked = cli([*overrides, "logger=csv"])
    bare_s, _ = cli([*overrides, "logger=csv", "check=none"])
    return {
        "run": " ".join(overrides),
        "checked_s": checked_s,
        "check_none_s": bare_s,
        "wall_ratio": checked_s / bare_s,
        "logged_check_time_ratio": checked["check_time_ratio"],
        "checks": checked["grad_checks"],
        "full_coverage_min": checked["grad_full_coverage_min"],
        "grad_check": checked["grad_check"],
    }


def table(result: dict) -> str:
    lines = [
        "| width | parameters | gradient ms | directional check ms (gradients) | full check "
        "ms (gradients, coverage) | default checks per step (gradients) | run with checks "
        "s | check=none s | wall ratio | logged check / gradient time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a, b in zip(result["standalone"], result["in_situ"]):
        lines.append(
            f"| {a['width']} | {a['params']} | {a['grad_ms']:.3g} | {a['directional_ms']:.3g} "
            f"({a['directional_in_gradients']:.2f}) | {a['full_ms']:.3g} "
            f"({a['full_in_gradients']:.1f}, {a['full_coverage']:.2g}) | "
            f"{a['per_step_in_gradients']:.2f} | {b['checked_s']:.1f} | {b['check_none_s']:.1f} | "
            f"{b['wall_ratio']:.2f} | {b['logged_check_time_ratio']:.2f} |"
        )
    i = result["issue_run"]
    env = result["env"]
    lines += [
        "",
        f"`python src/train.py {i['run']} logger=csv`: {i['checked_s']:.1f} s with the "
        "default checks, "
        f"{i['check_none_s']:.1f} s with check=none ({i['wall_ratio']:.2f}x; the checks "
        f"logged {i['logged_check_time_ratio']:.2f}x the gradients' time).",
        "",
        f"Runs of {result['steps']} steps (wall time includes the process start, ~5 s). "
        f"{env['cpu']}, {env['cores']} cores, 1 torch thread, torch {env['torch']}; "
        f"{env['date']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--widths", type=int, nargs="+", default=[4, 16, 64, 256, 1024, 4096])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out-dir", type=Path, default=HERE)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = {"env": environment(), "steps": args.steps, "standalone": [], "in_situ": []}
    for width in args.widths:
        result["standalone"].append(standalone(width))
        steps = [f"model.hidden={width}", f"trainer.max_steps={args.steps}"]
        result["in_situ"].append(in_situ(steps))
        print(result["standalone"][-1], result["in_situ"][-1], file=sys.stderr, flush=True)
    result["issue_run"] = in_situ([*ISSUE_RUN, f"trainer.max_steps={args.steps}"])
    markdown = table(result)
    print(markdown)
    if not args.no_write:
        write_results(args.out_dir, "scale", result, markdown)
    return result


if __name__ == "__main__":
    main()
