"""The comparison table of finished runs: article 004's table, measured. Runs that agree on
KEY are repeats (seeds) of one configuration and are aggregated into one row."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import gradlab.training.metrics as m
from gradlab.reports.format import cell, tally
from gradlab.reports.runs import Run

KEY = ("model", "grad", "method", "optimizer", "lr", "dtype", "device", "data", "loss")
GRAD_ORDER = ("autograd", "manual", "function", "fused", "tape", "numerical")
COLUMNS = [*KEY, "n", "status", "steps", "grad_ms_median", "grad_ms_p25", "grad_ms_p75"]
COLUMNS += ["step_ms_median", "check_ms_median", "check_time_ratio", "peak_mem_mb"]
COLUMNS += ["rel_err_max", "rel_err_median", "math_rel_err_max", "grad_check", "precision"]
COLUMNS += ["loss_final", "val_loss_final", "val_acc_final", "params", "model_desc", "reason"]


def _num(value: Any) -> float | None:
    """A summary number: floats as written, NaN/inf written as strings, None when absent."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _finite(xs: Iterable[float | None]) -> list[float]:
    return [x for x in xs if x is not None and math.isfinite(x)]


def _median(xs: Iterable[float | None]) -> float | None:
    xs = _finite(xs)
    return statistics.median(xs) if xs else None


def _quartiles(xs: list[float]) -> tuple[float | None, float | None]:
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (None, None)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def _key(run: Run) -> tuple:
    if run.summary.grad is None:  # nothing known about it: keep it on its own row
        return ("?", run.dir.name, *[None] * (len(KEY) - 2))
    return tuple(getattr(run.summary, k) for k in KEY)


def order_key(key: tuple) -> tuple:
    grad = key[1]
    rank = GRAD_ORDER.index(grad) if grad in GRAD_ORDER else len(GRAD_ORDER)
    return (str(key[0]), rank, str(grad), *[str(k) for k in key[2:]])


def group_runs(runs: list[Run]) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(_key(run), []).append(run)
    return {k: groups[k] for k in sorted(groups, key=order_key)}


def _tally(values: list[str]) -> str:
    counts = {v: values.count(v) for v in dict.fromkeys(values)}
    return ", ".join(f"{n} {v}" if len(counts) > 1 else v for v, n in counts.items())


def _span(xs: Iterable[float | None]) -> str:
    xs = sorted({int(x) for x in _finite(xs)})
    return "" if not xs else str(xs[0]) if len(xs) == 1 else f"{xs[0]}–{xs[-1]}"


def _verdict(checks: list[str], bad: str = "fail") -> str:
    fails = checks.count(bad)
    if fails:
        return bad if len(checks) == 1 else f"{bad} ({fails}/{len(checks)})"
    return _tally(checks)


def _per_run(runs: list[Run], metric: str, summary_key: str, agg=statistics.median) -> list:
    """summary.json's figure (over every step) where it has one, else metrics.csv's, which holds
    only the logged steps (trainer.log_every_n_steps)."""
    out = []
    for r in runs:
        value = _num(getattr(r.summary, summary_key))
        values = r.series(metric)[1]
        out.append(value if value is not None else (agg(values) if values else None))
    return out


def _worst(xs: Iterable[float | None]) -> float | None:
    """The largest; inf (a NaN/inf gradient) is the worst error, not a missing one."""
    return max((x for x in xs if x is not None and x == x), default=None)


def _reasons(runs: list[Run], checks: list[str]) -> str:
    reasons = dict.fromkeys(r.summary.reason for r in runs if r.summary.reason)
    fails = [r.summary.grad_check_first_fail for r, c in zip(runs, checks) if c == "fail"]
    if fails:
        f = fails[0]
        reasons[
            f"check failed at step {f.get('step')} on {f.get('param')}: "
            f"rel err {_num(f.get('rel_err')):.3g} > tol {_num(f.get('tol')):.3g}"
        ] = None
    if found := next((r.summary.grad_precision_first for r in runs
                      if r.summary.grad_precision_first), None):  # fmt: skip
        what = found.get("effective_dtype") or f"{_num(found.get('ratio')):.3g}x the dtype's own"
        reasons[
            f"precision finding at step {found.get('step')} on {found.get('param')}: {what}"
        ] = None
    return "; ".join(reasons)


