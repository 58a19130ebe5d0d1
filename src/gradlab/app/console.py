"""What a run shows on the terminal: the summary table at the end of every job, the progress bar
only where someone watches, and no start-up chatter from Lightning."""

from __future__ import annotations

import os
import sys

from gradlab.reports.format import cell
from gradlab.training.record import RunSummary


def _fmt(value) -> str:
    return cell(value) or "-"


def summary_rows(s: RunSummary) -> list[tuple[str, str]]:
    """The table's rows: what ran, how it ended, what it measured."""
    status = s.status + (f" ({s.reason})" if s.reason else "")
    rows = [
        ("status", status),
        ("model / grad / optimizer", f"{s.model} / {s.grad} / {s.optimizer}"),
        ("device / dtype / seed", f"{s.device} / {s.dtype} / {s.seed}"),
        ("model is", f"{s.model_desc or '-'}, {_fmt(s.params)} parameters, loss {s.loss}"),
        ("steps", _fmt(s.steps)),
        ("loss initial -> final", f"{_fmt(s.loss_initial)} -> {_fmt(s.loss_final)}"),
        ("grad check: math (max rel err)", f"{s.grad_check} ({_fmt(s.grad_math_rel_err_max)})"),
        ("grad precision (max ratio)", f"{s.grad_precision} ({_fmt(s.grad_precision_ratio_max)})"),
        ("grad ms / step ms (median)", f"{_fmt(s.grad_ms_median)} / {_fmt(s.step_ms_median)}"),
        ("check time / grad time", _fmt(s.check_time_ratio)),
        ("peak memory MiB", _fmt(s.peak_mem_mb)),
        ("output dir", s.output_dir or "-"),
    ]
    if s.val_loss_final is not None:
        acc = f", accuracy {_fmt(s.val_acc_final)}" if s.val_acc_final is not None else ""
        rows.insert(6, ("validation (final)", f"loss {_fmt(s.val_loss_final)}{acc}"))
    if s.grad_check_basis and s.grad_check_basis != "float64 re-run":
        rows.append(("checked on", s.grad_check_basis))
    if f := s.grad_check_first_fail:
        rows.append(
            ("first failing check", f"step {f['step']} {f['param']} rel err {f['rel_err']:.3g}")
        )
    if f := s.grad_precision_first:
        what = f"{f['ratio']:.3g}x its dtype's own error"
        if f.get("effective_dtype"):
            what = f"its values are {f['effective_dtype']}"
        rows.append(("first precision finding", f"step {f['step']} {f['param']}: {what}"))
    if s.checkpoint:
        rows.append(("checkpoint", s.checkpoint))
    if s.wandb_sync:
        rows.append(("W&B (offline)", s.wandb_sync))
    return rows


def print_summary(summary: RunSummary) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gradlab run {summary.run_name}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in summary_rows(summary):
        table.add_row(key, value)
    Console(soft_wrap=True).print(table)


def progress_wanted(setting: str) -> bool:
    if setting != "auto":
        return setting == "on"
    return sys.stdout.isatty() and not os.environ.get("CI")


def quiet_lightning() -> None:
    """Keep Lightning's start-up chatter (accelerator lines, tips) and known noise quiet."""
    import logging
    import warnings

    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    # on a machine with SLURM installed, a run not started by srun (a submitit job is one)
    warnings.filterwarnings("ignore", message=".*`srun` command is available.*")
