"""What a run writes to its output dir: metrics.csv (a row per logged step, appended and flushed
in groups as the run goes; see gradlab.app.run.MetricSink) and summary.json. Reports read only
these files."""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from typing import Any


class MetricsCSV:
    """Append-only CSV with a fixed header; missing values are left empty."""

    def __init__(self, path: str | Path, columns: list[str]):
        self.path = Path(path)
        self.columns = ["step", *[c for c in columns if c != "step"]]
        resume = self.path.exists() and self.path.stat().st_size > 0
        self._file = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
        if not resume:
            self._writer.writeheader()
            self._file.flush()

    def write_rows(self, rows: list[tuple[int, dict[str, float]]]) -> None:
        """Append (step, metrics) rows, then flush once."""
        self._writer.writerows({"step": step, **metrics} for step, metrics in rows)
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """metrics.csv as a list of rows of floats (empty cells dropped)."""
    with Path(path).open(newline="") as f:
        return [
            {k: float(v) for k, v in row.items() if v not in ("", None)}
            for row in csv.DictReader(f)
        ]


class RunStats:
    """Running figures a summary needs, updated once per step."""

    def __init__(self):
        self.loss_initial: float | None = None
        self.loss_final: float | None = None
        self.grad_ms: list[float] = []
        self.step_ms: list[float] = []
        self.peak_mem_mb: float | None = None
        self.rel_err_max: float | None = None
        self.check_failed_at: dict[str, Any] | None = None
        self.checks = 0
        self.kinks = 0
        self.steps = 0

    def update(self, step: int, m: dict[str, float]) -> None:
        self.steps = step + 1
        loss = m.get("train/loss")
        if loss is not None:
            self.loss_initial = loss if self.loss_initial is None else self.loss_initial
            self.loss_final = loss
        for key, series in (("time/grad_ms", self.grad_ms), ("time/step_ms", self.step_ms)):
            if key in m:
                series.append(m[key])
        if "mem/peak_mb" in m:
            self.peak_mem_mb = max(self.peak_mem_mb or 0.0, m["mem/peak_mb"])
        if "grad/rel_err" in m:
            self.checks += 1
            self.kinks += int(m.get("grad/kinks", 0))
            err = m["grad/rel_err"]
            self.rel_err_max = err if self.rel_err_max is None else max(self.rel_err_max, err)

    def summary(self) -> dict[str, Any]:
        def median(xs):
            return statistics.median(xs) if xs else None

        return {
            "steps": self.steps,
            "loss_initial": self.loss_initial,
            "loss_final": self.loss_final,
            "grad_rel_err_max": self.rel_err_max,
            "grad_check": "fail" if self.check_failed_at else ("pass" if self.checks else "none"),
            "grad_check_first_fail": self.check_failed_at,
            "grad_checks": self.checks,
            "grad_kinks": self.kinks,
            "grad_ms_median": median(self.grad_ms),
            "step_ms_median": median(self.step_ms),
            "peak_mem_mb": self.peak_mem_mb,
        }


def json_safe(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as strings so the file stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_summary(path: str | Path, summary: dict[str, Any]) -> None:
    """Write summary.json atomically (a crash mid-write never leaves half a file)."""
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(json_safe(summary), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def read_summary(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
