"""One training run, free of any framework: the data, the optimizer, the step and its checks,
the run's state, and what a run writes (metrics.csv, summary.json)."""
