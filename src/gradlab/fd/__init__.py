"""Central finite differences: the independent reference every gradient check compares with.

For an MLP (gradlab.fd.mlp) the differences are exact to rounding: the change a step makes is
propagated layer by layer (gradlab.fd.propagate) instead of subtracting two losses, so a step as
small as sqrt(eps) leaves only rounding-level error, also where the gradient is tiny. For any
other function of tensors (gradlab.fd.function) they are plain: two evaluations subtracted.
"""

from gradlab.fd.function import coordinate_steps, function_differences, plain_steps, row_steps
from gradlab.fd.mlp import (
    KINK_RECHECK_FACTOR,
    Steps,
    coordinate_differences,
    coordinate_fd,
    default_h,
    default_steps,
    dense_steps,
    direction_differences,
    direction_fd,
    factor_differences,
    with_kink_recheck,
)
from gradlab.fd.point import DEFAULT_MAX_BYTES, EvaluationPoint, Forward, evaluation_point

__all__ = [
    "DEFAULT_MAX_BYTES",
    "KINK_RECHECK_FACTOR",
    "EvaluationPoint",
    "Forward",
    "Steps",
    "coordinate_differences",
    "coordinate_fd",
    "coordinate_steps",
    "default_h",
    "default_steps",
    "dense_steps",
    "direction_differences",
    "direction_fd",
    "evaluation_point",
    "factor_differences",
    "function_differences",
    "plain_steps",
    "row_steps",
    "with_kink_recheck",
]
