"""How often the training-time checks run and how they judge."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CheckSettings:
    """How often a training run's checks run (0 = never) and how they judge (gradlab.check);
    also the config schema of `check`, so every default is here."""

    directional_every: int = 20  # directional check every N steps (0 = never)
    full_every: int = 200  # full check every N steps (0 = never); it stands for the directional
    k: int = 4  # random directions per directional check (per tensor with per_tensor), >= 1
    # directional: k directions per parameter tensor on every check (T times the work, errors per
    # tensor each time) instead of k global ones that escalate to per-tensor only on a failure
    per_tensor: bool = False
    h: float | None = None  # step of the differences; None = sqrt(float64 eps) (gradlab.fd)
    tol: float | None = None  # the math tolerance (float64); None = gradlab.check.MATH_TOL
    # a full check samples coordinates within this many times the recent gradient time (every
    # tensor represented); None = every coordinate, however long (progress is shown)
    full_max_gradients: float | None = 20.0
    fail_fast: bool = False  # stop the run at the first failing check
