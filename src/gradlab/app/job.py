"""A typed config in, every object of one training job out: model, data, method, the step and
its checks, the loggers, the LightningModule and its Trainer. Nothing is patched afterwards."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from gradlab.app.config import ConfigError, TrainConfig
from gradlab.app.sink import MetricSink
from gradlab.data import Dataset
from gradlab.training.batches import StepBatches
from gradlab.training.state import RunState
from gradlab.training.step import StepRunner
from gradlab.training.validation import Validation


class RunFailed(RuntimeError):
    """A run that cannot start or cannot go on; the message is the one line the user sees."""


@dataclass
class Job:
    cfg: TrainConfig
    device: torch.device
    model: torch.nn.Module
    data: Dataset
    state: RunState
    runner: StepRunner
    sink: MetricSink
    module: object  # GradLabModule
    trainer: object  # lightning.Trainer
    batches: StepBatches
    interrupt: object  # InterruptCheckpoint
    wandb_logger: object | None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RunFailed("device=cuda requested but CUDA is not available on this machine")
    return torch.device(name)


def build_job(cfg: TrainConfig, output_dir: Path, group: str | None = None) -> Job:
    """Everything one run needs, from its typed config."""
    from gradlab.app.checkpoints import INTERRUPTED, LAST, identity, resume_step
    from gradlab.app.module import GradLabModule, InterruptCheckpoint, PeriodicCheckpoint
    from gradlab.training.optim import build_optimizer

    # 1. where and in what precision
    device = resolve_device(cfg.device)
    torch.set_num_threads(cfg.threads)
    # 2. the net, its data and the gradient method
    model, data, method = prepare(cfg, device)
    # 3. the step, its checks, and the run's state
    state, t = RunState(), cfg.trainer
    checks = _checks(cfg, model, method, state)
    validation = None
    if data.x_val is not None:
        last = t.max_steps - 1
        validation = Validation(model, data.x_val, data.y_val, t.val_every_n_steps, last)
    runner = StepRunner(
        model, method, cfg.grad.method, checks, state, t.mem_every, cfg.check.fail_fast, validation
    )
    # 4. where the metrics go, then the Lightning objects around it all
    csv, wandb_logger = _loggers(cfg, output_dir, runner, group)
    sink = MetricSink(
        state, t.log_every_n_steps, t.flush_every_n_steps, t.max_steps - 1, csv, wandb_logger
    )
    o = cfg.optimizer
    options = {k: v for k, v in dataclasses.asdict(o).items() if k != "name"}
    module = GradLabModule(
        runner, sink, lambda p: build_optimizer(o.name, p, **options), cfg.seed, identity(cfg)
    )
    interrupt = InterruptCheckpoint(output_dir / "checkpoints" / INTERRUPTED)
    periodic = PeriodicCheckpoint(output_dir / "checkpoints" / LAST, t.ckpt_every_n_steps)
    trainer = _trainer(cfg, device, output_dir, [interrupt, periodic], wandb_logger)
    batches = StepBatches(data, resume_step(cfg), t.inner_steps, _event_every(cfg))
    parts = (model, data, state, runner, sink, module, trainer, batches, interrupt, wandb_logger)
    return Job(cfg, device, *parts)


def prepare(cfg: TrainConfig, device: torch.device) -> tuple[torch.nn.Module, Dataset, object]:
    """The model, its data and its gradient method, tried on two samples: ConfigError (one line
    naming the key) for a model that cannot be built, data it does not fit, a method that cannot
    handle it. The command line runs this before anything is written."""
    from gradlab.data import make_dataset
    from gradlab.models import build_model

    dtype, m, d = getattr(torch, cfg.dtype), cfg.model, cfg.data
    try:
        options = {k: v for k, v in dataclasses.asdict(m).items() if k != "name"}
        model = build_model(m.name, **options, seed=cfg.seed, dtype=dtype, device=device)
        options = {
            k: v for k, v in dataclasses.asdict(d).items() if k not in ("name", "batch_size")
        }
        data = make_dataset(
            d.name, model, cfg.loss, d.batch_size, cfg.seed, dtype, device, **options
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None
    method = _method(cfg, model)
    _trial_forward(cfg, model, data)
    return model, data, method


def _trial_forward(cfg: TrainConfig, model: torch.nn.Module, data: Dataset) -> None:
    """One forward on two training samples: the model's output must fit the targets."""
    from gradlab.data import loss_of

    x, y = data.x[:2], data.y[:2]
    what = f"model={cfg.model.name} on data={cfg.data.name}"
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        shape = tuple(x.shape)
        raise ConfigError(
            f"{what}: a trial forward of x {shape} raised {type(e).__name__}: {first}"
        ) from None
    want = tuple(y.shape) if y.is_floating_point() else (len(y), data.classes)
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if got != want:
        loss = loss_of(cfg.data.name, cfg.loss)
        raise ConfigError(
            f"{what}: x {tuple(x.shape)} gives output {got}, but loss={loss} needs {want}"
        )


