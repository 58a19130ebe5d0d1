"""The verdict of a training step's check: is the method's math right, and is its gradient as
precise as the run's dtype allows? The specification is gradlab.check's docstring."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

import gradlab.check.generic as generic
import gradlab.check.gradient as gradient
import gradlab.check.precision as precision
import gradlab.check.reference as reference
from gradlab import fd
from gradlab.check.result import CheckResult
from gradlab.check.settings import CheckSettings
from gradlab.fd.generic import GenericPoint, generic_point
from gradlab.models import MLP

# Math is judged in float64: a correct gradient meets the exact differences to rounding (more
# where a sum over samples nearly cancels), far below this, and a defect of 1e-8 of a tensor's
# norm is ten times it.
MATH_TOL = 1e-9

GradMethod = Callable[[nn.Module, Tensor, Tensor], "tuple[Tensor, dict[str, Tensor]]"]


@dataclass
class Verdict:
    """What one check found. math: the gradient whose math is judged (the method re-run on a
    float64 copy; the run's own gradient in a float64 run, or when the method cannot run in
    float64) against the finite differences; precision: the run gradient against that float64
    one (runs below float64), or the lower dtype a float64 run's values fit."""

    mode: str
    math: CheckResult
    precision: precision.Precision | None
    # what the math was judged on: "float64 re-run", "run dtype", or the fallback; with
    # ", plain differences (any module)" where the reference is gradlab.fd.generic's
    basis: str
    rel_err: float  # the run gradient's error against the reference (grad/rel_err)
    seconds: float

    @property
    def passed(self) -> bool:
        return self.math.passed


