"""Comparison report of finished runs: article 004's table, measured, as report.md/.csv, four PNG
plots and one self-contained report.html. Reads only what runs wrote (summary.json, metrics.csv)."""

from __future__ import annotations

import base64
import csv
import html
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradlab.runlog import read_metrics
from gradlab.sweep import cell, job_summary, markdown_table, tally

# Runs that agree on all of these are repeats (seeds) of one configuration and are aggregated.
KEY = ("model", "grad", "method", "optimizer", "lr", "dtype", "device", "data")
GRAD_ORDER = ("autograd", "manual", "function", "fused", "tape", "numerical")
COLUMNS = [*KEY, "n", "status", "steps", "grad_ms_median", "grad_ms_p25", "grad_ms_p75"]
COLUMNS += ["step_ms_median", "peak_mem_mb", "rel_err_max", "rel_err_median", "grad_check"]
COLUMNS += ["loss_final", "reason"]
PLOTS = {  # file -> caption
    "loss.png": "Training loss per step (curves that coincide show as staggered markers)",
    "grad_rel_err.png": "Gradient relative error against central finite differences per step",
    "grad_ms.png": "Time of one gradient computation, distribution over steps",
    "peak_mem.png": "Peak memory of one gradient computation",
}


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


@dataclass
class Run:
    dir: Path
    summary: dict[str, Any]
    metrics: list[dict[str, float]]

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """(steps, values) of a metrics.csv column, rows where it was measured and finite."""
        rows = [r for r in self.metrics if key in r and math.isfinite(r[key]) and "step" in r]
        return [r["step"] for r in rows], [r[key] for r in rows]

    def check_verdict(self) -> str:
        # A recorded first failure is a failed check whatever grad_check says.
        if self.summary.get("grad_check_first_fail"):
            return "fail"
        return self.summary.get("grad_check") or "none"


def find_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Every dir under `paths` holding a summary.json, or Hydra's .hydra (a job that crashed)."""
    found: set[Path] = set()
    for root in paths:
        for marker in ("summary.json", ".hydra"):
            found.update(p.parent.resolve() for p in root.rglob(marker))
    return sorted(found)


def load_run(run_dir: Path) -> Run:
    summary = job_summary(run_dir)  # status and reason settled for a job that did not finish
    summary["reason"] = summary.get("reason") or ""
    try:
        metrics = read_metrics(run_dir / "metrics.csv")
    except (OSError, ValueError):
        metrics = []
    return Run(run_dir, summary, metrics)


def _key(run: Run) -> tuple:
    if run.summary.get("grad") is None:  # nothing known about it: keep it on its own row
        return ("?", run.dir.name, *[None] * (len(KEY) - 2))
    return tuple(run.summary.get(k) for k in KEY)


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


def _verdict(checks: list[str]) -> str:
    fails = checks.count("fail")
    if fails:
        return "fail" if len(checks) == 1 else f"fail ({fails}/{len(checks)})"
    return _tally(checks)