def _method(cfg: TrainConfig, model: torch.nn.Module):
    from gradlab.grads import for_model

    try:
        method = for_model(cfg.grad.method, model)
    except ValueError as e:
        raise ConfigError(str(e) if str(e).startswith("grad.") else f"grad.method: {e}") from None
    if cfg.grad.compile:
        from gradlab.grads.compiled import compiled

        method = compiled(method)
    return method


def _checks(cfg: TrainConfig, model, method, state: RunState):
    """The run's checks (None without any)."""
    from gradlab.check import Checker
    from gradlab.grads import METHODS
    from gradlab.training.checks import StepChecks

    c = cfg.check
    if not (c.directional_every or c.full_every):
        return None
    checker = Checker(model, method, METHODS["autograd"], c)
    progress = ProgressLine() if c.full_max_gradients is None else None
    return StepChecks(checker, c, state, progress)


class ProgressLine:
    """An explicit full check's progress on stderr, every two seconds or so."""

    def __init__(self):
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last > 2.0:
            self.last = now
            print(f"full check: {done}/{total} coordinates", file=sys.stderr, flush=True)


def describe(cfg: TrainConfig, model: torch.nn.Module) -> dict:
    """What the summary and the W&B config say the model and loss are."""
    from gradlab.data import loss_of
    from gradlab.models import model_name

    params = sum(p.numel() for p in model.parameters())
    desc = model_name(model)
    if cfg.model.name == "custom":
        desc = f"{desc} ({cfg.model.target})"
    return {"model_desc": desc, "params": params, "loss": loss_of(cfg.data.name, cfg.loss)}


def _loggers(cfg: TrainConfig, output_dir: Path, runner: StepRunner, group: str | None):
    """metrics.csv (logger csv) and the started W&B run (logger wandb), each or None."""
    from gradlab.training import metrics
    from gradlab.training.record import MetricsCSV

    csv = None
    if cfg.logger.csv is not None:
        columns = metrics.columns(runner.names, runner.validation is not None)
        csv = MetricsCSV(output_dir / "metrics.csv", columns)
    wandb_logger = None
    if cfg.logger.wandb is not None:
        from gradlab.app.loggers import make_wandb_logger

        w = cfg.logger.wandb
        config = {**dataclasses.asdict(cfg), **describe(cfg, runner.model)}
        wandb_logger = make_wandb_logger(w, cfg.run_name, output_dir, config, w.group or group)
    return csv, wandb_logger


def _trainer(cfg: TrainConfig, device, output_dir: Path, callbacks: list, wandb_logger):
    import lightning as L
    from lightning.pytorch.plugins.environments import LightningEnvironment

    from gradlab.app.console import progress_wanted, quiet_lightning

    quiet_lightning()
    progress = progress_wanted(cfg.trainer.progress)
    if progress:
        from lightning.pytorch.callbacks import RichProgressBar

        groups = -(-cfg.trainer.max_steps // cfg.trainer.inner_steps)  # the bar counts groups
        callbacks = [*callbacks, RichProgressBar(refresh_rate=max(1, groups // 100))]
    return L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        max_steps=cfg.trainer.max_steps,
        max_epochs=-1,
        logger=[wandb_logger] if wandb_logger is not None else False,
        enable_checkpointing=False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=cfg.trainer.log_every_n_steps,
        callbacks=callbacks,
        default_root_dir=str(output_dir),
        # one process on one device: no cluster environment, so inside a SLURM job Lightning
        # neither detects SLURMEnvironment nor installs its own requeue (gradlab.app.slurmjob)
        plugins=[LightningEnvironment()],
    )


def _event_every(cfg: TrainConfig) -> int:
    """The period of the steps that run more than a gradient: checks, hand-over to the
    loggers, the memory probe, the periodic checkpoint. Step groups end on its multiples."""
    periods = [cfg.trainer.flush_every_n_steps, cfg.check.directional_every]
    periods += [cfg.check.full_every, cfg.trainer.mem_every, cfg.trainer.ckpt_every_n_steps]
    return math.gcd(*[p for p in periods if p])
