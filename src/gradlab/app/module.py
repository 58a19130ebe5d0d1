"""The LightningModule: a thin shell that runs one group of optimizer steps per Lightning batch,
each through gradlab.training.step.StepRunner, and hands each step's metrics to the sink.

Manual optimization: the method's gradients are written to ``.grad`` and the optimizer steps.
One Lightning batch is a group of consecutive optimizer steps (each with its own data batch;
Lightning's global_step counts the optimizer steps), because Lightning's own work per batch is
several times a step of these tiny nets. Metrics go to the sink (CSV, W&B) instead of
``self.log``, which costs more per step than the microsecond-scale work measured here.
Two callbacks save checkpoints (gradlab.app.checkpoints): on a signal, and every N steps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lightning as L
import torch

from gradlab.app import checkpoints
from gradlab.app.checkpoints import RECORD
from gradlab.training.step import StepRunner


class GradLabModule(L.LightningModule):
    def __init__(
        self,
        runner: StepRunner,
        sink: Callable[[int, dict[str, float]], None],
        make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
        seed: int,
        identity: dict | None = None,
    ):
        super().__init__()
        self.automatic_optimization = False
        self.runner, self.sink, self.make_optimizer, self.seed = runner, sink, make_optimizer, seed
        self.model = runner.model
        self.identity = identity  # saved in every checkpoint (gradlab.app.checkpoints)
        self.stop_requested: str | None = None  # the signal that asked for a stop

    def request_stop(self, signal_name: str = "SIGINT") -> None:
        """Ask for a clean stop at the next step boundary (a signal handler calls this)."""
        self.stop_requested = signal_name

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[RECORD] = self.identity

    # ---- training hooks

    def on_train_start(self) -> None:
        # the checks' directions depend on (seed, step where training (re)started)
        if self.runner.checks is not None:
            self.runner.checks.reseed(self.seed * 7 + self.global_step)

    def training_step(self, batch, batch_idx):
        """The optimizer steps of one group: batch is [(step, x, y), ...] (training.batches)."""
        optimizer = self.optimizers()
        for step, x, y in batch:
            if step >= self.trainer.max_steps:  # the last group may reach past the run's end
                break
            if self.stop_requested:  # raised here, between steps, so no step is left half done
                raise KeyboardInterrupt
            self.sink(step, self.runner(x, y, step, optimizer.step))
            if self.runner.state.status != "running":
                self.trainer.should_stop = True
                break

    def configure_optimizers(self):
        return self.make_optimizer(list(self.model.parameters()))


class InterruptCheckpoint(L.Callback):
    """On Ctrl-C, SIGTERM or a pre-emption signal, save a checkpoint before Lightning tears
    down (atomically)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.saved: Path | None = None
        self.signal: str | None = None

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, KeyboardInterrupt | SystemExit):
            asked = "SIGINT" if isinstance(exception, KeyboardInterrupt) else "SIGTERM"
            self.signal = getattr(pl_module, "stop_requested", None) or asked
            self.saved = checkpoints.save(trainer, self.path)


class PeriodicCheckpoint(L.Callback):
    """checkpoints/last.ckpt after every `every`-th step (at its group's end) and when training
    ends on its own (not after a divergence or a failure, whose last state is not wanted)."""

    def __init__(self, path: Path, every: int):
        self.path, self.every = Path(path), every
        self.step_saved: int | None = None  # global step of the last save

    def _save(self, trainer: L.Trainer) -> None:
        if trainer.global_step != self.step_saved:
            checkpoints.save(trainer, self.path)
            self.step_saved = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        last = trainer.global_step - 1  # the index of the group's last step
        if self.every and last > 0 and last % self.every == 0:
            self._save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.every and pl_module.runner.state.status == "running":
            self._save(trainer)
