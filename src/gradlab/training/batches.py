"""The steps' batches, grouped: Lightning pays its per-batch work once per group."""

from __future__ import annotations

from collections.abc import Iterator

from torch import Tensor

from gradlab.data import Dataset


class StepBatches:
    """An endless iterable of step groups starting at `start_step` (set it when resuming): each
    item holds (step, x, y) for consecutive steps, at most `steps_per_group` of them, ending on
    the next multiple of `event_every` (default: steps_per_group) if that comes first: 0,
    1..10, 11..20, ... for 10 and 10. Groups end on the steps where the checks and logging run,
    so the work between two groups follows those steps, never a step inside a group."""

    def __init__(
        self,
        data: Dataset,
        start_step: int = 0,
        steps_per_group: int = 1,
        event_every: int | None = None,
    ):
        self.data = data
        self.start_step = start_step
        self.steps_per_group = steps_per_group
        self.event_every = event_every or steps_per_group

    def __iter__(self) -> Iterator[list[tuple[int, Tensor, Tensor]]]:
        step, k, e = self.start_step, self.steps_per_group, self.event_every
        while True:
            end = min(-(-step // e) * e, step + k - 1)  # the next event step, or k steps on
            yield [(s, *self.data.batch(s)) for s in range(step, end + 1)]
            step = end + 1
