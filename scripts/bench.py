"""Framework overhead: does the measurement cost more than what it measures?

    python scripts/bench.py --out experiments/perf/bench_cpu.json [--device cuda] [--no-sweeps]

Every figure comes from one run of `measure()` on one machine:
- default_run_s: the README's main command (`python src/train.py`), process start to exit;
- lightning_step_us / plain_step_us: marginal wall time per training step, (T(n2) - T(n1)) /
  (n2 - n1), of Lightning's fit loop vs a plain PyTorch loop calling the same StepRunner (same
  method, checks and metrics.csv cadence), so start-up costs cancel out;
- sweep12_basic_s / sweep12_joblib_s: a 12-job sweep (3 methods x 2 models x 2 optimizers),
  200 steps each;
- grad_ms_logged_vs_standalone: median logged time/grad_ms of the default run divided by the
  standalone benchmark (gradlab.measure.timing) of the same method, model, dtype and thread count;
- check_overhead_ratio: per-step cost of the default checks (the schema's cadence, amortized:
  by default directional every 20 steps, full every 200 standing for that step's directional
  one), each the whole verdict (float64 re-run, differences, precision), divided by the gradient
  computation itself, all three timed standalone on the default run's model, data and dtype.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "src" / "train.py"
SWEEP12 = [
    "-m",
    "grad=autograd,manual,function",
    "model=two_layer_sigmoid,three_layer_relu",
    "optimizer=sgd,adam",
    "trainer.max_steps=200",
    "logger=csv",
]


def _cli(args: list[str], cwd: Path) -> float:
    env = {**os.environ, "CI": "true"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(TRAIN), *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return wall


def _compose(overrides: list[str]):
    from gradlab.app.cli import compose

    return compose(ROOT / "conf", overrides)


def _fit_seconds(overrides: list[str], steps: int, plain: bool, device: str) -> float:
    """Wall time of `steps` training steps, by Lightning's loop or by a plain loop."""
    from gradlab.app.job import build_job
    from gradlab.app.validate import validate

    cfg = validate(_compose([*overrides, f"trainer.max_steps={steps}", f"device={device}"]))
    with tempfile.TemporaryDirectory() as tmp:
        job = build_job(cfg, Path(tmp))
        try:
            t0 = time.perf_counter()
            if plain:  # the same steps, one by one, logged as a run logs them
                opt = job.module.make_optimizer(list(job.model.parameters()))
                for step in range(steps):
                    x, y = job.data.batch(step)
                    job.sink(step, job.runner(x, y, step, opt.step))
            else:
                job.trainer.fit(job.module, job.batches)
            if job.device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        finally:
            job.sink.close()
    return seconds


def marginal_step_us(
    overrides: list[str],
    plain: bool,
    device: str = "cpu",
    n1: int = 100,
    n2: int = 600,
    repeats: int = 3,
) -> float:
    """Median over repeats of (T(n2) - T(n1)) / (n2 - n1), in microseconds."""
    samples = []
    for _ in range(repeats):
        t1 = _fit_seconds(overrides, n1, plain, device)
        t2 = _fit_seconds(overrides, n2, plain, device)
        samples.append((t2 - t1) / (n2 - n1) * 1e6)
    return statistics.median(samples)


def _logged_grad_ms(run_dir: Path) -> float:
    from gradlab.training import metrics
    from gradlab.training.record import read_metrics

    rows = read_metrics(run_dir / "metrics.csv")[1:]
    return statistics.median(r[metrics.GRAD_MS] for r in rows)


def _standalone(cfg) -> dict[str, float]:
    """Standalone medians (us) of the gradient and of the checks of the run `cfg` composes: its
    method, model, first batch, dtype, device, check settings and thread count."""
    from gradlab.app.job import build_job
    from gradlab.app.validate import validate
    from gradlab.measure.timing import median_us

    with tempfile.TemporaryDirectory() as tmp:
        job = build_job(validate(cfg), Path(tmp))
    model, grad_fn, checks = job.model, job.runner.grad_fn, job.runner.checks
    x, y = job.data.batch(0)
    _, grads = grad_fn(model, x, y)
    grad_us = median_us(lambda: grad_fn(model, x, y), 1.0)
    budget_s = checks.settings.full_max_gradients * grad_us * 1e-6
    return {
        "grad": grad_us,
        "directional": median_us(lambda: checks.checker("directional", x, y, grads), 1.0),
        "full": median_us(lambda: checks.checker("full", x, y, grads, budget_s), 1.0),
    }


