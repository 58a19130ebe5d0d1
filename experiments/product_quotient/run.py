"""Article 000's product/quotient rules: verdicts, gradient error, time and memory per variant.

    python experiments/product_quotient/run.py                       # CPU, rewrites README table
    python experiments/product_quotient/run.py --device cuda --out experiments/product_quotient/cuda

Writes results.json, results.md and product_quotient.png into --out (the tables and the plot are
made by report.py beside this file). Correctness is judged in
float64 by torch.autograd.gradcheck (small tensors) and in float32 against the exact gradient
(gradlab.studies.rules.exact_grads); cost at --size x --size float32, the article's 1000x1000.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from gradlab.check import check_function
from gradlab.measure import memory, timing
from gradlab.studies import rules
from gradlab.training.record import json_safe
from report import MB, PUBLISHED, from_json_safe, ratios, report

HERE = Path(__file__).resolve().parent
CHECK_SHAPE, CHECK_SEEDS = (8,), (0, 1, 2)


def verdicts(fn) -> dict:
    """float64 gradcheck (random points, each edge point), check.py, float32 edge exactness."""
    random_pts = [
        rules.random_operands(CHECK_SHAPE, torch.Generator().manual_seed(s)) for s in CHECK_SEEDS
    ]
    out = {
        "gradcheck_random": all(rules.gradcheck_passes(fn, x, y) for x, y in random_pts),
        "check_function_random": all(
            check_function(fn, [x, y], mode="full").passed for x, y in random_pts
        ),
        "gradcheck_edge": {},
        "gradcheck_edge_default_tol": {},
    }
    for point in rules.EDGE_POINTS:
        x, y = rules.edge_operands(
            point, CHECK_SHAPE, torch.Generator().manual_seed(0), torch.float64
        )
        out["gradcheck_edge"][point] = rules.gradcheck_passes(fn, x, y, point)
        out["gradcheck_edge_default_tol"][point] = rules.gradcheck_passes(fn, x, y)  # defaults
    return out


def grad_error(fn, op: str, x, y, g) -> float:
    """Max elementwise relative error of fn's (grad_x, grad_y) against the exact gradient."""
    x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
    grads = torch.autograd.grad(fn(x, y), (x, y), g)
    exact = rules.exact_grads(op, x, y, g)
    errs = [rules.max_rel_error(a.cpu(), b.cpu()) for a, b in zip(grads, exact)]
    return math.nan if any(math.isnan(e) for e in errs) else max(errs)


def saved_bytes(fn, x, y) -> dict:
    """Bytes of the distinct storages the graph saves for backward (saved_tensors_hooks), split
    into those that alias an input or the output and those the forward allocated anew."""
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        z = fn(x, y)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in packed}
    inputs = {t.untyped_storage().data_ptr() for t in (x, y)}
    out_ptr = z.untyped_storage().data_ptr()
    new = sum(n for p, n in storages.items() if p not in inputs and p != out_ptr)
    kept_if_inputs_dropped = sum(n for p, n in storages.items() if p != out_ptr)
    return {
        "saved_MB": sum(storages.values()) / MB,
        "saved_new_MB": new / MB,
        # what the forward leaves alive besides its output when the caller frees x and y
        "held_if_inputs_dropped_MB": kept_if_inputs_dropped / MB,
    }


def profiler_peak_bytes(step) -> int:
    """Peak bytes allocated on the CPU during step(), from the profiler's allocation events
    (profile_memory=True): the peak of their running total_allocated above its value before the
    first one. Only blocks allocated while profiling are tracked, so a free of an older block is
    not subtracted: the figure is the peak of what step() itself allocated."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = step()
    del result
    events = []  # (time, bytes allocated (< 0: freed), allocator total after it)

    def walk(node):
        if node.tag == torch._C._profiler._EventType.Allocation:
            f = node.extra_fields
            events.append((node.start_time_ns, f.alloc_size, f.total_allocated))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    if not events:
        return 0
    events.sort()
    base = events[0][2] - events[0][1]  # the total carries over from earlier profiling sessions
    return max(0, max(total for _, _, total in events) - base)


def timings(fn, x, y, g, min_run_time: float) -> tuple[list[float], list[float]]:
    """Per-call seconds of warm forward and backward runs (torch.utils.benchmark blocks)."""
    x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
    z = fn(x, y)
    fwd = timing.timer(lambda: fn(x, y))  # at the current thread count (--threads)
    bwd = timing.timer(lambda: torch.autograd.grad(z, (x, y), g, retain_graph=True))
    return tuple(t.blocked_autorange(min_run_time=min_run_time).times for t in (fwd, bwd))


def memory_figures(fn, x, y, g) -> dict:
    """Peak of forward + backward and what the graph saves, at x's size."""
    x, y = x.detach().requires_grad_(), y.detach().requires_grad_()

    def step():  # caller holds x, y, g; the step keeps z, grad_x, grad_y alive to its end
        z = fn(x, y)
        return z, *torch.autograd.grad(z, (x, y), g)

    step()  # warm
    _, peak = memory.peak_bytes(step, x.device)  # CUDA: max_memory_allocated; CPU: live storages
    out = {"peak_MB": peak / MB}
    if x.device.type == "cpu":  # a second, independent count: the allocator's own events
        out["peak_MB_profiler"] = profiler_peak_bytes(step) / MB
    return {**out, **saved_bytes(fn, x, y)}


