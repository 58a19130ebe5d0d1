"""What does a hand-rolled tape cost per gradient, next to autograd, manual and function?

Times the gradient methods with gradlab.measure.timing (warm medians of torch.utils.benchmark),
both MLPs,
batch 100, float32 and float64; the whole sweep is repeated and each figure is the lowest of the
repeats. Writes results.json, results.md and the README's marked results section.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from gradlab.measure import timing
from gradlab.models import MLPS as MODELS
from gradlab.studies.results import write_results

HERE = Path(__file__).resolve().parent
METHODS = ("tape", "autograd", "manual", "function")


def measure(models, methods, dtypes, batch, repeats, quick) -> list[dict]:
    """One row per (model, dtype, method): the lowest median over ``repeats`` sweeps."""
    best: dict[tuple[str, str, str], float] = {}
    for _ in range(repeats):  # whole sweeps, so other load on shared cores spreads over methods
        cases = timing.method_cases(models, methods, dtypes, batch)
        rounds, min_run_time = (1, 0.01) if quick else (10, 0.05)
        for (model, method, dtype), us in timing.round_robin_medians(
            cases, rounds, min_run_time
        ).items():
            key = (model, dtype, method)
            best[key] = min(best.get(key, float("inf")), us)
    return [
        {"model": m, "dtype": d, "method": k, "batch": batch, "median_us": us}
        for (m, d, k), us in best.items()
    ]


def to_markdown(result: dict) -> str:
    methods = list(dict.fromkeys(r["method"] for r in result["rows"]))
    times = {(r["model"], r["dtype"], r["method"]): r["median_us"] for r in result["rows"]}
    lines = [
        "| model | dtype | " + " | ".join(f"{m} µs" for m in methods) + " | tape / autograd "
        "| tape / manual |",
        "|---|---|" + "---:|" * (len(methods) + 2),
    ]
    for model, dtype in dict.fromkeys((m, d) for m, d, _ in times):
        t = {k: times[model, dtype, k] for k in methods}
        lines.append(
            f"| {model} | {dtype} | "
            + " | ".join(f"{t[k]:.1f}" for k in methods)
            + f" | {t['tape'] / t['autograd']:.2f} | {t['tape'] / t['manual']:.2f} |"
        )
    env, r0 = result["env"], result["rows"][0]
    lines += [
        "",
        f"Batch {r0['batch']}; per-gradient warm medians (torch.utils.benchmark), the lowest of "
        f"{result['repeats']} sweeps. Machine: {env['cpu']} ({env['cores']} cores, "
        f"{env['threads']} torch threads); torch {env['torch']}, Python {env['python']}; "
        f"{env['date']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--dtypes", nargs="+", default=list(timing.DTYPES), choices=timing.DTYPES)
    parser.add_argument("--batch", type=int, default=timing.BATCH)
    parser.add_argument("--repeats", type=int, default=5, help="sweeps; the lowest median counts")
    # One thread: these gradients are too small to gain from intra-op threads, and on shared
    # cores a second thread that waits for a busy core costs milliseconds.
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--quick", action="store_true", help="short timings (smoke runs)")
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results and README are")
    args = parser.parse_args(argv)
    if not {"tape", "autograd", "manual"} <= set(args.methods):
        parser.error("--methods must include tape, autograd and manual (the table's ratios)")
    torch.set_num_threads(args.threads)
    rows = measure(args.models, args.methods, args.dtypes, args.batch, args.repeats, args.quick)
    result = {"env": timing.environment(), "repeats": args.repeats, "rows": rows}
    markdown = to_markdown(result)
    print(markdown)
    write_results(args.out_dir, "results", result, markdown)
    return result


if __name__ == "__main__":
    main()
