"""One training job from a composed config: summary started -> job built -> fit -> summary.

Whatever happens (bad value, missing CUDA, divergence, Ctrl-C, SIGTERM, a crashing method),
metrics.csv keeps every row written so far and summary.json says how the run ended and why.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from gradlab.app import slurmjob
from gradlab.app.config import ConfigError
from gradlab.app.job import Job, RunFailed, build_job, describe
from gradlab.app.signals import RunSignals, Terminated
from gradlab.app.validate import validate
from gradlab.training.record import RunSummary, write_summary


def started(cfg: DictConfig, output_dir: Path) -> RunSummary:
    """The summary of a run about to start: what it is, before anything is validated."""

    def get(key: str):
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)

    return RunSummary(
        run_name=get("run_name"),
        model=get("model.name"),
        grad=get("grad.name"),
        method=get("grad.method"),
        optimizer=get("optimizer.name"),
        lr=get("optimizer.lr"),
        device=get("device"),
        dtype=get("dtype"),
        seed=get("seed"),
        data=get("data.name"),
        output_dir=str(output_dir),
        job_id=slurmjob.job_id(),
        job_restarts=slurmjob.restarts(),
    )


def train(cfg: DictConfig, output_dir: Path, group: str | None = None) -> RunSummary:
    """Train one job; returns its summary (summary.json's content). A SLURM job that SLURM
    started again resumes from its own dir's checkpoint (gradlab.app.slurmjob)."""
    t_start = time.perf_counter()
    output_dir.mkdir(parents=True, exist_ok=True)
    restart = slurmjob.claim(output_dir)  # RunFailed if the dir holds another run
    summary = started(cfg, output_dir)
    write_summary(output_dir / "summary.json", summary)
    job = None
    with RunSignals(slurmjob.requeue_signal()) as signals:
        try:
            typed = validate(cfg)
            if restart is not None and restart.checkpoint is not None:
                typed.ckpt_path = str(restart.checkpoint)
            summary.update(resumed_from=typed.ckpt_path)
            job = build_job(typed, output_dir, group)
            summary.update(device=str(job.device), **describe(job.cfg, job.model))
            with signals.fitting(job.module):
                job.trainer.fit(job.module, job.batches, ckpt_path=job.cfg.ckpt_path)
            status = job.state.status
            summary.update(status="completed" if status == "running" else status)
            summary.update(reason=job.state.reason)
        except BaseException as e:  # every way out of a run ends in its summary
            summary.update(**_ending(e, job))
            if not isinstance(e, Exception | SystemExit | KeyboardInterrupt | Terminated):
                raise
        finally:
            _finish(summary, job, output_dir, t_start)
    return summary


def _ending(e: BaseException, job: Job | None) -> dict:
    """status and reason of a run that stopped on exception `e`."""
    if isinstance(e, ConfigError | RunFailed):
        return {"status": "failed", "reason": str(e)}
    if isinstance(e, SystemExit):  # Lightning turns Ctrl-C and SIGTERM into SystemExit
        interrupt = job.interrupt if job is not None else None
        if interrupt is not None and interrupt.signal:
            saved = str(interrupt.saved) if interrupt.saved else None
            reason = f"{interrupt.signal} received"
            return {"status": "interrupted", "reason": reason, "checkpoint": saved}
        return {"status": "failed", "reason": f"exit {e.code}"}
    if isinstance(e, KeyboardInterrupt | Terminated):  # a signal before or after training
        name = "SIGTERM" if isinstance(e, Terminated) else "SIGINT"
        return {"status": "interrupted", "reason": f"{name} received before training"}
    if isinstance(e, torch.OutOfMemoryError):
        return {"status": "failed", "reason": f"out of memory: {str(e).splitlines()[0]}"}
    return {"status": "failed", "reason": f"{type(e).__name__}: {e}"}


def _finish(summary: RunSummary, job: Job | None, output_dir: Path, t_start: float) -> None:
    """Hand over the last rows, settle the summary, write it, then close W&B."""
    if job is not None:
        try:
            job.sink.hand_over()  # rows of a run that stopped between two hand-overs
        except Exception as e:  # a logger failing now must not cost the summary
            summary.reason = (summary.reason + f"; logging failed: {e}").lstrip("; ")
        job.sink.close()
        summary.update(**job.state.summary_fields())
    summary.elapsed_s = round(time.perf_counter() - t_start, 3)
    write_summary(output_dir / "summary.json", summary)  # first, whatever W&B does next
    if (job is not None and job.wandb_logger is not None) or "wandb" in sys.modules:
        from gradlab.app.loggers import finish_wandb

        try:
            summary.wandb_dir, summary.wandb_sync = finish_wandb(job and job.wandb_logger)
        except Exception as e:  # W&B failing to close must not cost the summary
            summary.reason = (summary.reason + f"; W&B finish failed: {e}").lstrip("; ")
        write_summary(output_dir / "summary.json", summary)


def optimized_value(summary: RunSummary, key: str, direction: str = "minimize") -> float:
    """The value a sweeper optimizes. A run that did not complete gets the worst value for the
    direction (+inf when minimizing): Optuna 2.x refuses NaN, and a failed trial must not win."""
    value = getattr(summary, key, None)
    if summary.status != "completed" or not isinstance(value, int | float):
        return -math.inf if "max" in direction else math.inf
    return float(value)
