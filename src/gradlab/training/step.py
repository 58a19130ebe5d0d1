"""One training step, free of Lightning: gradient by the chosen method, its checks, the
optimizer step; it returns the step's metrics, and the loop hands them on.

The LightningModule (gradlab.app.module) and the plain PyTorch loop that benchmarks it
(scripts/bench.py) both call StepRunner, so they do identical work per step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

import gradlab.training.metrics as m
from gradlab.measure.memory import peak_bytes
from gradlab.training.checks import StepChecks
from gradlab.training.output import AllFinite, GradientMethodError, well_formed
from gradlab.training.state import RunState
from gradlab.training.validation import Validation


class StepRunner:
    """The steps of one run; how the run stands is in `state` (gradlab.training.state)."""

    def __init__(
        self,
        model: nn.Module,
        grad_fn: Callable,
        grad_name: str,
        checks: StepChecks | None,
        state: RunState,
        mem_every: int = 100,
        fail_fast: bool = False,
        validation: Validation | None = None,
    ):
        self.model, self.grad_fn, self.grad_name = model, grad_fn, grad_name
        self.checks, self.state, self.mem_every, self.fail_fast = (
            checks,
            state,
            mem_every,
            fail_fast,
        )
        self.validation = validation
        # the Parameter objects outlive model.to(device), so one list serves every step
        self.names, self.params = map(list, zip(*model.named_parameters()))
        self.all_finite = AllFinite()

    def _stopwatch(self) -> Callable[[], float]:
        """time.perf_counter, after a device synchronize on CUDA; the device is looked up here,
        before the timed region, so a CPU reading holds nothing but the clock itself."""
        device = self.params[0].device
        if device.type != "cuda":
            return time.perf_counter

        def synced() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()

        return synced

    def __call__(self, x: Tensor, y: Tensor, step: int, optimizer_step: Callable[[], object]):
        """One training step at global step `step`; optimizer_step() applies the .grad values.
        Returns the step's metrics."""
        # 1. the gradient, timed alone
        clock = self._stopwatch()
        t0 = clock()
        try:
            result = self.grad_fn(self.model, x, y)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:
            raise GradientMethodError(f"gradient method {self.grad_name!r} raised: {e!r}") from e
        t1 = clock()
        loss, grads = well_formed(result, self.names, self.params, self.grad_name)
        loss_value = float(loss)  # a 0-d tensor or a number
        metrics = {m.LOSS: loss_value, m.GRAD_MS: (t1 - t0) * 1e3}

        # 2. a NaN or inf stops the run here, before anything is applied
        if not (math.isfinite(loss_value) and self.all_finite(grads)):
            bad = [n for n, g in zip(self.names, grads) if not torch.isfinite(g).all()]
            what = "loss" if not math.isfinite(loss_value) else "gradient"
            where = f" ({', '.join(bad)})" if bad else ""
            self.state.stop("diverged", f"non-finite {what} at step {step}{where}")
            return metrics

        # 3. the checks this step's cadence asks for
        if self.checks is not None:
            metrics.update(self.checks(step, x, y, dict(zip(self.names, grads)), t1 - t0))

        # 4. the optimizer step, with the method's gradients as .grad
        for p, g in zip(self.params, grads):
            p.grad = g
        optimizer_step()
        metrics[m.STEP_MS] = (clock() - t0) * 1e3

        # 5. peak memory, on a separate untimed call
        if self.mem_every and step % self.mem_every == 0:
            _, nbytes = peak_bytes(lambda: self.grad_fn(self.model, x, y), self.params[0].device)
            metrics[m.PEAK_MB] = nbytes / 2**20
        # 6. the validation figures of the model as this step left it, untimed
        if self.validation is not None and self.validation.due(step):
            metrics.update(self.validation())
        if self.fail_fast and (f := self.state.first_fail):
            where = f"at step {step} on {f['param']} (rel err {f['rel_err']:.3g})"
            self.state.stop("failed", f"gradient check failed {where}")
        return metrics
