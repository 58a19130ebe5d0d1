"""Article 004's comparison, measured: autograd vs manual vs Function vs finite differences.

    python experiments/three_methods/run.py [--steps 200] [--device cpu|cuda] [--out DIR]

Runs one sweep through the real CLI (experiment=three_methods: 3-layer ReLU 4-16-16-1, 100
samples, SGD lr 0.01; float32 and float64), reports it with gradlab.reports.table, and writes
results.json, results.md and the plots into --out (default: this folder), then rewrites the
results section of README.md. Nothing in the tables is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
METHODS = ("autograd", "manual", "function", "numerical")
# Article 004's published table (the project's seed digest, SEEDS.md): ms/iteration, MB, precision.
PUBLISHED = {
    "autograd": ("1.2", "8.3", "1e-16"),
    "manual": ("2.8", "7.9", "1e-16"),
    "function": ("-", "-", "-"),
    "numerical": ("45", "12.1", "1e-7"),
}


def run_sweep(sweep: Path, steps: int, device: str) -> None:
    args = [
        sys.executable,
        str(ROOT / "src" / "train.py"),
        "-m",
        "experiment=three_methods",
        f"grad={','.join(METHODS)}",
        "dtype=float32,float64",
        f"trainer.max_steps={steps}",
        "trainer.mem_every=20",
        "logger=csv",
        f"device={device}",
        f"hydra.sweep.dir={sweep}",
    ]
    env = {**os.environ, "CI": "true"}
    subprocess.run(args, cwd=sweep.parent, env=env, check=True, capture_output=True, text=True)


def table(rows: list[dict]) -> str:
    lines = [
        "| dtype | method | grad ms (median) | published ms/iter | step ms incl. checks "
        "| peak MB per gradient | published MB | rel err vs FD (median / max) "
        "| published precision | check |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        pub = PUBLISHED[r["grad"]]
        lines.append(
            f"| {r['dtype']} | {r['grad']} | {r['grad_ms_median']:.3f} | {pub[0]} | "
            f"{r['step_ms_median']:.3f} | {r['peak_mem_mb'] * 2**20 / 1e6:.4f} | {pub[1]} | "
            f"{r['rel_err_median']:.1e} / {r['rel_err_max']:.1e} | {pub[2]} | {r['grad_check']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from gradlab.measure.timing import environment
    from gradlab.reports.write import write_report
    from gradlab.studies.results import rewrite_section

    with tempfile.TemporaryDirectory() as tmp:
        sweep = Path(tmp) / "sweep"
        run_sweep(sweep, args.steps, args.device)
        write_report([sweep], out=args.out)
        import csv

        with (args.out / "report.csv").open() as f:
            raw = list(csv.DictReader(f))
    rows = []
    for r in raw:
        row = {
            k: (float(v) if re.fullmatch(r"[-+0-9.eE]+|nan|inf", v or "") else v)
            for k, v in r.items()
        }
        rows.append(row)
    rows.sort(key=lambda r: (r["dtype"], METHODS.index(r["grad"])))
    env = {**environment(), "device": args.device, "steps": args.steps}
    (args.out / "results.json").write_text(json.dumps({"env": env, "rows": rows}, indent=2) + "\n")
    md = table(rows)
    machine = (
        f"Machine: {env['cpu']} ({env['cores']} cores), torch {env['torch']}, {env['date']}; "
        f"device {args.device}; {args.steps} steps, batch 100."
    )
    (args.out / "results.md").write_text(md + "\n\n" + machine + "\n")
    if args.out == HERE:
        rewrite_section(HERE / "README.md", f"{md}\n\n{machine}")
    print(md)
    print(machine)


if __name__ == "__main__":
    main()
