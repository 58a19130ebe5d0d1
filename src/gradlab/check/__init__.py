"""Is a gradient right? Finite-difference checks of gradients (check_gradient) and of any
function's backward (check_function); the settings of the checks a training run makes."""

from gradlab.check.function import check_function
from gradlab.check.gradient import MODES, check_gradient
from gradlab.check.result import DEFAULT_TOL, CheckResult
from gradlab.check.settings import CheckSettings

__all__ = [
    "DEFAULT_TOL",
    "MODES",
    "CheckResult",
    "CheckSettings",
    "check_function",
    "check_gradient",
]
