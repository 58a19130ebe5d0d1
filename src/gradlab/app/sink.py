"""Where a run's step metrics go: every step into the run's state, the logged steps to
metrics.csv and W&B, handed over in groups."""

from __future__ import annotations

from gradlab.training.record import MetricsCSV
from gradlab.training.state import RunState


class MetricSink:
    """sink(step, metrics) for every step: the state records it; the logged steps (every
    log_every, the last one, the one that ended the run) are handed to metrics.csv and W&B
    together every flush_every steps, on the steps that run the checks anyway, so the gradient
    timed in the other steps is not slowed by logging; hand_over() sends what is left when a run
    stops in between."""

    def __init__(
        self,
        state: RunState,
        log_every: int,
        flush_every: int,
        last_step: int,
        csv: MetricsCSV | None = None,
        wandb_logger=None,
    ):
        self.state, self.every, self.flush_every = state, log_every, flush_every
        self.last = last_step
        self.csv, self.wandb_logger = csv, wandb_logger
        self.pending: list[tuple[int, dict[str, float]]] = []

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        self.state.record(step, metrics)
        ending = step == self.last or self.state.status != "running"
        if step % self.every == 0 or ending:
            self.pending.append((step, metrics))
        if step % self.flush_every == 0 or ending:
            self.hand_over()

    def hand_over(self) -> None:
        rows, self.pending = self.pending, []
        if self.csv is not None:
            self.csv.write_rows(rows)
        if self.wandb_logger is not None:
            for step, metrics in rows:
                self.wandb_logger.log_metrics(metrics, step=step)

    def close(self) -> None:
        if self.csv is not None:
            self.csv.close()
