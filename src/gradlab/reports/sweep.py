"""Summaries of a sweep dir: a row per job from what each job wrote (summary.json), so a job
that failed, diverged or never wrote its summary still shows, with its status."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from gradlab.reports.format import markdown_table, tally
from gradlab.reports.runs import job_dirs, job_summary

COLUMNS = [
    "job",
    "model",
    "grad",
    "optimizer",
    "lr",
    "dtype",
    "seed",
    "status",
    "loss_final",
    "grad_rel_err_max",
    "grad_check",
    "grad_precision",
    "grad_ms_median",
    "step_ms_median",
    "check_time_ratio",
    "peak_mem_mb",
    "reason",
]


def job_row(job_dir: Path) -> dict[str, Any]:
    summary = job_summary(job_dir)
    return {"job": job_dir.name, **{k: getattr(summary, k) for k in COLUMNS if k != "job"}}


def summarize_sweep(sweep_dir: Path) -> str:
    """Write sweep_dir/summary.csv and summary.md; return the markdown table."""
    rows = [job_row(d) for d in job_dirs(sweep_dir)]
    with (sweep_dir / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    table = markdown_table(rows, COLUMNS)
    counts = tally(r.get("status") or "?" for r in rows)
    (sweep_dir / "summary.md").write_text(
        f"# Sweep {sweep_dir.name}\n\n{len(rows)} jobs: {counts}\n\n{table}\n"
    )
    return f"{len(rows)} jobs: {counts}\n{table}"
