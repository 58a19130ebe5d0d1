"""The LightningModule: a thin shell that runs gradlab.training.step.StepRunner for each optimizer
step.

Manual optimization: the method's gradients are written to ``.grad`` and the optimizer steps.
One Lightning batch is a group of consecutive optimizer steps (``trainer.inner_steps``; each
step has its own data batch, and Lightning's global_step counts the optimizer steps), because
Lightning's own work per batch (~190 us on the 2-core CPU) is several times a step of these tiny
nets. Metrics go to the runner's ``sink(step, metrics)`` (CSV, W&B, ...) instead of
``self.log``, which costs more per step than the microsecond-scale work measured here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lightning as L
import torch

from gradlab.training.step import StepRunner


class GradLabModule(L.LightningModule):
    def __init__(
        self,
        runner: StepRunner,
        make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
    ):
        super().__init__()
        self.automatic_optimization = False
        self.runner = runner
        self.model = runner.model
        self.make_optimizer = make_optimizer
        self.stop_requested = False

    def request_stop(self) -> None:
        """Ask for a clean stop at the next step boundary (a signal handler calls this)."""
        self.stop_requested = True

    def configure_optimizers(self):
        return self.make_optimizer(list(self.model.parameters()))

    def on_train_start(self) -> None:
        self.runner.reseed(self.global_step)

    def training_step(self, batch, batch_idx):
        """The optimizer steps of one group: batch is [(step, x, y), ...] (training.data)."""
        optimizer = self.optimizers()
        for step, x, y in batch:
            if step >= self.trainer.max_steps:  # the last group may reach past the run's end
                break
            if self.stop_requested:  # raised here, between steps, so no step is left half done
                raise KeyboardInterrupt
            self.runner(x, y, step, optimizer.step)
            if self.runner.status != "running":
                self.trainer.should_stop = True
                break


class InterruptCheckpoint(L.Callback):
    """On Ctrl-C or SIGTERM (pre-emption), save a checkpoint before Lightning tears down."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.saved: Path | None = None
        self.signal: str | None = None

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, KeyboardInterrupt | SystemExit):
            self.signal = "SIGINT" if isinstance(exception, KeyboardInterrupt) else "SIGTERM"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            trainer.save_checkpoint(self.path)
            self.saved = self.path
