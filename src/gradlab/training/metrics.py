"""Every metric a run logs, named once: metrics.csv's columns and W&B's keys, which the reports
and the W&B workspace read back.

The check figures (gradlab.check's docstring says how each is measured):
  grad/rel_err            the run's gradient against the reference: the verified float64 re-run
                          of the method where the run is in a lower dtype, else the differences
  grad/rel_err/<param>    per tensor, the gradient the math was judged on against the
                          differences, where the check measured tensors one by one (a full
                          check, or directions that escalated to per-tensor ones)
  grad/math_rel_err       the gradient the math was judged on, against the differences
  grad/precision_ratio    the run gradient's error over the one its dtype itself makes, where
                          it was measured (only when the error could make it exceed 100)
  grad/dtype_rel_err      that error of the dtype itself (autograd), with it
  grad/coverage           the fraction of coordinates a full check compared
"""

from __future__ import annotations

LOSS = "train/loss"
VAL_LOSS = "val/loss"  # on the validation split, after the step (data with a split)
VAL_ACC = "val/acc"  # the fraction of validation samples whose argmax is their label
GRAD_MS = "time/grad_ms"  # the gradient method's call alone
STEP_MS = "time/step_ms"  # the whole step: gradient, checks, optimizer
CHECK_MS = "time/check_ms"  # the step's checks alone
PEAK_MB = "mem/peak_mb"  # peak memory of one gradient computation, MiB
REL_ERR = "grad/rel_err"
FULL_REL_ERR = "grad/full_rel_err"  # grad/rel_err on the steps of a full check
MATH_REL_ERR = "grad/math_rel_err"
PRECISION_RATIO = "grad/precision_ratio"
DTYPE_REL_ERR = "grad/dtype_rel_err"
COS_SIM = "grad/cos_sim"
KINKS = "grad/kinks"
EXCLUDED = "grad/excluded"
MAX_ABS_DIFF = "grad/max_abs_diff"
COVERAGE = "grad/coverage"
REL_ERR_PREFIX = REL_ERR + "/"


def per_param(name: str) -> str:
    """The per-tensor error column of one parameter: grad/rel_err/<name>."""
    return REL_ERR_PREFIX + name


def columns(param_names: list[str], validation: bool = False) -> list[str]:
    """metrics.csv's columns for a model with these parameters (and a validation split), in
    order."""
    checks = [REL_ERR, *map(per_param, param_names), FULL_REL_ERR, MATH_REL_ERR]
    checks += [PRECISION_RATIO, DTYPE_REL_ERR, COS_SIM, KINKS, EXCLUDED, MAX_ABS_DIFF, COVERAGE]
    val = [VAL_LOSS, VAL_ACC] if validation else []
    return [LOSS, *val, *checks, GRAD_MS, STEP_MS, CHECK_MS, PEAK_MB]
