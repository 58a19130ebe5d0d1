"""Does torch.compile pay off for a gradient step? Compile time vs per-gradient time, both MLPs.

For each (model, method): the first call of gradlab.grads.compiled(method) (the compilation),
then the warm median time per gradient, plain and compiled (gradlab.measure.timing.median_us).
Writes
results.json, results.md and the README's marked results section (results_cuda.* and the
``results-cuda`` section for ``--device cuda``). By default inductor's on-disk caches start
empty (a temporary TORCHINDUCTOR_CACHE_DIR), so the compile times are cold ones.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

from gradlab.grads import METHODS
from gradlab.grads.compiled import compile_error, compiled
from gradlab.measure import timing
from gradlab.models import MLPS as MODELS
from gradlab.models import build_model
from gradlab.studies.results import write_results

HERE = Path(__file__).resolve().parent


def sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def measure(models, methods, dtype_name, batch, device, min_run_time, repeats) -> dict:
    """Rows of compile seconds and plain/compiled microseconds per gradient: the lowest of
    ``repeats`` interleaved warm medians (other load on shared cores only ever adds time)."""
    t0 = time.perf_counter()
    reason = compile_error(device)  # also the process's one-off inductor start-up
    if reason is not None:
        raise SystemExit(f"torch.compile does not work on this machine ({device}): {reason}")
    startup_s = time.perf_counter() - t0
    rows = []
    for model_name in models:
        model = build_model(model_name, dtype=timing.DTYPES[dtype_name], device=device)
        x, y = (t.to(device) for t in timing.make_batch(model, timing.DTYPES[dtype_name], batch))
        for method in methods:
            plain, step = METHODS[method], compiled(METHODS[method])
            t0 = time.perf_counter()
            step(model, x, y)
            sync(device)
            compile_s = time.perf_counter() - t0
            times: dict[str, list[float]] = {"plain": [], "compiled": []}
            for _ in range(repeats):  # interleaved; the lowest median counts
                for kind, fn in (("plain", plain), ("compiled", step)):
                    times[kind].append(timing.median_us(partial(fn, model, x, y), min_run_time))
            plain_us, compiled_us = min(times["plain"]), min(times["compiled"])
            gain_us = plain_us - compiled_us
            rows.append(
                {
                    "model": model_name,
                    "method": method,
                    "dtype": dtype_name,
                    "batch": batch,
                    "compile_s": round(compile_s, 2),
                    "plain_us": round(plain_us, 1),
                    "compiled_us": round(compiled_us, 1),
                    "speedup": round(plain_us / compiled_us, 2),
                    # gradient steps before the compile time is paid back (None: never)
                    "break_even_steps": round(compile_s * 1e6 / gain_us) if gain_us > 0 else None,
                }
            )
    return {"startup_s": round(startup_s, 2), "rows": rows}


def to_markdown(result: dict) -> str:
    env = result["env"]
    lines = [
        "| model | method | compile (first call) s | plain µs | compiled µs | speed-up "
        "| steps to pay back the compile |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        pay = "never" if r["break_even_steps"] is None else f"{r['break_even_steps']:,}"
        lines.append(
            f"| {r['model']} | {r['method']} | {r['compile_s']:.2f} | {r['plain_us']:.1f} "
            f"| {r['compiled_us']:.1f} | {r['speedup']:.2f}x | {pay} |"
        )
    r0 = result["rows"][0]
    lines += [
        "",
        f"Batch {r0['batch']}, {r0['dtype']}, device {env['device']}; per-gradient times are "
        "warm medians (torch.utils.benchmark), the lowest of interleaved repeats. One-off "
        "inductor start-up before the first "
        f"compile (in-process probe): {result['startup_s']:.2f} s. Inductor cache: "
        f"{env['inductor_cache']}.",
        "",
        f"Machine: {env['cpu']} ({env['cores']} cores, {env['threads']} torch threads)"
        + (f", GPU {env['gpu']}" if env.get("gpu") else "")
        + f"; torch {env['torch']}, Python {env['python']}; {env['date']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--methods", nargs="+", default=["autograd", "manual"], choices=METHODS)
    parser.add_argument("--dtype", default="float32", choices=list(timing.DTYPES))
    parser.add_argument("--batch", type=int, default=timing.BATCH)
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds per timing")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timings, lowest kept")
    # One thread: a 100-row MLP gradient is too small to gain from intra-op threads, and on
    # shared cores a second thread that waits for a busy core costs milliseconds.
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--warm-cache", action="store_true", help="keep inductor's disk cache")
    parser.add_argument("--out-dir", type=Path, default=HERE, help="where results and README are")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available here")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="gradlab_inductor_") as cold_cache:
        if not args.warm_cache:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cold_cache
        result = measure(
            args.models,
            args.methods,
            args.dtype,
            args.batch,
            args.device,
            args.min_run_time,
            args.repeats,
        )
    env = timing.environment()
    env["device"] = args.device
    env["gpu"] = torch.cuda.get_device_name() if args.device == "cuda" else None
    env["inductor_cache"] = "kept (warm)" if args.warm_cache else "empty at start (cold)"
    result = {"env": env, **result}
    markdown = to_markdown(result)
    print(markdown)
    stem = "results" if args.device == "cpu" else f"results_{args.device}"
    write_results(args.out_dir, stem, result, markdown)
    return result


if __name__ == "__main__":
    main()
