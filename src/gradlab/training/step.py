"""One training step, free of Lightning: gradient by the chosen method, checks, optimizer step.

The LightningModule (gradlab.app.module) and the plain PyTorch loop that benchmarks it
(scripts/bench.py) both call StepRunner, so they do identical work per step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import Tensor

from gradlab.check import CheckSettings, check_gradient
from gradlab.measure.memory import peak_bytes
from gradlab.models import MLP

# GradScaler's fused NaN/inf test (private, but what torch.amp itself calls); None if it goes.
_FUSED_CHECK = getattr(torch, "_amp_foreach_non_finite_check_and_unscale_", None)


class GradientMethodError(RuntimeError):
    """A gradient method raised or returned something that is not one gradient per parameter."""


class GradientCheckFailed(RuntimeError):
    """Raised at the first failing check when CheckSettings.fail_fast is set."""


class StepRunner:
    """Runs steps and keeps the run's state: status ("running"/"diverged"), reason, first
    failing check. Metrics of each step go to sink(step, metrics)."""

    def __init__(
        self,
        model: MLP,
        grad_fn: Callable,
        grad_name: str,
        check: CheckSettings,
        sink: Callable[[int, dict[str, float]], None],
        mem_every: int = 100,
        seed: int = 0,
    ):
        self.model = model
        self.grad_fn = grad_fn
        self.grad_name = grad_name
        self.check = check
        self.sink = sink
        self.mem_every = mem_every
        # the Parameter objects outlive model.to(device), so one list serves every step
        self.names, self.params = map(list, zip(*model.named_parameters()))
        self.status = "running"
        self.reason = ""
        self.check_failed_at: dict | None = None
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed * 7)
        self._found_inf: Tensor | None = None  # _all_finite's flag and scale, on the device
        self._one: Tensor | None = None

    def reseed(self, step: int) -> None:
        """Check directions depend on (seed, step where training (re)started)."""
        self.gen = torch.Generator().manual_seed(self.seed * 7 + step)

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

    def _checked(self, result) -> tuple[Tensor | float, list[Tensor]]:
        """Make sure a method returned (loss, one well-formed gradient per parameter)."""
        try:
            loss, grads = result
        except (TypeError, ValueError):
            raise GradientMethodError(
                f"gradient method {self.grad_name!r} returned {type(result).__name__}, "
                "expected (loss, {parameter name: gradient})"
            ) from None
        if not isinstance(grads, dict):
            raise GradientMethodError(
                f"gradient method {self.grad_name!r} returned {type(grads).__name__}, "
                "expected a dict {parameter name: gradient}"
            )
        out = []
        for name, p in zip(self.names, self.params):
            g = grads.get(name)
            problem = None
            if g is None:
                problem = "is missing"
            elif not isinstance(g, Tensor):
                problem = f"is a {type(g).__name__}, not a tensor"
            elif g.shape != p.shape:
                problem = f"has shape {tuple(g.shape)}, expected {tuple(p.shape)}"
            elif g.dtype != p.dtype or g.device != p.device:
                problem = f"is {g.dtype} on {g.device}, expected {p.dtype} on {p.device}"
            if problem:
                raise GradientMethodError(
                    f"gradient method {self.grad_name!r}: gradient of {name!r} {problem}"
                )
            out.append(g)
        return loss, out

    def _all_finite(self, grads: list[Tensor]) -> bool:
        """Whether no gradient holds a NaN or an infinity, in one kernel where possible.

        This runs every step, between two timed gradient calls: the former torch.cat +
        isfinite + all took ~12 us of ops and made the next gradient ~2.5 us slower (issue 7).
        GradScaler's fused check multiplies by 1.0 in place (values unchanged); where a tensor
        refuses that (an expanded view, whose elements share memory), the plain test runs.
        """
        found = self._found_inf
        if found is None or found.device != grads[0].device:
            found = self._found_inf = torch.zeros(1, dtype=torch.float32, device=grads[0].device)
            self._one = torch.ones(1, dtype=torch.float32, device=grads[0].device)
        if _FUSED_CHECK is not None:
            try:
                found.zero_()
                with torch.no_grad():
                    _FUSED_CHECK(grads, found, self._one)
                return not found.item()
            except RuntimeError:
                pass
        return all(bool(g.isfinite().all()) for g in grads)

    def __call__(self, x: Tensor, y: Tensor, step: int, optimizer_step: Callable[[], object]):
        """One training step at global step `step`; optimizer_step() applies the .grad values."""
        clock = self._stopwatch()
        t0 = clock()
        try:
            result = self.grad_fn(self.model, x, y)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:
            raise GradientMethodError(f"gradient method {self.grad_name!r} raised: {e!r}") from e
        t1 = clock()
        loss, grads = self._checked(result)  # outside the timed region

        loss_value = float(loss)  # a 0-d tensor or a number
        finite = math.isfinite(loss_value) and self._all_finite(grads)
        metrics = {"train/loss": loss_value, "time/grad_ms": (t1 - t0) * 1e3}
        if not finite:
            bad = [n for n, g in zip(self.names, grads) if not torch.isfinite(g).all()]
            self.status = "diverged"
            self.reason = f"non-finite {'loss' if not math.isfinite(loss_value) else 'gradient'}"
            self.reason += f" at step {step}" + (f" ({', '.join(bad)})" if bad else "")
            self.sink(step, metrics)
            return metrics

        metrics.update(self._run_checks(step, x, y, grads))
        for p, g in zip(self.params, grads):
            p.grad = g
        optimizer_step()
        metrics["time/step_ms"] = (clock() - t0) * 1e3

        if self.mem_every and step % self.mem_every == 0:
            _, nbytes = peak_bytes(lambda: self.grad_fn(self.model, x, y), self.params[0].device)
            metrics["mem/peak_mb"] = nbytes / 2**20
        self.sink(step, metrics)
        if self.check.fail_fast and self.check_failed_at:
            raise GradientCheckFailed(
                f"gradient check failed at step {step} on {self.check_failed_at['param']} "
                f"(rel err {self.check_failed_at['rel_err']:.3g})"
            )
        return metrics

    def _run_checks(self, step: int, x: Tensor, y: Tensor, grads: list[Tensor]) -> dict:
        c = self.check
        modes = []
        if c.directional_every and step % c.directional_every == 0:
            modes.append("directional")
        if c.full_every and step % c.full_every == 0:
            modes.append("full")
        out: dict[str, float] = {}
        if not modes:
            return out
        named = dict(zip(self.names, grads))
        for mode in modes:  # full last, so its figures win when both run
            r = check_gradient(
                self.model,
                x,
                y,
                named,
                mode=mode,
                k=c.k,
                h=c.h,
                tol=c.tol,
                generator=self.gen,
                per_tensor=c.per_tensor,
            )
            out["grad/rel_err"] = r.rel_err
            out.update({f"grad/rel_err/{n}": e for n, e in r.rel_err_per_param.items()})
            out["grad/cos_sim"] = r.cos_sim
            out["grad/kinks"] = r.kinks
            out["grad/excluded"] = r.excluded
            out["grad/max_abs_diff"] = r.max_abs_diff
            if mode == "full":
                out["grad/full_rel_err"] = r.rel_err
            if not r.passed and self.check_failed_at is None:
                worst = r.worst_param
                failed_alone = bool(worst) and r.rel_err_per_param[worst] > r.tol  # else global
                self.check_failed_at = {
                    "step": step,
                    "mode": mode,
                    "param": worst if failed_alone else "all (global)",
                    "rel_err": r.rel_err_per_param[worst] if failed_alone else r.rel_err,
                    "tol": r.tol,
                }
        return out

    def metric_columns(self) -> list[str]:
        per = [f"grad/rel_err/{n}" for n in self.names]
        return [
            "train/loss",
            "grad/rel_err",
            *per,
            "grad/full_rel_err",
            "grad/cos_sim",
            "grad/kinks",
            "grad/excluded",
            "grad/max_abs_diff",
            "time/grad_ms",
            "time/step_ms",
            "mem/peak_mb",
        ]