class Checker:
    """Runs the checks of one training run: a float64 shadow of the model for the math re-run,
    the directions' generator, the fallback once the method is found not to run in float64."""

    def __init__(
        self, model: nn.Module, method: GradMethod, baseline: GradMethod, settings: CheckSettings
    ):
        self.model, self.method, self.baseline, self.settings = model, method, baseline, settings
        self.params = list(model.parameters())
        self.dtype = self.params[0].dtype
        self.shadow: nn.Module | None = None
        self.fallback = ""  # why the method cannot run in float64 ("" until it failed to)
        self.generic = False  # True: plain differences through torch.func even for an MLP
        self.generator = torch.Generator()

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def __call__(
        self,
        mode: str,
        x: Tensor,
        y: Tensor,
        grads: dict[str, Tensor],
        budget_s: float | None = None,
        progress: reference.Progress | None = None,
    ) -> Verdict:
        start = time.perf_counter()
        point = self._point(x, y)
        run64 = self.dtype == torch.float64
        g64 = grads if run64 else self._float64_gradient(point)
        judged = grads if g64 is None else g64
        lower = precision.effective_dtype(judged)  # it holds only a lower dtype's values
        tol = MATH_TOL if self.settings.tol is None else self.settings.tol
        ref, math_result = self._reference(mode, point, judged, tol, budget_s, progress)
        found, rel_err, basis = (
            None,
            math_result.rel_err,
            "run dtype" if run64 else "float64 re-run",
        )
        if g64 is None:  # the method cannot run in float64: its own gradient, at its dtype's level
            basis = f"run dtype ({self.fallback})"
            math_result = self._judged_at_dtype(ref, grads, self.dtype)
        elif lower:  # computed below float64 whatever it was given: precision, and math at that
            basis += f" (its values are {lower})"
            math_result = self._judged_at_dtype(ref, judged, getattr(torch, lower))
            found = self._lower_precision(ref, grads, lower)
            rel_err = found.rel_err
        elif not run64:
            found = precision.judge(grads, g64, self._dtype_gradient(x, y, grads), point)
            rel_err = found.rel_err
            if not math_result.passed:  # g64 is wrong: the run gradient against the differences
                rel_err = reference.compare(ref, grads, tol).rel_err
        if isinstance(point, GenericPoint):  # kinks found by step consistency, not declared
            basis += ", plain differences (any module)"
        return Verdict(mode, math_result, found, basis, rel_err, time.perf_counter() - start)

    def _point(self, x: Tensor, y: Tensor) -> fd.EvaluationPoint | GenericPoint:
        """The float64 point of the check: the MLPs' exact differences, or plain ones through
        torch.func on the float64 shadow of any other module."""
        if isinstance(self.model, MLP) and not self.generic:
            return fd.evaluation_point(self.model, x, y, torch.float64)
        return generic_point(self._synced_shadow(), x, y)

    def _synced_shadow(self) -> nn.Module:
        """The float64 copy of the model (made once, without the user writing anything),
        holding the model's current parameters and buffers."""
        if self.shadow is None:
            self.shadow = copy.deepcopy(self.model).to(torch.float64)
        with torch.no_grad():
            for mine, p in zip(self.shadow.parameters(), self.params):
                mine.copy_(p)
            for mine, b in zip(self.shadow.buffers(), self.model.buffers()):
                mine.copy_(b)
        return self.shadow

    def _reference(self, mode, point, judged, tol, budget_s, progress):
        s = self.settings
        if mode == "full":
            full = generic.full if isinstance(point, GenericPoint) else reference.full
            ref = full(point, s.h, budget_s=budget_s, generator=self.generator, progress=progress)
            return ref, reference.compare(ref, judged, tol)
        ref, (result,) = gradient.directional(
            point, s.k, s.h, self.generator, fd.DEFAULT_MAX_BYTES, s.per_tensor, [judged], tol
        )
        return ref, result

    def _float64_gradient(self, point) -> dict[str, Tensor] | None:
        """The method on float64 copies of the parameters and batch; None (and the reason kept)
        when it cannot run there."""
        if self.fallback:
            return None
        # a generic point was made on the shadow this check synced; an MLP point needs it synced
        model = self.shadow if isinstance(point, GenericPoint) else self._synced_shadow()
        try:
            _, grads = self.method(model, point.x, point.y)
            _well_formed(grads, point)
            return {n: g.detach() for n, g in grads.items()}
        except Exception as e:  # any failure: this method cannot be re-run in float64
            self.fallback = f"the method cannot run in float64: {type(e).__name__}: {e}"
            return None

    def _dtype_gradient(self, x, y, grads):
        """What the run's dtype itself gives: the baseline method (autograd) on the run's own
        parameters and batch; the run gradient itself when the method is the baseline."""
        if self.method is self.baseline:
            return lambda: grads
        return lambda: self.baseline(self.model, x, y)[1]

    def _dtype_error(self, ref: reference.Reference, dtype: torch.dtype) -> float:
        """The error the baseline method (autograd) makes in `dtype` on the reference's batch
        (its worst tensor), at least one unit roundoff."""
        model = self.model if dtype == self.dtype else copy.deepcopy(self.model).to(dtype)
        y = ref.point.y.to(dtype) if ref.point.y.is_floating_point() else ref.point.y  # labels stay
        _, own = self.baseline(model, ref.point.x.to(dtype), y)
        base = reference.compare(ref, own, math.inf)
        return max([base.rel_err, *base.rel_err_per_param.values(), precision.unit_roundoff(dtype)])

    def _judged_at_dtype(self, ref, grads, dtype) -> CheckResult:
        """The gradient against the differences at FACTOR times the error its dtype's baseline
        makes on the same batch."""
        return reference.compare(ref, grads, precision.FACTOR * self._dtype_error(ref, dtype))

    def _lower_precision(self, ref, grads, lower: str) -> precision.Precision:
        """The run gradient of a method that computes in `lower`: its error against the
        differences, and how many times the run dtype's own that is."""
        run = reference.compare(ref, grads, math.inf)
        own = self._dtype_error(ref, self.dtype)
        per = dict(run.rel_err_per_param)
        worst = max(per, key=per.get, default="")
        return precision.Precision(
            run.rel_err, per, run.rel_err / own, own, worst, effective_dtype=lower
        )


def _well_formed(grads, point: fd.EvaluationPoint) -> None:
    """A float64 re-run must give one float64 tensor of the right shape per parameter."""
    if not isinstance(grads, dict):
        raise TypeError(f"returned {type(grads).__name__}, not a dict")
    for name, shape in point.shapes.items():
        g = grads.get(name)
        if not isinstance(g, Tensor) or g.shape != shape or g.dtype != torch.float64:
            raise TypeError(f"gradient of {name!r} is not a float64 tensor of shape {tuple(shape)}")
