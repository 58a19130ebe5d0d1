"""What do the periodic checkpoints cost in the default run, and what does a 4-job sweep take on
SLURM against the basic launcher?

- checkpoints: the default run (`python src/train.py`, CSV logging) trained in-process by
  gradlab.app.run.train, each atomic save of `checkpoints/last.ckpt` timed; the figure is the
  saves' total against the run's own time (train(): build, fit, summary; the process start and
  imports of the CLI come on top).
- sweep: `python src/train.py -m grad=autograd,manual model=two_layer_sigmoid,three_layer_relu
  logger=csv`, the whole command's wall time with the basic launcher and with
  `hydra/launcher=slurm` (needs `sbatch`; `bash scripts/slurm_local.sh start` brings up a
  one-node cluster here), each repeated.

Writes results.json, results.md and the README's marked results section.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gradlab.app.checkpoints as checkpoints
from gradlab.app.cli import compose
from gradlab.app.run import train
from gradlab.studies.results import write_results
from gradlab.training.metrics import LOSS
from gradlab.training.record import read_metrics

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SWEEP = ["-m", "grad=autograd,manual", "model=two_layer_sigmoid,three_layer_relu", "logger=csv"]


def checkpoint_cost(runs: int) -> list[dict]:
    """One row per default run: its saves (ms each) and train()'s seconds."""
    saves: list[float] = []
    original = checkpoints.replace_atomically

    def timed(path, write):
        t0 = time.perf_counter()
        try:
            return original(path, write)
        finally:
            saves.append(time.perf_counter() - t0)

    checkpoints.replace_atomically = timed
    rows = []
    try:
        for _ in range(runs):
            saves.clear()
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                s = train(compose(ROOT / "conf", ["logger=csv"]), Path(tmp) / "run")
                wall = time.perf_counter() - t0
            rows.append({"steps": s.steps, "saves_ms": [t * 1e3 for t in saves], "train_s": wall})
    finally:
        checkpoints.replace_atomically = original
    return rows


def sweep_seconds(launcher: list[str], tmp: Path) -> tuple[float, list[float]]:
    """The sweep command's wall time and its jobs' final losses."""
    out = tmp / f"sweep-{time.monotonic_ns()}"
    args = [sys.executable, str(ROOT / "src" / "train.py"), *SWEEP, *launcher]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*args, f"hydra.sweep.dir={out}"], cwd=tmp, capture_output=True, text=True, timeout=900
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    losses = [read_metrics(d / "metrics.csv")[-1][LOSS] for d in sorted(out.glob("[0-9]*"))]
    return wall, losses


def measure(runs: int, repeats: int, partition: str) -> dict:
    result: dict = {"checkpoints": checkpoint_cost(runs), "sweeps": []}
    launchers = {"basic": []}
    if shutil.which("sbatch"):
        launchers["slurm"] = ["hydra/launcher=slurm", f"hydra.launcher.partition={partition}"]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):  # alternated, so other load spreads over both
            for name, extra in launchers.items():
                wall, losses = sweep_seconds(extra, Path(tmp))
                result["sweeps"].append({"launcher": name, "wall_s": wall, "losses": losses})
    return result


def to_markdown(result: dict, machine: str) -> str:
    lines = ["| default run | saves | ms each | saves ms | train() s | saves / train() |"]
    lines.append("|---|---:|---|---:|---:|---:|")
    for i, r in enumerate(result["checkpoints"], 1):
        total = sum(r["saves_ms"])
        each = ", ".join(f"{t:.1f}" for t in r["saves_ms"])
        lines.append(
            f"| {i} ({r['steps']} steps) | {len(r['saves_ms'])} | {each} | {total:.1f} | "
            f"{r['train_s']:.2f} | {total / 1e3 / r['train_s']:.2%} |"
        )
    lines += ["", "| sweep of 4 jobs | wall s (each repeat) | median s | same losses as basic |"]
    lines.append("|---|---|---:|---|")
    by = {}
    for s in result["sweeps"]:
        by.setdefault(s["launcher"], []).append(s)
    basic = by["basic"][0]["losses"]
    for name, rows in by.items():
        walls = [r["wall_s"] for r in rows]
        same = all(r["losses"] == basic for r in rows)
        lines.append(
            f"| {name} | {', '.join(f'{w:.1f}' for w in walls)} | "
            f"{statistics.median(walls):.1f} | {'yes' if same else 'no'} |"
        )
    if "slurm" not in by:
        lines.append("| slurm | not measured: no `sbatch` here | | |")
    lines += [
        "",
        f"`python experiments/cluster/run.py`; {machine}; the default run trained in-process "
        "(train(): build, fit and summary, without the CLI's process start); a sweep's wall: the "
        "whole `python src/train.py -m ...` command.",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="default runs timed for the checkpoints")
    p.add_argument("--repeats", type=int, default=3, help="sweeps per launcher")
    p.add_argument("--partition", default="debug")
    p.add_argument("--machine", default="2 shared CPU cores, the one-node cluster of slurm_local")
    a = p.parse_args()
    result = measure(a.runs, a.repeats, a.partition)
    result["machine"] = a.machine
    markdown = to_markdown(result, a.machine)
    write_results(HERE, "results", result, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
