"""Assemble and run one training job from a composed config: build -> fit -> summary.

Whatever happens (bad value, missing CUDA, divergence, Ctrl-C, SIGTERM, a crashing method),
metrics.csv keeps every row written so far and summary.json says how the run ended and why.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from gradlab.app.config import ConfigError, validate
from gradlab.training.record import MetricsCSV, RunStats, write_summary


class _Terminated(Exception):
    """SIGTERM outside Lightning's fit (which handles SIGTERM itself, at a batch boundary)."""


_IN_FIT = False


def _set_handler(signum, handler):
    """signal.signal where allowed (the main thread); returns the previous handler or None."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signum, handler)


def _raise_terminated(signum, frame):
    if not _IN_FIT:  # during fit Lightning composes this handler with its own: let it stop
        raise _Terminated


class RunFailed(RuntimeError):
    """A run that cannot start or cannot go on; the message is the one line the user sees."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RunFailed("device=cuda requested but CUDA is not available on this machine")
    return torch.device(name)


def progress_wanted(setting: str) -> bool:
    if setting != "auto":
        return setting == "on"
    return sys.stdout.isatty() and not os.environ.get("CI")


def train(cfg: DictConfig, output_dir: Path, group: str | None = None):
    """Train one job; returns the summary dict (summary.json's content)."""
    t_start = time.perf_counter()
    output_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "run_name": cfg.run_name,
        "model": cfg.model.name,
        "grad": cfg.grad.name,
        "method": cfg.grad.method,
        "optimizer": cfg.optimizer.name,
        "lr": cfg.optimizer.lr,
        "device": cfg.device.name,
        "dtype": cfg.dtype,
        "seed": cfg.seed,
        "data": cfg.data.name,
        "status": "running",
        "reason": "",
        "output_dir": str(output_dir),
        "wandb_dir": None,
    }
    if (output_dir / "summary.json").exists():
        raise RunFailed(f"{output_dir} already holds a run (summary.json); choose a new output dir")
    write_summary(output_dir / "summary.json", summary)

    stats = RunStats()
    csv = wandb_logger = module = interrupt = sink = None
    previous_term = _set_handler(signal.SIGTERM, _raise_terminated)
    try:
        validate(cfg)
        job = build_job(cfg, output_dir)
        summary["device"] = str(job["device"])
        module, trainer, batches, interrupt = (
            job["module"],
            job["trainer"],
            job["batches"],
            job["interrupt"],
        )
        runner = module.runner
        csv = MetricsCSV(output_dir / "metrics.csv", module.runner.metric_columns())
        wandb_logger = _wandb(cfg, output_dir, group)
        if wandb_logger is not None:
            trainer.loggers = [wandb_logger]
        runner.sink = sink = MetricSink(cfg.trainer, runner, stats, csv, wandb_logger)
        global _IN_FIT
        with _signals_stop(module):
            _IN_FIT = True
            try:
                trainer.fit(module, train_dataloaders=batches, ckpt_path=cfg.ckpt_path)
            finally:
                _IN_FIT = False
        summary["status"] = "completed" if runner.status == "running" else runner.status
        summary["reason"] = runner.reason
    except (ConfigError, RunFailed) as e:
        summary.update(status="failed", reason=str(e))
    except SystemExit as e:  # Lightning turns Ctrl-C and SIGTERM into SystemExit
        if interrupt is not None and interrupt.signal:
            summary.update(status="interrupted", reason=f"{interrupt.signal} received")
            summary["checkpoint"] = str(interrupt.saved) if interrupt.saved else None
        else:
            summary.update(status="failed", reason=f"exit {e.code}")
    except (KeyboardInterrupt, _Terminated) as e:  # a signal before or after training
        name = "SIGTERM" if isinstance(e, _Terminated) else "SIGINT"
        summary.update(status="interrupted", reason=f"{name} received before training")
    except torch.OutOfMemoryError as e:
        summary.update(status="failed", reason=f"out of memory: {str(e).splitlines()[0]}")
    except Exception as e:
        summary.update(status="failed", reason=f"{type(e).__name__}: {e}")
    finally:
        _set_handler(signal.SIGTERM, previous_term)
        try:
            if sink is not None:
                sink.hand_over()  # rows of a run that stopped between two hand-overs
        except Exception as e:  # a logger failing now must not cost the summary
            summary["reason"] = (summary["reason"] + f"; logging failed: {e}").lstrip("; ")
        if csv is not None:
            csv.close()
        if module is not None:
            stats.check_failed_at = module.runner.check_failed_at
        summary.update(stats.summary())
        summary["elapsed_s"] = round(time.perf_counter() - t_start, 3)
        write_summary(output_dir / "summary.json", summary)  # first, whatever W&B does next
        if wandb_logger is not None or "wandb" in sys.modules:
            from gradlab.app.loggers import finish_wandb

            try:
                summary["wandb_dir"], summary["wandb_sync"] = finish_wandb(wandb_logger)
            except Exception as e:  # W&B failing to close must not cost the summary
                summary["reason"] = (summary["reason"] + f"; W&B finish failed: {e}").lstrip("; ")
            write_summary(output_dir / "summary.json", summary)
    return summary