def group_row(key: tuple, runs: list[Run]) -> dict[str, Any]:
    """One table row: per-run figures, then the median across runs (max for the worst error)."""
    grad_ms = [x for r in runs for x in r.series("time/grad_ms")[1]]
    p25, p75 = _quartiles(grad_ms)
    checks = [r.check_verdict() for r in runs]
    losses = [_num(r.summary.get("loss_final")) for r in runs]
    reasons = dict.fromkeys(r.summary["reason"] for r in runs if r.summary.get("reason"))
    first_fails = [r.summary["grad_check_first_fail"] for r, c in zip(runs, checks) if c == "fail"]
    if first_fails:
        f = first_fails[0]
        reasons[
            f"check failed at step {f.get('step')} on {f.get('param')}: "
            f"rel err {_num(f.get('rel_err')):.3g} > tol {_num(f.get('tol')):.3g}"
        ] = None

    def per_run(metric: str, summary_key: str, agg=statistics.median) -> list[float | None]:
        """summary.json's figure (over every step) where it has one, else metrics.csv's, which
        holds only the logged steps (trainer.log_every_n_steps)."""
        out = []
        for r in runs:
            value = _num(r.summary.get(summary_key))
            values = r.series(metric)[1]
            out.append(value if value is not None else (agg(values) if values else None))
        return out

    return {
        **dict(zip(KEY, key)),
        "n": len(runs),
        "status": _tally([r.summary["status"] for r in runs]),
        "steps": _span(_num(r.summary.get("steps")) for r in runs),
        "grad_ms_median": _median(per_run("time/grad_ms", "grad_ms_median")),
        "grad_ms_p25": p25,
        "grad_ms_p75": p75,
        "step_ms_median": _median(per_run("time/step_ms", "step_ms_median")),
        "peak_mem_mb": _median(per_run("mem/peak_mb", "peak_mem_mb", max)),
        "rel_err_max": max(  # inf (a NaN/inf gradient) is the worst error, not a missing one
            (
                x
                for x in per_run("grad/rel_err", "grad_rel_err_max", max)
                if x is not None and x == x
            ),
            default=None,
        ),
        "rel_err_median": _median(x for r in runs for x in r.series("grad/rel_err")[1]),
        "grad_check": _verdict(checks),
        # Diverged runs end on NaN/inf: the median is over finite losses, NaN when there are none.
        "loss_final": _median(losses)
        if _finite(losses)
        else next((x for x in losses if x is not None), None),
        "reason": "; ".join(reasons),
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
        cols += ["step ms median", f"peak mem {unit}", "rel err max", "rel err median", "check"]
        cols += ["loss final"]
        out = []
        for r in self.rows:
            grad_ms = cell(r["grad_ms_median"])
            if r["grad_ms_p25"] is not None:
                grad_ms += f" ({cell(r['grad_ms_p25'])}–{cell(r['grad_ms_p75'])})"
            mem = r["peak_mem_mb"] and r["peak_mem_mb"] * factor
            cells = [r["model"], r["grad"], *(r[k] for k in self.varying), r["n"], r["status"]]
            cells += [r["steps"], grad_ms, r["step_ms_median"], mem, r["rel_err_max"]]
            cells += [r["rel_err_median"], r["grad_check"], r["loss_final"]]
            out.append(dict(zip(cols, map(cell, cells))))
        return cols, out

    def intro(self, sources: list[str]) -> list[str]:
        statuses = tally(r.summary["status"] for r in self.runs)
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


EXPLAINED = [
    "grad ms: the gradient method alone (loss and gradients), median over steps; in brackets "
    "the 25th–75th percentile over all steps of all runs.",
    "step ms: the whole training step, which also runs the finite-difference check and the "
    "optimizer step.",
    "peak mem: the most memory one gradient computation allocated (PyTorch tensor storage).",
    "rel err: ‖g − g_fd‖ / max(‖g‖, ‖g_fd‖) against central finite differences in float64, "
    "max and median over the checks; check: the verdict against the dtype's tolerance.",
    "n: runs with the same configuration (seeds): figures are medians across them, rel err max "
    "the worst; a run that diverged ends on a non-finite loss.",
    "Article 004 published (3-layer ReLU 4-16-1): autograd 1.2 ms, 8.3 MB, 1e-16; manual BP "
    "2.8 ms, 7.9 MB, 1e-16; finite differences 45 ms, 12.1 MB, 1e-7.",
]


def markdown(report: Report, sources: list[str], images: list[str]) -> str:
    cols, rows = report.table()
    parts = ["# gradlab report", " ".join(report.intro(sources)), markdown_table(rows, cols)]
    parts.append("\n".join(f"- {line}" for line in EXPLAINED))
    if notes := report.notes():
        parts += ["## Problems", "\n".join(f"- {n}" for n in notes)]
    parts += ["## Plots", *(f"![{PLOTS[name]}]({name})" for name in images)]
    return "\n\n".join(parts) + "\n"


STYLE = """body{font-family:sans-serif;margin:2em;max-width:80em}
table{border-collapse:collapse;font-size:90%}th,td{border:1px solid #ccc;padding:.25em .5em}
td{text-align:right}td:nth-child(-n+2){text-align:left}th{background:#f4f4f4}
img{max-width:100%}figure{margin:1.5em 0}"""


def html_page(report: Report, sources: list[str], images: dict[str, bytes]) -> str:
    """The report as one HTML file: every image inline as a base64 data URI."""
    e = html.escape
    cols, rows = report.table()
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{e(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
    parts = [f"<h1>gradlab report</h1><p>{e(' '.join(report.intro(sources)))}</p>"]
    parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    parts.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in EXPLAINED) + "</ul>")
    if notes := report.notes():
        parts.append("<h2>Problems</h2><ul>")
        parts.append("".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    parts.append("<h2>Plots</h2>")
    for name, png in images.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f'<figure><img alt="{e(PLOTS[name])}" src="data:image/png;base64,{data}">'
            f"<figcaption>{e(PLOTS[name])}</figcaption></figure>"
        )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>gradlab report</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def write_report(paths: list[Path], out: Path | None = None) -> list[Path]:
    """Report on every run under `paths` into `out` (default: the first path); the files written."""
    runs = [load_run(d) for d in find_run_dirs(paths)]
    if not runs:
        raise FileNotFoundError(f"no runs (no summary.json) under {', '.join(map(str, paths))}")
    out = Path(out or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    report = Report.build(runs)
    sources = [str(p) for p in paths]
    written, images = [], {}
    from gradlab.plots import Plotter  # matplotlib only when figures are drawn

    for name, fig in Plotter(report).figures().items():
        if fig is not None:
            fig.savefig(out / name, dpi=110)
            images[name] = (out / name).read_bytes()
            written.append(out / name)
    with (out / "report.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(report.rows)  # full precision; NaN as "nan"
    (out / "report.md").write_text(markdown(report, sources, list(images)))
    (out / "report.html").write_text(html_page(report, sources, images))
    return [out / "report.md", out / "report.csv", out / "report.html", *written]
