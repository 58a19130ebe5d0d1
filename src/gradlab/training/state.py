"""The state of one run as it goes: how it stands (running, diverged, failed) and the running
figures its summary is made of, updated from each step's metrics and each check's verdict."""

from __future__ import annotations

import math
import statistics
from typing import Any

import gradlab.training.metrics as m
from gradlab.check import Verdict


class RunState:
    """status ("running", or why it stopped), reason, and what summary.json reports."""

    def __init__(self):
        self.status, self.reason = "running", ""
        self.steps = 0
        self.loss_initial: float | None = None
        self.loss_final: float | None = None
        self.grad_ms: list[float] = []
        self.step_ms: list[float] = []
        self.peak_mem_mb: float | None = None
        self.checks = self.kinks = 0
        self.rel_err_max: float | None = None
        self.math_rel_err_max: float | None = None
        self.check_basis: str | None = None
        self.first_fail: dict[str, Any] | None = None
        self.precision_judged = False
        self.first_finding: dict[str, Any] | None = None
        self.ratio_max: float | None = None
        self.coverage_min: float | None = None
        self.check_ms = 0.0
        self.val_loss: float | None = None
        self.val_acc: float | None = None

    def stop(self, status: str, reason: str) -> None:
        """The run cannot go on: diverged or failed, and why."""
        self.status, self.reason = status, reason

    def record(self, step: int, metrics: dict[str, float]) -> None:
        """A step's metrics (every step, logged or not)."""
        self.steps = step + 1
        if (loss := metrics.get(m.LOSS)) is not None:
            self.loss_initial = loss if self.loss_initial is None else self.loss_initial
            self.loss_final = loss
        for key, series in ((m.GRAD_MS, self.grad_ms), (m.STEP_MS, self.step_ms)):
            if key in metrics:
                series.append(metrics[key])
        if m.PEAK_MB in metrics:
            self.peak_mem_mb = max(self.peak_mem_mb or 0.0, metrics[m.PEAK_MB])
        self.check_ms += metrics.get(m.CHECK_MS, 0.0)
        self.val_loss = metrics.get(m.VAL_LOSS, self.val_loss)
        self.val_acc = metrics.get(m.VAL_ACC, self.val_acc)
        if m.REL_ERR in metrics:
            self.checks += 1
            self.kinks += int(metrics.get(m.KINKS, 0))
            self.rel_err_max = _max(self.rel_err_max, metrics[m.REL_ERR])
            self.math_rel_err_max = _max(self.math_rel_err_max, metrics.get(m.MATH_REL_ERR))
            self.ratio_max = _max(self.ratio_max, metrics.get(m.PRECISION_RATIO))
            if (coverage := metrics.get(m.COVERAGE)) is not None:
                self.coverage_min = min(self.coverage_min or 1.0, coverage)

    def judged(self, step: int, verdict: Verdict) -> None:
        """A check's verdict: the first math failure and the first precision finding are kept."""
        self.check_basis = verdict.basis
        math_result = verdict.math
        if not math_result.passed and self.first_fail is None:
            worst = math_result.worst_param
            alone = bool(worst) and math_result.rel_err_per_param[worst] > math_result.tol
            self.first_fail = {
                "step": step,
                "mode": verdict.mode,
                "param": worst if alone else "all (global)",
                "rel_err": math_result.rel_err_per_param[worst] if alone else math_result.rel_err,
                "tol": math_result.tol,
                "basis": verdict.basis,
            }
        found = verdict.precision
        if found is not None:
            self.precision_judged = True
            if found.finding and self.first_finding is None:
                self.first_finding = {
                    "step": step,
                    "param": found.worst_param,
                    "ratio": found.ratio,
                    "rel_err": found.rel_err,
                    "dtype_rel_err": found.dtype_rel_err,
                    "effective_dtype": found.effective_dtype or None,
                    "excluded": found.excluded,
                }

    def summary_fields(self) -> dict[str, Any]:
        """The RunSummary fields this state settles."""
        grad_s = sum(self.grad_ms)
        precision = "none"
        if self.precision_judged:
            precision = "finding" if self.first_finding else "ok"
        return {
            "steps": self.steps,
            "loss_initial": self.loss_initial,
            "loss_final": self.loss_final,
            "grad_ms_median": statistics.median(self.grad_ms) if self.grad_ms else None,
            "step_ms_median": statistics.median(self.step_ms) if self.step_ms else None,
            "peak_mem_mb": self.peak_mem_mb,
            "val_loss_final": self.val_loss,
            "val_acc_final": self.val_acc,
            "grad_check": "fail" if self.first_fail else ("pass" if self.checks else "none"),
            "grad_check_first_fail": self.first_fail,
            "grad_check_basis": self.check_basis,
            "grad_checks": self.checks,
            "grad_kinks": self.kinks,
            "grad_rel_err_max": self.rel_err_max,
            "grad_math_rel_err_max": self.math_rel_err_max,
            "grad_precision": precision,
            "grad_precision_first": self.first_finding,
            "grad_precision_ratio_max": self.ratio_max,
            "grad_full_coverage_min": self.coverage_min,
            "check_ms_total": self.check_ms if self.checks else None,
            "check_time_ratio": self.check_ms / grad_s if self.checks and grad_s > 0 else None,
        }


def _max(current: float | None, value: float | None) -> float | None:
    """The running maximum; an inf (a NaN/inf gradient) is the worst, a NaN is skipped."""
    if value is None or math.isnan(value):
        return current
    return value if current is None else max(current, value)
