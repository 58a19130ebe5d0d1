"""What a run writes to its output dir, and nothing else is read by reports: metrics.csv (a row
per logged step, appended in groups as the run goes) and summary.json, whose schema is
RunSummary."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class RunSummary:
    """summary.json: how a run was set up, how it ended and what it measured. A field a run
    did not measure is None."""

    # what ran
    run_name: str | None = None
    model: str | None = None  # the model choice
    model_desc: str | None = None  # what it is: an MLP's sizes, another module's class
    params: int | None = None  # parameter count
    grad: str | None = None  # the grad choice's name
    method: str | None = None  # the method's name or import path
    optimizer: str | None = None
    lr: float | None = None
    device: str | None = None
    dtype: str | None = None
    seed: int | None = None
    data: str | None = None
    loss: str | None = None  # mse | cross_entropy
    # how it ended: running | completed | diverged | failed | interrupted, and why
    status: str = "running"
    reason: str = ""
    output_dir: str | None = None
    checkpoint: str | None = None  # saved on an interruption, to resume from
    resumed_from: str | None = None  # the checkpoint this run started from
    job_id: str | None = None  # the batch scheduler's job id (SLURM: array_task), if any
    job_restarts: int | None = None  # how often the scheduler had restarted that job
    wandb_dir: str | None = None
    wandb_sync: str | None = None
    elapsed_s: float | None = None
    # training
    steps: int = 0
    loss_initial: float | None = None
    loss_final: float | None = None
    grad_ms_median: float | None = None
    step_ms_median: float | None = None
    peak_mem_mb: float | None = None
    val_loss_final: float | None = None  # after the last step, on the validation split
    val_acc_final: float | None = None  # (class labels)
    # the checks (gradlab.check): the math verdict, and the precision of the run's dtype
    grad_check: str = "none"  # pass | fail | none (no check ran)
    grad_check_first_fail: dict[str, Any] | None = None  # step, mode, param, rel_err, tol
    grad_check_basis: str | None = None  # what the math was judged on (a fallback says why)
    grad_checks: int = 0
    grad_kinks: int = 0
    grad_rel_err_max: float | None = None  # the run gradient against the reference, worst
    grad_math_rel_err_max: float | None = None
    grad_precision: str = "none"  # ok | finding | none (not judged: a float64 run, no check)
    grad_precision_first: dict[str, Any] | None = None  # step, param, ratio, rel_err, ...
    grad_precision_ratio_max: float | None = None
    grad_full_coverage_min: float | None = None  # the least fraction a full check compared
    check_ms_total: float | None = None
    check_time_ratio: float | None = None  # the checks' time over the gradients' time

    @classmethod
    def fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        """From summary.json's content: unknown keys are ignored, missing ones default."""
        known = set(cls.fields())
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def update(self, **values: Any) -> None:
        for key, value in values.items():
            if key not in self.__dataclass_fields__:
                raise AttributeError(f"RunSummary has no field {key!r}")
            setattr(self, key, value)


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


def json_safe(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as strings so the file stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_summary(path: str | Path, summary: RunSummary | dict[str, Any]) -> None:
    """Write summary.json atomically (a crash mid-write never leaves half a file)."""
    data = summary.to_dict() if isinstance(summary, RunSummary) else summary
    path = Path(path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(json_safe(data), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def read_summary(path: str | Path) -> dict[str, Any]:
    """summary.json's content as written (RunSummary.from_dict gives the typed record)."""
    return json.loads(Path(path).read_text())
