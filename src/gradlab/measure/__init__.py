"""What a gradient costs: timers and peak memory of one call."""
