"""Terminal output of a run: the short summary table printed at the end of every job."""

from __future__ import annotations

from typing import Any

from gradlab.reports.format import cell


def _fmt(value: Any) -> str:
    return cell(value) or "-"


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gradlab run {summary.get('run_name')}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows = [
        (
            "status",
            summary.get("status") + (f" ({summary['reason']})" if summary.get("reason") else ""),
        ),
        (
            "model / grad / optimizer",
            f"{summary.get('model')} / {summary.get('grad')} / {summary.get('optimizer')}",
        ),
        (
            "device / dtype / seed",
            f"{summary.get('device')} / {summary.get('dtype')} / {summary.get('seed')}",
        ),
        ("steps", _fmt(summary.get("steps"))),
        (
            "loss initial -> final",
            f"{_fmt(summary.get('loss_initial'))} -> {_fmt(summary.get('loss_final'))}",
        ),
        (
            "grad check (max rel err)",
            f"{summary.get('grad_check')} ({_fmt(summary.get('grad_rel_err_max'))})",
        ),
        (
            "grad ms / step ms (median)",
            f"{_fmt(summary.get('grad_ms_median'))} / {_fmt(summary.get('step_ms_median'))}",
        ),
        ("peak memory MiB", _fmt(summary.get("peak_mem_mb"))),
        ("output dir", summary.get("output_dir")),
    ]
    if summary.get("grad_check_first_fail"):
        f = summary["grad_check_first_fail"]
        rows.append(
            ("first failing check", f"step {f['step']} {f['param']} rel err {f['rel_err']:.3g}")
        )
    if summary.get("checkpoint"):
        rows.append(("checkpoint", summary["checkpoint"]))
    if summary.get("wandb_sync"):
        rows.append(("W&B (offline)", summary["wandb_sync"]))
    for key, value in rows:
        table.add_row(key, value)
    Console(soft_wrap=True).print(table)
