"""Finished runs as their files show them: a job's summary.json with its status settled, and
its metrics.csv; nothing else is read."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gradlab.training.record import RunSummary, read_metrics, read_summary


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


def job_summary(job_dir: Path) -> RunSummary:
    """A job's summary.json with status and reason settled: a job that wrote none, or an
    unreadable one, or one still "running" (it never finished) has failed, and says why."""
    path = job_dir / "summary.json"
    if not path.exists():
        return RunSummary(status="failed", reason="no summary.json (job crashed before training)")
    try:
        summary = RunSummary.from_dict(read_summary(path))
    except (ValueError, TypeError) as e:  # bad JSON, bad bytes, not an object
        return RunSummary(status="failed", reason=f"unreadable summary.json: {e}")
    if summary.status == "running":
        summary.update(status="failed", reason="job ended without finishing its summary")
    return summary


@dataclass
class Run:
    dir: Path
    summary: RunSummary
    metrics: list[dict[str, float]]

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """(steps, values) of a metrics.csv column, rows where it was measured and finite."""
        rows = [r for r in self.metrics if key in r and math.isfinite(r[key]) and "step" in r]
        return [r["step"] for r in rows], [r[key] for r in rows]

    def check_verdict(self) -> str:
        # A recorded first failure is a failed check whatever grad_check says.
        if self.summary.grad_check_first_fail:
            return "fail"
        return self.summary.grad_check or "none"


def find_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Every dir under `paths` holding a summary.json, or Hydra's .hydra (a job that crashed)."""
    found: set[Path] = set()
    for root in paths:
        for marker in ("summary.json", ".hydra"):
            found.update(p.parent.resolve() for p in root.rglob(marker))
    return sorted(found)


def load_run(run_dir: Path) -> Run:
    summary = job_summary(run_dir)  # status and reason settled for a job that did not finish
    summary.reason = summary.reason or ""
    try:
        metrics = read_metrics(run_dir / "metrics.csv")
    except (OSError, ValueError):
        metrics = []
    return Run(run_dir, summary, metrics)