def measure(device: torch.device, size: int, min_run_time: float, rounds: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    x, y = (t.to(device) for t in rules.random_operands((size, size), gen, torch.float32))
    g = torch.randn(size, size, generator=gen).to(device)
    edges = {
        p: tuple(t.to(device) for t in rules.edge_operands(p, (size, size), gen, torch.float32))
        for p in rules.EDGE_POINTS
    }
    rows = {}
    for name, (fn, published, op) in rules.VARIANTS.items():
        print(f"  checking {name}", file=sys.stderr, flush=True)
        rows[name] = {
            "op": op,
            "published": published,
            **verdicts(fn),
            "f32_rel_err_random": grad_error(fn, op, x, y, g),
            "f32_rel_err_edge": {p: grad_error(fn, op, *edges[p], g) for p in rules.EDGE_POINTS},
            **memory_figures(fn, x, y, g),
            "published_ms_ms_MB": PUBLISHED.get(name),
        }
    # timing rounds interleave the variants, so a burst of load elsewhere hits them all alike
    times = {name: ([], []) for name in rules.VARIANTS}
    for r in range(rounds):
        print(f"  timing round {r + 1}/{rounds}", file=sys.stderr, flush=True)
        for name, (fn, _, _) in rules.VARIANTS.items():
            for acc, new in zip(times[name], timings(fn, x, y, g, min_run_time)):
                acc.extend(new)
    for name, (fwd, bwd) in times.items():
        for key, ts in (("forward", fwd), ("backward", bwd)):
            ms = [t * 1e3 for t in ts]
            q1, med, q3 = statistics.quantiles(ms, n=4) if len(ms) > 1 else ms * 3
            rows[name].update({f"{key}_ms": med, f"{key}_ms_iqr": [q1, q3]})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", type=Path, default=HERE, help="folder for results.* and the plot")
    p.add_argument("--size", type=int, default=1000, help="side of the square benchmark tensors")
    p.add_argument("--min-run-time", type=float, default=0.2, help="seconds per timing block")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds over all variants")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (1: steadier on a shared CPU; 0: torch's default)",
    )
    p.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="README whose marked section gets the table (default: this folder's, "
        "when --out is this folder)",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="measure nothing: rewrite results.md, the plot (and README) from this results.json",
    )
    args = p.parse_args(argv)
    if args.from_json is not None:
        return report(from_json_safe(json.loads(args.from_json.read_text())), args.out, args.readme)
    device = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but torch.cuda.is_available() is False")
    peak_method = (
        "torch.cuda.max_memory_allocated"
        if device.type == "cuda"
        else "live tensor storage counted by gradlab.measure.memory.peak_bytes "
        "(a TorchDispatchMode; "
        "the CPU profiler's allocation events, profile_memory=True, give the same figure: "
        "peak_MB_profiler in results.json)"
    )
    env = timing.environment()
    cpu = f"{env['cpu']}, {env['cores']} cores"
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": str(device),
        "device_name": device_name,
        "threads": env["threads"],
        "torch": env["torch"],
        "python": env["python"],
        "size": args.size,
        "min_run_time_s": args.min_run_time,
        "rounds": args.rounds,
        "peak_method": peak_method,
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
    }
    rows = measure(device, args.size, args.min_run_time, args.rounds)
    res = {"meta": meta, "rows": rows, "ratios": ratios(rows)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(json_safe(res), indent=2) + "\n")
    report(res, args.out, args.readme)


if __name__ == "__main__":
    main()
