"""How often the training-time checks run and how they judge."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CheckSettings:
    """How often the finite-difference checks run (0 = never) and how they judge; also the
    config schema of `check` (gradlab.app.config). The default cadence keeps the checks' cost
    per step below one gradient of the default run (issue 7)."""

    directional_every: int = 10  # directional FD check every N steps (0 = never)
    full_every: int = 100  # full FD check every N steps (0 = never)
    k: int = 4  # random directions per directional check (per tensor with per_tensor), >= 1
    # directional: k directions per parameter tensor on every check (T times the work, errors per
    # tensor each time) instead of k global ones that escalate to per-tensor only on a failure
    per_tensor: bool = False
    h: float | None = None  # relative step; None = cbrt(float64 eps)
    tol: float | None = None  # pass threshold; None = by gradient dtype (see gradlab.check)
    fail_fast: bool = False  # stop the run at the first failing check
