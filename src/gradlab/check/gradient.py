"""check_gradient: a gradient against float64 finite differences, in either mode (the
specification is gradlab.check's docstring)."""

from __future__ import annotations

import torch
from torch import Tensor

import gradlab.check.generic as generic
import gradlab.check.reference as reference
from gradlab import fd
from gradlab.check.directions import global_directions, tensor_directions
from gradlab.check.result import DEFAULT_TOL, CheckResult
from gradlab.fd.generic import GenericPoint
from gradlab.models import MLP

# The global directional stage passes a gradient only with an error below tol / GLOBAL_MARGIN:
# a tensor wrong by a factor r with a share f of the gradient's norm shows there as about r * f
# (k projections estimate it roughly), so a small tensor's defect hides in a global error
# judged at tol itself; anything not clearly clean is judged tensor by tensor.
GLOBAL_MARGIN = 100.0
MODES = ("full", "directional")


def check_gradient(
    model: MLP,
    x: Tensor,
    y: Tensor,
    grads: dict[str, Tensor],
    mode: str = "directional",
    k: int = 4,
    h: float | None = None,
    tol: float | None = None,
    generator: torch.Generator | None = None,
    max_bytes: int = fd.DEFAULT_MAX_BYTES,
    per_tensor: bool = False,
) -> CheckResult:
    """Compare `grads` (one per named parameter of `model`) with float64 finite differences."""
    if mode not in MODES:
        raise ValueError(f"unknown check mode {mode!r}; allowed: {', '.join(MODES)}")
    point = fd.evaluation_point(model, x, y, torch.float64)
    validate(point, grads)
    if tol is None:
        tol = DEFAULT_TOL.get(next(iter(grads.values())).dtype, 1e-6)
    if mode == "full":
        return reference.compare(reference.full(point, h, max_bytes), grads, tol)
    ref, (result,) = directional(point, k, h, generator, max_bytes, per_tensor, [grads], tol)
    return result


def directional(
    point: fd.EvaluationPoint,
    k: int,
    h: float | None,
    generator: torch.Generator | None,
    max_bytes: int,
    per_tensor: bool,
    judged: list[dict[str, Tensor]],
    tol: float,
) -> tuple[reference.Reference, list[CheckResult]]:
    """The directional reference and the results of the gradients `judged` against it: k global
    directions, kept if every gradient judged is clearly clean along them (error below
    tol / GLOBAL_MARGIN, no direction still kinked); else, or with per_tensor, k directions per
    tensor."""
    if not per_tensor:
        ref = _directions(point, k, h, generator, max_bytes, per_tensor=False)
        if ref.excluded is None or not bool(ref.excluded.any()):
            results = [reference.compare(ref, g, tol) for g in judged]
            # the screen is judged at the tolerance the compare used (a plain difference's floor)
            if all(r.rel_err < r.tol / GLOBAL_MARGIN for r in results):
                return ref, results
    ref = _directions(point, k, h, generator, max_bytes, per_tensor=True)
    return ref, [reference.compare(ref, g, tol) for g in judged]


def _directions(point, k, h, generator, max_bytes, per_tensor: bool) -> reference.Reference:
    """The directional reference: exact differences along rank-1 directions for an MLP,
    plain ones along dense directions for any other module."""
    if isinstance(point, GenericPoint):
        return generic.directional(point, k, h, generator, per_tensor)
    h = fd.default_h(torch.float64) if h is None else h
    pick = tensor_directions if per_tensor else global_directions
    return reference.directional(point, pick(point, k, generator), h, max_bytes)


def validate(point: fd.EvaluationPoint, grads: dict[str, Tensor]) -> None:
    """One gradient per parameter of the point, each shaped like it."""
    names = list(point.shapes)
    missing = [n for n in names if n not in grads]
    if missing:
        raise ValueError(f"gradient is missing parameters: {', '.join(missing)}")
    wrong = [n for n in names if grads[n].shape != point.shapes[n]]
    if wrong:
        raise ValueError(
            "gradient has the wrong shape for: "
            + ", ".join(f"{n} {tuple(grads[n].shape)}, not {tuple(point.shapes[n])}" for n in wrong)
        )
