"""Summaries of a sweep dir: a row per job from what each job wrote (summary.json), so a job
that failed, diverged or never wrote its summary still shows, with its status."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

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


def job_row(job_dir: Path) -> dict[str, Any]:
    path = job_dir / "summary.json"
    if not path.exists():
        return {
            "job": job_dir.name,
            "status": "failed",
            "reason": "no summary.json (job crashed before training)",
        }
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        return {"job": job_dir.name, "status": "failed", "reason": f"unreadable summary.json: {e}"}
    if summary.get("status") == "running":
        summary = {
            **summary,
            "status": "failed",
            "reason": "job ended without finishing its summary",
        }
    return {"job": job_dir.name, **{k: summary.get(k) for k in COLUMNS if k != "job"}}


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
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("status") or "?"] = counts.get(r.get("status") or "?", 0) + 1
    table = markdown_table(rows)
    tally = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    (sweep_dir / "summary.md").write_text(
        f"# Sweep {sweep_dir.name}\n\n{len(rows)} jobs: {tally}\n\n{table}\n"
    )
    return f"{len(rows)} jobs: {tally}\n{table}"
