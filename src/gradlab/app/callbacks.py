"""Hydra callback: at the end of every multirun, summarize all jobs into summary.csv/summary.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepSummary(Callback):
    """Writes <sweep dir>/summary.csv and summary.md, a row per job, and prints the table."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from gradlab.reports.sweep import summarize_sweep

        table = summarize_sweep(Path(config.hydra.sweep.dir))
        print(table)