def amortized(alone: dict[str, float], cadence) -> float:
    """The checks' time per step: a full check every full_every steps, a directional one on the
    other multiples of directional_every (a full check stands for it)."""
    d, f = cadence.directional_every, cadence.full_every
    full_rate = 1 / f if f else 0.0
    directional_rate = (1 / d - (1 / math.lcm(d, f) if f else 0.0)) if d else 0.0
    return alone["directional"] * directional_rate + alone["full"] * full_rate


def measure(device: str = "cpu", sweeps: bool = True) -> dict:
    """All the figures in one run (see the module docstring)."""
    import importlib.util

    from gradlab.measure import timing

    result: dict = {}
    # The default run logs to W&B; where wandb is not installed (a bare GPU box) it logs CSV only.
    logger = [] if importlib.util.find_spec("wandb") else ["logger=csv"]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "default"
        on = [] if device == "cpu" else [f"device={device}"]
        result["default_run_s"] = _cli([f"hydra.run.dir={run_dir}", *logger, *on], Path(tmp))
        logged_ms = _logged_grad_ms(run_dir)
        # the same run without checks: how much of the gap the checks between two steps make
        bare = Path(tmp) / "no_checks"
        _cli([f"hydra.run.dir={bare}", "check=none", "logger=csv", *on], Path(tmp))
        logged_bare_ms = _logged_grad_ms(bare)
        if sweeps:
            result["sweep12_basic_s"] = _cli([*SWEEP12, f"hydra.sweep.dir={tmp}/s1"], Path(tmp))
            result["sweep12_joblib_s"] = _cli(
                [*SWEEP12, "hydra/launcher=joblib", f"hydra.sweep.dir={tmp}/s2"], Path(tmp)
            )
    overrides = ["logger=csv"]
    result["lightning_step_us"] = marginal_step_us(overrides, plain=False, device=device)
    result["plain_step_us"] = marginal_step_us(overrides, plain=True, device=device)
    default = _compose(on)  # the default run's config
    cadence = default.check
    alone = _standalone(default)
    result["grad_ms_logged_vs_standalone"] = logged_ms * 1e3 / alone["grad"]
    result["check_overhead_ratio"] = amortized(alone, cadence) / alone["grad"]
    result["env"] = {
        **timing.environment(),
        "device": device if device == "cpu" else torch.cuda.get_device_name(),
        "threads": default.threads,
        "default_run_logger": "wandb+csv" if not logger else "csv (wandb not installed)",
        "logged_grad_ms_median": logged_ms,
        "logged_grad_ms_median_check_none": logged_bare_ms,
        "standalone_grad_us": alone["grad"],
        "standalone_check_directional_us": alone["directional"],
        "standalone_check_full_us": alone["full"],
        "check_cadence": {
            "directional_every": cadence.directional_every,
            "full_every": cadence.full_every,
        },
    }
    return result


def format_table(result: dict) -> str:
    ratio = result["lightning_step_us"] / result["plain_step_us"]
    rows = [
        ("default_run_s", result["default_run_s"], "<= 15 s", result["default_run_s"] <= 15),
        ("lightning_step_us", result["lightning_step_us"], "", None),
        ("plain_step_us", result["plain_step_us"], "", None),
        ("lightning / plain", ratio, "<= 2", ratio <= 2),
        (
            "sweep12_basic_s",
            result.get("sweep12_basic_s"),
            "< 90 s",
            result["sweep12_basic_s"] < 90 if "sweep12_basic_s" in result else None,
        ),
        ("sweep12_joblib_s", result.get("sweep12_joblib_s"), "", None),
        (
            "grad_ms_logged_vs_standalone",
            result["grad_ms_logged_vs_standalone"],
            "0.75 .. 1.25",
            abs(result["grad_ms_logged_vs_standalone"] - 1) <= 0.25,
        ),
        (
            "check_overhead_ratio",
            result["check_overhead_ratio"],
            "<= 1",
            result["check_overhead_ratio"] <= 1,
        ),
    ]
    lines = ["| figure | measured | target | met |", "|---|---|---|---|"]
    for name, value, target, met in rows:
        shown = "-" if value is None else f"{value:.3g}"
        verdict = "" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {name} | {shown} | {target} | {verdict} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--no-sweeps", action="store_true", help="skip the two 12-job sweeps")
    args = parser.parse_args()
    result = measure(device=args.device, sweeps=not args.no_sweeps)
    print(format_table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