def group_row(key: tuple, runs: list[Run]) -> dict[str, Any]:
    """One table row: per-run figures, then the median across runs (max for the worst error)."""
    grad_ms = [x for r in runs for x in r.series(m.GRAD_MS)[1]]
    p25, p75 = _quartiles(grad_ms)
    checks = [r.check_verdict() for r in runs]
    losses = [_num(r.summary.loss_final) for r in runs]
    return {
        **dict(zip(KEY, key)),
        "n": len(runs),
        "status": _tally([r.summary.status for r in runs]),
        "steps": _span(_num(r.summary.steps) for r in runs),
        "grad_ms_median": _median(_per_run(runs, m.GRAD_MS, "grad_ms_median")),
        "grad_ms_p25": p25,
        "grad_ms_p75": p75,
        "step_ms_median": _median(_per_run(runs, m.STEP_MS, "step_ms_median")),
        "check_ms_median": _median(x for r in runs for x in r.series(m.CHECK_MS)[1]),
        "check_time_ratio": _median(_num(r.summary.check_time_ratio) for r in runs),
        "peak_mem_mb": _median(_per_run(runs, m.PEAK_MB, "peak_mem_mb", max)),
        "rel_err_max": _worst(_per_run(runs, m.REL_ERR, "grad_rel_err_max", max)),
        "rel_err_median": _median(x for r in runs for x in r.series(m.REL_ERR)[1]),
        "math_rel_err_max": _worst(_per_run(runs, m.MATH_REL_ERR, "grad_math_rel_err_max", max)),
        "grad_check": _verdict(checks),
        "precision": _verdict([r.summary.grad_precision or "none" for r in runs], "finding"),
        # Diverged runs end on NaN/inf: the median is over finite losses, NaN when there are none.
        "loss_final": _median(losses)
        if _finite(losses)
        else next((x for x in losses if x is not None), None),
        "val_loss_final": _median(_num(r.summary.val_loss_final) for r in runs),
        "val_acc_final": _median(_num(r.summary.val_acc_final) for r in runs),
        "params": _median(_num(r.summary.params) for r in runs),
        "model_desc": _tally([r.summary.model_desc or "" for r in runs]),
        "reason": _reasons(runs, checks),
    }


@dataclass
class Report:
    """The grouped runs and how to present them (which config keys vary, the memory unit)."""

    runs: list[Run]
    groups: dict[tuple, list[Run]]
    rows: list[dict[str, Any]]
    varying: list[str]  # KEY fields besides model and grad that differ between rows
    common: dict[str, Any]  # KEY fields that are the same for every row
    mem_unit: tuple[str, float]  # ("KiB", 1024) or ("MiB", 1): display unit, factor from MiB

    @classmethod
    def build(cls, runs: list[Run]) -> Report:
        groups = group_runs(runs)
        rows = [group_row(k, rs) for k, rs in groups.items()]
        known = [r for r in rows if r["model"] != "?"] or rows
        varying, common = [], {}
        for k in KEY[2:]:
            values = {r[k] for r in known}
            if k == "method" and all(r["method"] == r["grad"] for r in known):
                continue  # the usual case: a grad choice names its method
            if len(values) > 1:
                varying.append(k)
            else:
                common[k] = next(iter(values))
        peak = max(_finite(r["peak_mem_mb"] for r in rows), default=0.0)
        return cls(
            runs, groups, rows, varying, common, ("KiB", 1024.0) if peak < 1 else ("MiB", 1.0)
        )

    def variant(self, key: tuple) -> list[str]:
        return [
            f"{k} {cell(v)}" if k == "lr" else cell(v)
            for k, v in zip(KEY, key)
            if k in self.varying
        ]

    def label(self, key: tuple, sep: str = ", ", n: bool = True) -> str:
        runs = len(self.groups[key])
        return sep.join(
            [str(key[1]), *self.variant(key), *([f"n={runs}"] if n and runs > 1 else [])]
        )

    def table(self) -> tuple[list[str], list[dict[str, str]]]:
        """Column titles and display rows of the comparison table."""
        unit, factor = self.mem_unit
        cols = ["model", "grad", *self.varying, "n", "status", "steps", "grad ms median (IQR)"]
        cols += ["step ms median", "check / grad time", f"peak mem {unit}", "rel err max"]
        cols += ["rel err median", "check", "precision", "loss final"]
        val = [
            k
            for k in ("val_loss_final", "val_acc_final")
            if any(r[k] is not None for r in self.rows)
        ]
        cols += [k.removesuffix("_final").replace("_", " ") for k in val] + ["params"]
        out = []
        for r in self.rows:
            grad_ms = cell(r["grad_ms_median"])
            if r["grad_ms_p25"] is not None:
                grad_ms += f" ({cell(r['grad_ms_p25'])}–{cell(r['grad_ms_p75'])})"
            mem = r["peak_mem_mb"] and r["peak_mem_mb"] * factor
            cells = [r["model"], r["grad"], *(r[k] for k in self.varying), r["n"], r["status"]]
            cells += [r["steps"], grad_ms, r["step_ms_median"], r["check_time_ratio"], mem]
            cells += [r["rel_err_max"], r["rel_err_median"], r["grad_check"], r["precision"]]
            cells += [r["loss_final"], *(r[k] for k in val), r["params"]]
            out.append(dict(zip(cols, map(cell, cells))))
        return cols, out

    def intro(self, sources: list[str]) -> list[str]:
        statuses = tally(r.summary.status for r in self.runs)
        lines = [
            f"{len(self.runs)} runs in {len(self.rows)} configurations ({statuses}), "
            f"from {', '.join(sources)}."
        ]
        if self.common:
            same = ", ".join(f"{k} {cell(v)}" for k, v in self.common.items())
            lines.append(f"The same for every run: {same}.")
        return lines

    def notes(self) -> list[str]:
        return [
            f"{r['model']} / {self.label(k)}: {r['reason']}"
            for k, r in zip(self.groups, self.rows)
            if r["reason"]
        ]
