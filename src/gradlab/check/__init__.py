"""Is a gradient right? The specification of gradlab's checks; the modules implement it.

Reference. Central finite differences of the loss in float64, on a float64 copy of the
parameters and batch, whatever dtype the gradient was computed in: the independent reference,
from forward evaluations only. For the MLPs they are exact to rounding (gradlab.fd propagates the
change a step makes instead of subtracting two losses), so the step can be tiny: h = sqrt(eps)
(relative to max(1, |theta_i|) for a coordinate) unless check.h says otherwise. Two modes:

- ``full``: every parameter coordinate (gradlab.fd's batched rank-1 path); a training run's full
  check samples coordinates within a time budget when the net is too large for all of them,
  every tensor represented (``coverage`` says which fraction it compared).
- ``directional``: k fresh random unit directions over all parameters (a weight's part rank-1,
  so the cost is a few gradients whatever the width), comparing g . u with the difference along
  u. That global stage only screens: a wrong tensor with a small share of the gradient's norm
  barely moves the global error, so it passes a gradient only when its error is below
  tol / GLOBAL_MARGIN. Otherwise (or when a direction cannot get off a kink, below) the same
  call takes k fresh directions per parameter tensor, which judge each tensor on its own scale
  and name the wrong one. ``per_tensor=True`` always takes those. A passing global result has
  no per-tensor errors (``rel_err_per_param`` is empty).

ReLU kinks. A step that flips any ReLU on/off decision (any unit, any sample) makes the
difference straddle a kink. Such steps are counted (``kinks``), redone ten times smaller, and
those still kinked are excluded (``excluded``), never counted as mismatches. Likewise where a
gradient computed in float32 saw a hidden pre-activation on the other side of 0 than float64
does (a sample on a kink, within float32 rounding): that layer's and the lower layers' tensors
are excluded and counted as kinks.

Any other nn.Module. The module is opaque: the float64 copy of it (deep-copied and cast, no
user code needed) is evaluated through torch.func (functional_call + vmap, one parameter set
after another when its ops cannot be vmapped), and the differences are plain ones of two
losses, at two steps combined by Richardson (gradlab.fd.generic), along dense random unit
directions or coordinates. Their accuracy is estimated row by row, and the tolerance is never
below ten times it (the reference's floor; CheckResult.tol says what it was). Kinks are not
declared by such a module, so they are found by the steps' disagreement: a row the re-check
cannot resolve is excluded and counted (``kinks``, ``excluded``), and the verdict's basis says
the reference was plain differences. The MLPs keep the exact differences, which are faster.

Metrics. The norm-relative error ||g - g_fd|| / max(||g||, ||g_fd||) globally and per tensor
(directional: of the projections, which estimate it); a tensor's denominator is floored at 1e-6
of the global scale, so a tensor whose gradient is ~0 is judged in absolute terms. Also the max
abs difference and the cosine similarity. A NaN or inf in a tensor's gradient makes its error
inf: a fail, never a silent pass. check_gradient's verdict: every error <= tol, tol by the
gradient's dtype (DEFAULT_TOL) unless given.

The verdict of a training step (Checker, gradlab.check.verdict) asks two questions apart:
- math: the method is run again on float64 copies of the parameters and batch, and that
  gradient is judged against the reference at MATH_TOL (a float64 run's own gradient is that
  gradient). A method that cannot run in float64 falls back to its run-dtype gradient, judged
  at PRECISION_FACTOR times the error autograd makes in that dtype on the same batch, and the
  summary says so (grad_check_basis).
- precision (runs below float64): the run gradient against the verified float64 one, tensor by
  tensor, set against the error its dtype itself makes on the batch (autograd in that dtype):
  a ratio above PRECISION_FACTOR is a finding, reported apart from the math (gradlab.check
  .precision). A float64 run whose gradient's values all fit a lower dtype is one too.

check_function applies the same modes and metrics to the backward of any function of tensors
that broadcasts over a leading batch dim, with plain differences (the function is opaque).
"""

from gradlab.check.function import check_function
from gradlab.check.gradient import GLOBAL_MARGIN, MODES, check_gradient
from gradlab.check.precision import FACTOR as PRECISION_FACTOR
from gradlab.check.precision import Precision
from gradlab.check.result import DEFAULT_TOL, CheckResult
from gradlab.check.settings import CheckSettings
from gradlab.check.verdict import MATH_TOL, Checker, Verdict

__all__ = [
    "DEFAULT_TOL",
    "GLOBAL_MARGIN",
    "MATH_TOL",
    "MODES",
    "PRECISION_FACTOR",
    "CheckResult",
    "CheckSettings",
    "Checker",
    "Precision",
    "Verdict",
    "check_function",
    "check_gradient",
]