class MetricSink:
    """Where StepRunner's metrics go: every step into the run's stats; the logged steps (every
    trainer.log_every_n_steps, the last one, the one that ended the run) to metrics.csv and W&B.
    Rows are handed over together every trainer.flush_every_n_steps steps, by default on the
    steps that run the checks anyway, so the gradient timed in the other steps is not slowed by
    logging; hand_over() sends what is left when a run stops in between."""

    def __init__(self, trainer_cfg, runner, stats: RunStats, csv: MetricsCSV, wandb_logger=None):
        self.every = trainer_cfg.log_every_n_steps
        self.flush_every = trainer_cfg.flush_every_n_steps
        self.last = trainer_cfg.max_steps - 1
        self.runner, self.stats, self.csv, self.wandb_logger = runner, stats, csv, wandb_logger
        self.pending: list[tuple[int, dict[str, float]]] = []

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        self.stats.update(step, metrics)
        ending = step == self.last or self.runner.status != "running"
        if step % self.every == 0 or ending:
            self.pending.append((step, metrics))
        if step % self.flush_every == 0 or ending:
            self.hand_over()

    def hand_over(self) -> None:
        rows, self.pending = self.pending, []
        self.csv.write_rows(rows)
        if self.wandb_logger is not None:
            for step, metrics in rows:
                self.wandb_logger.log_metrics(metrics, step=step)


def quiet_lightning() -> None:
    """Keep Lightning's start-up chatter (accelerator lines, tips) and known noise quiet."""
    import logging
    import warnings

    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\).*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def build_job(cfg: DictConfig, output_dir: Path) -> dict[str, Any]:
    import lightning as L

    from gradlab.app.module import GradLabModule, InterruptCheckpoint
    from gradlab.check import CheckSettings
    from gradlab.grads import resolve
    from gradlab.models import build_model
    from gradlab.training.data import StepBatches, make_dataset
    from gradlab.training.optim import build_optimizer
    from gradlab.training.step import StepRunner

    quiet_lightning()
    device = resolve_device(cfg.device.name)
    torch.set_num_threads(cfg.threads)
    dtype = getattr(torch, cfg.dtype)
    m = cfg.model
    model = build_model(
        m.name,
        d_in=m.d_in,
        hidden=m.hidden,
        d_out=m.d_out,
        seed=cfg.seed,
        dtype=dtype,
        device=device,
    )
    data = make_dataset(
        cfg.data.name,
        model,
        cfg.data.n_samples,
        cfg.data.batch_size,
        cfg.data.noise,
        seed=cfg.seed,
        dtype=dtype,
        device=device,
    )
    try:
        grad_fn = resolve(cfg.grad.method)
    except ValueError as e:
        raise ConfigError(f"grad.method: {e}") from None
    if cfg.grad.compile:
        from gradlab.grads.compiled import compiled

        grad_fn = compiled(grad_fn)
    o = cfg.optimizer
    runner = StepRunner(
        model=model,
        grad_fn=grad_fn,
        grad_name=cfg.grad.method,
        check=CheckSettings(**OmegaConf.to_container(cfg.check)),
        sink=lambda step, metrics: None,
        mem_every=cfg.trainer.mem_every,
        seed=cfg.seed,
    )
    module = GradLabModule(
        runner,
        make_optimizer=lambda params: build_optimizer(
            o.name,
            params,
            lr=o.lr,
            momentum=o.get("momentum", 0.0),
            weight_decay=o.get("weight_decay", 0.0),
        ),
    )
    start_step = 0
    if cfg.ckpt_path:
        if not Path(cfg.ckpt_path).is_file():
            raise RunFailed(f"ckpt_path={cfg.ckpt_path} does not exist")
        start_step = int(
            torch.load(cfg.ckpt_path, map_location="cpu", weights_only=False)["global_step"]
        )
    interrupt = InterruptCheckpoint(output_dir / "checkpoints" / "interrupted.ckpt")
    progress = progress_wanted(cfg.trainer.progress)
    callbacks: list = [interrupt]
    if progress:
        from lightning.pytorch.callbacks import RichProgressBar

        groups = -(-cfg.trainer.max_steps // cfg.trainer.inner_steps)  # the bar counts groups
        callbacks.append(RichProgressBar(refresh_rate=max(1, groups // 100)))
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        max_steps=cfg.trainer.max_steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=cfg.trainer.log_every_n_steps,
        callbacks=callbacks,
        default_root_dir=str(output_dir),
    )
    return {
        "device": device,
        "module": module,
        "trainer": trainer,
        "batches": StepBatches(data, start_step, cfg.trainer.inner_steps),
        "interrupt": interrupt,
    }


def _wandb(cfg: DictConfig, output_dir: Path, group: str | None):
    if cfg.logger is None or cfg.logger.get("wandb") is None:
        return None
    from gradlab.app.loggers import make_wandb_logger

    w = cfg.logger.wandb
    config = OmegaConf.to_container(cfg, resolve=True)
    return make_wandb_logger(w, cfg.run_name, output_dir, config, w.group or group)


class _signals_stop:
    """While fitting, Ctrl-C asks the module to stop at the next step boundary (a second
    Ctrl-C interrupts at once); SIGTERM is left to Lightning, which stops at a batch boundary."""

    def __init__(self, module):
        self.module = module
        self.previous = None

    def _handler(self, signum, frame):
        _set_handler(signal.SIGINT, self.previous or signal.default_int_handler)
        self.module.request_stop()

    def __enter__(self):
        self.previous = _set_handler(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc):
        _set_handler(signal.SIGINT, self.previous or signal.default_int_handler)
        return False


def optimized_value(summary: dict, key: str, direction: str = "minimize") -> float:
    """The value a sweeper optimizes. A run that did not complete gets the worst value for the
    direction (+inf when minimizing): Optuna 2.x refuses NaN, and a failed trial must not win."""
    value = summary.get(key)
    if summary.get("status") != "completed" or not isinstance(value, int | float):
        return -math.inf if "max" in direction else math.inf
    return float(value)
