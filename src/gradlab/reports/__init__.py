"""Compare runs from their files (summary.json, metrics.csv): sweep summaries (sweep), the
comparison table (table), its plots (plots) and the written report (write)."""
