"""Summaries of a sweep dir: a row per job from what each job wrote (summary.json), so a job
that failed, diverged or never wrote its summary still shows, with its status."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gradlab.runlog import read_summary

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
    "grad_ms_median",
    "step_ms_median",
    "peak_mem_mb",
    "reason",
]


def job_dirs(sweep_dir: Path) -> list[Path]:
    """Job dirs of a sweep: subdirs holding a summary.json or Hydra's .hydra folder."""
    dirs = [
        d
        for d in sweep_dir.iterdir()
        if d.is_dir() and ((d / "summary.json").exists() or (d / ".hydra").is_dir())
    ]

    def order(d: Path):
        head = d.name.split("-", 1)[0]
        return (int(head) if head.isdigit() else 1 << 30, d.name)

    return sorted(dirs, key=order)


def job_summary(job_dir: Path) -> dict[str, Any]:
    """A job's summary.json with status and reason settled: a job that wrote none, or an
    unreadable one, or one still "running" (it never finished) has failed, and says why."""
    path = job_dir / "summary.json"
    if not path.exists():
        return {"status": "failed", "reason": "no summary.json (job crashed before training)"}
    try:
        summary = read_summary(path)
    except ValueError as e:  # bad JSON or bad bytes
        return {"status": "failed", "reason": f"unreadable summary.json: {e}"}
    if summary.get("status") == "running":
        summary = {
            **summary,
            "status": "failed",
            "reason": "job ended without finishing its summary",
        }
    return summary


def job_row(job_dir: Path) -> dict[str, Any]:
    summary = job_summary(job_dir)
    return {"job": job_dir.name, **{k: summary.get(k) for k in COLUMNS if k != "job"}}


def tally(statuses: Iterable[str]) -> str:
    """How many of each status, by name: '2 completed, 1 diverged'."""
    return ", ".join(f"{n} {s}" for s, n in sorted(Counter(statuses).items()))


def cell(value: Any) -> str:
    """A table cell: floats to 4 significant digits, None empty, no stray column bars."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value).replace("|", "/")


def markdown_table(rows: list[dict[str, Any]], columns: list[str] = COLUMNS) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def summarize_sweep(sweep_dir: Path) -> str:
    """Write sweep_dir/summary.csv and summary.md; return the markdown table."""
    rows = [job_row(d) for d in job_dirs(sweep_dir)]
    with (sweep_dir / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    table = markdown_table(rows)
    counts = tally(r.get("status") or "?" for r in rows)
    (sweep_dir / "summary.md").write_text(
        f"# Sweep {sweep_dir.name}\n\n{len(rows)} jobs: {counts}\n\n{table}\n"
    )
    return f"{len(rows)} jobs: {counts}\n{table}"
