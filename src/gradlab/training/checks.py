"""The checks of a training run: which steps they run on, within what time, and the metrics a
verdict becomes (gradlab.check judges; this only schedules and names)."""

from __future__ import annotations

import collections
import statistics

from torch import Tensor

import gradlab.training.metrics as m
from gradlab.check import Checker, CheckSettings, Verdict
from gradlab.check.reference import Progress
from gradlab.training.state import RunState


class StepChecks:
    """Runs the run's Checker on the steps its cadence names: a full check on multiples of
    full_every (which then stands for the directional one too), else a directional check on
    multiples of directional_every. A full check's coordinates are sampled within
    full_max_gradients times the recent gradient time (None: all of them, with `progress`)."""

    def __init__(
        self,
        checker: Checker,
        settings: CheckSettings,
        state: RunState,
        progress: Progress | None = None,
    ):
        self.checker, self.settings, self.state, self.progress = checker, settings, state, progress
        self.recent = collections.deque(maxlen=9)  # the last gradients' seconds

    def reseed(self, seed: int) -> None:
        self.checker.reseed(seed)

    def mode(self, step: int) -> str | None:
        s = self.settings
        if s.full_every and step % s.full_every == 0:
            return "full"
        if s.directional_every and step % s.directional_every == 0:
            return "directional"
        return None

    def __call__(
        self, step: int, x: Tensor, y: Tensor, grads: dict[str, Tensor], grad_seconds: float
    ) -> dict[str, float]:
        """The check of this step (if any) as metrics; the verdict goes into the run's state."""
        self.recent.append(grad_seconds)
        mode = self.mode(step)
        if mode is None:
            return {}
        budget = self.settings.full_max_gradients
        budget_s = None if budget is None else budget * statistics.median(self.recent)
        verdict = self.checker(mode, x, y, grads, budget_s, self.progress)
        self.state.judged(step, verdict)
        return verdict_metrics(verdict)


def verdict_metrics(verdict: Verdict) -> dict[str, float]:
    """A verdict as the step's check metrics (gradlab.training.metrics)."""
    result, found = verdict.math, verdict.precision
    out = {m.REL_ERR: verdict.rel_err, m.MATH_REL_ERR: result.rel_err}
    out.update({m.per_param(n): e for n, e in result.rel_err_per_param.items()})
    out.update({m.COS_SIM: result.cos_sim, m.KINKS: result.kinks, m.EXCLUDED: result.excluded})
    out.update({m.MAX_ABS_DIFF: result.max_abs_diff, m.CHECK_MS: verdict.seconds * 1e3})
    if verdict.mode == "full":
        out.update({m.FULL_REL_ERR: verdict.rel_err, m.COVERAGE: result.coverage})
    if found is not None and found.ratio is not None:  # measured against the dtype's own error
        out[m.PRECISION_RATIO] = found.ratio
        out[m.DTYPE_REL_ERR] = found.dtype_rel_err
    return out
