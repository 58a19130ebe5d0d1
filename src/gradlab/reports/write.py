"""Write the comparison report of finished runs: report.md/.csv, four PNG plots and one
self-contained report.html. Reads only what runs wrote (summary.json, metrics.csv)."""

from __future__ import annotations

import base64
import csv
import html
from pathlib import Path

from gradlab.reports.format import markdown_table
from gradlab.reports.plots import Plotter
from gradlab.reports.runs import find_run_dirs, load_run
from gradlab.reports.table import COLUMNS, Report

PLOTS = {  # file -> caption
    "loss.png": "Training loss per step (curves that coincide show as staggered markers)",
    "val_loss.png": "Validation loss after the step (data with a validation split)",
    "val_acc.png": "Validation accuracy after the step (class labels)",
    "grad_rel_err.png": "Relative error of the run's gradient against the float64 reference",
    "grad_ms.png": "Time of one gradient computation, distribution over steps",
    "peak_mem.png": "Peak memory of one gradient computation",
}


EXPLAINED = [
    "grad ms: the gradient method alone (loss and gradients), median over steps; in brackets "
    "the 25th–75th percentile over all steps of all runs.",
    "step ms: the whole training step, which also runs the checks and the optimizer step; "
    "check / grad time: the checks' time over the gradients' time, over the whole run.",
    "peak mem: the most memory one gradient computation allocated (PyTorch tensor storage).",
    "rel err: ‖g − g_ref‖ / max(‖g‖, ‖g_ref‖) of the run's gradient, against the method's "
    "float64 re-run once that matched the float64 finite differences (against the differences "
    "themselves in a float64 run), max and median over the checks.",
    "check: the math verdict, the method's float64 gradient against exact float64 finite "
    "differences at 1e-9 (a model that is not an MLP: plain differences, at ten times their "
    "own estimated accuracy); precision: whether the run's gradient was over 100 times less "
    "precise than its dtype itself is on the same batch (a 'finding').",
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
