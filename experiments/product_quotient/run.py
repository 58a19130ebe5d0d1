"""Article 000's product/quotient rules: verdicts, gradient error, time and memory per variant.

    python experiments/product_quotient/run.py                       # CPU, rewrites README table
    python experiments/product_quotient/run.py --device cuda --out experiments/product_quotient/cuda

Writes results.json, results.md and product_quotient.png into --out. Correctness is judged in
float64 by torch.autograd.gradcheck (small tensors) and in float32 against the exact gradient
(gradlab.rules.exact_grads); cost at --size x --size float32, the article's 1000x1000.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils import benchmark

from gradlab import memory, rules
from gradlab.check import check_function

HERE = Path(__file__).resolve().parent
MB = 1e6  # decimal megabytes; one 1000x1000 float32 tensor is 4.0 MB (3.81 MiB)
# article 000's profiler table: forward ms, backward ms, peak MB (1000x1000 random tensors)
PUBLISHED = {
    "product_basic": (1.2, 1.8, 15.6),
    "product_log": (1.3, 2.1, 15.6),
    "product_optimized": (1.1, 1.6, 12.3),
    "quotient_basic": (1.3, 2.0, 15.6),
    "quotient_log": (1.4, 2.3, 15.6),
    "quotient_optimized": (1.2, 1.7, 12.3),
}
CHECK_SHAPE, CHECK_SEEDS = (8,), (0, 1, 2)
F32_TOL = 1e-6  # float32 gradients off the exact one by more than this count as wrong
START, END = "<!-- results:start -->", "<!-- results:end -->"


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
        leaves = (x.clone().requires_grad_(), y.clone().requires_grad_())
        out["gradcheck_edge_default_tol"][point] = torch.autograd.gradcheck(
            fn, leaves, raise_exception=False
        )
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
    fwd = benchmark.Timer("fn(x, y)", globals={"fn": fn, "x": x, "y": y})
    bwd = benchmark.Timer(
        "torch.autograd.grad(z, (x, y), g, retain_graph=True)",
        globals={"torch": torch, "z": z, "x": x, "y": y, "g": g},
    )
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
            q1, med, q3 = statistics.quantiles([t * 1e3 for t in ts], n=4)
            rows[name].update({f"{key}_ms": med, f"{key}_ms_iqr": [q1, q3]})
    return rows


RATIO_KEYS = ("forward_ms", "backward_ms", "peak_MB", "saved_MB", "held_if_inputs_dropped_MB")


def ratios(rows: dict) -> dict:
    """Each published log / optimized variant over its basic one, measured and published (the
    article claims the optimized ones save ~20% memory: a peak ratio of 12.3 / 15.6 = 0.79)."""
    out = {}
    for op in ("product", "quotient"):
        basic = rows[f"{op}_basic"]
        for kind in ("log", "optimized"):
            name = f"{op}_{kind}"
            q = {k: rows[name][k] / basic[k] if basic[k] else math.nan for k in RATIO_KEYS}
            pub = PUBLISHED[name]
            q["published"] = [a / b for a, b in zip(pub, PUBLISHED[f"{op}_basic"])]
            out[name] = q
    return out


def _mark(ok: bool) -> str:
    return "pass" if ok else "**FAIL**"


def _err(e: float) -> str:
    if math.isnan(e):
        return "**nan**"
    text = "inf" if math.isinf(e) else f"{e:.1e}"
    return text if e <= F32_TOL else f"**{text}**"


def _ms(row: dict, key: str) -> str:
    q1, q3 = row[f"{key}_ms_iqr"]
    return f"{row[f'{key}_ms']:.2f} ({q1:.2f}–{q3:.2f})"


def _pub(name: str, i: int) -> str:
    return f"{PUBLISHED[name][i]:.1f}" if name in PUBLISHED else "–"


def markdown(res: dict) -> str:
    rows, meta = res["rows"], res["meta"]
    lines = [
        f"Measured {meta['date']} on {meta['device_name']} (torch threads: {meta['threads']}), "
        f"torch {meta['torch']}, {meta['size']}x{meta['size']} float32; "
        f"`*` = published in article 000.",
        "",
        "**Correctness.** gradcheck: float64 on the CPU, 3 random points of 8 elements with "
        "|x|, |y| in [0.1, 10] and |log|.|| >= 0.2, then each edge point (0: x = 0; 1e-30 / 1e30: "
        "both operands scaled, step scaled, atol 0). check.py: `check_function(mode='full')` at "
        "the same random points, also on the CPU. Beside it, gradcheck with its default eps and "
        "atol at the edge points, to show where those defaults are blind. float32 (on the "
        "measured device): max relative error of the gradient against the exact one (bold: "
        f"above {F32_TOL:g}).",
        "",
        "| variant | gradcheck | check.py | gradcheck 0 / 1e-30 / 1e30 | (defaults) "
        "| f32 err random | f32 err 0 | f32 err 1e-30 | f32 err 1e30 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        edge = " / ".join(_mark(r["gradcheck_edge"][p]) for p in rules.EDGE_POINTS)
        default = " / ".join(
            "pass" if r["gradcheck_edge_default_tol"][p] else "fail" for p in rules.EDGE_POINTS
        )
        errs = " | ".join(_err(r["f32_rel_err_edge"][p]) for p in rules.EDGE_POINTS)
        lines.append(
            f"| {name}{'*' if r['published'] else ''} | {_mark(r['gradcheck_random'])} "
            f"| {_mark(r['check_function_random'])} | {edge} | {default} "
            f"| {_err(r['f32_rel_err_random'])} | {errs} |"
        )
    lines += [
        "",
        "**Cost**: per-call median of warm torch.utils.benchmark runs, pooled over "
        f"{meta['rounds']} rounds that interleave the variants; published "
        "figures in brackets, interquartile range in parentheses. "
        f"Peak: {meta['peak_method']}, above the inputs x, y and g, over forward + backward "
        "with z, grad_x, grad_y kept (3 x 4.0 MB is the floor). Saved: distinct storages the graph "
        "saves for backward (saved_tensors_hooks); new: of those, the ones that are neither an "
        "input nor the output; if inputs dropped: what the graph keeps besides the output when "
        "x and y are intermediates the caller frees.",
        "",
        "| variant | forward ms [pub] | backward ms [pub] | peak MB [pub] | saved MB "
        "| saved new MB | held if inputs dropped MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name}{'*' if r['published'] else ''} | {_ms(r, 'forward')} [{_pub(name, 0)}] "
            f"| {_ms(r, 'backward')} [{_pub(name, 1)}] | {r['peak_MB']:.1f} [{_pub(name, 2)}] "
            f"| {r['saved_MB']:.1f} | {r['saved_new_MB']:.1f} "
            f"| {r['held_if_inputs_dropped_MB']:.1f} |"
        )
    lines += [
        "",
        "**Ratio to the basic variant** (measured [published]; the article: optimized saves "
        "~20% memory, i.e. a peak ratio of 0.79):",
        "",
        "| variant / basic | forward | backward | peak | saved | held if inputs dropped |",
        "|---|---|---|---|---|---|",
    ]
    for name, q in res["ratios"].items():
        pf, pb, pp = q["published"]
        lines.append(
            f"| {name} | {q['forward_ms']:.2f} [{pf:.2f}] | {q['backward_ms']:.2f} [{pb:.2f}] "
            f"| {q['peak_MB']:.2f} [{pp:.2f}] | {q['saved_MB']:.2f} "
            f"| {q['held_if_inputs_dropped_MB']:.2f} |"
        )
    if any("peak_MB_profiler" in r for r in rows.values()):
        worst = max(abs(r["peak_MB"] - r["peak_MB_profiler"]) for r in rows.values())
        lines += ["", f"Peak by dispatch mode vs CPU profiler: largest difference {worst:.3f} MB."]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    """Time and memory per variant beside the article's figures; failing variants in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names, rows = list(res["rows"]), list(res["rows"].values())
    pub = np.array([PUBLISHED.get(n, (np.nan,) * 3) for n in names])
    idx, w = np.arange(len(names)), 0.2
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(12, 8.5), sharex=True)
    bars_t = [
        ("forward, measured", [r["forward_ms"] for r in rows], "C0", False),
        ("forward, published", pub[:, 0], "C0", True),
        ("backward, measured", [r["backward_ms"] for r in rows], "C1", False),
        ("backward, published", pub[:, 1], "C1", True),
    ]
    bars_m = [
        ("peak fwd+bwd, measured", [r["peak_MB"] for r in rows], "C2", False),
        ("peak, published", pub[:, 2], "C2", True),
        ("saved for backward", [r["saved_MB"] for r in rows], "C4", False),
        ("saved, newly allocated", [r["saved_new_MB"] for r in rows], "C5", False),
    ]
    for ax, bars in ((ax_t, bars_t), (ax_m, bars_m)):
        for k, (label, values, color, hatched) in enumerate(bars):
            style = (
                {"fill": False, "hatch": "//", "edgecolor": color} if hatched else {"color": color}
            )
            ax.bar(idx + (k - 1.5) * w, values, w, label=label, **style)
        n_product = sum(r["op"] == "product" for r in rows)
        ax.axvline(n_product - 0.5, color="grey", lw=0.8, ls=":")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)  # headroom for the legend
        ax.legend(ncol=2, fontsize=9, loc="upper left")
        ax.grid(axis="y", alpha=0.3)
    meta = res["meta"]
    ax_t.set_ylabel("time per call (ms, median)")
    ax_t.set_title(
        f"z = x*y (left) and z = x/y (right), {meta['size']}x{meta['size']} float32, "
        f"{meta['device_name']}; hatched = article 000's figures"
    )
    ax_m.set_ylabel("memory (MB)")
    ax_m.set_xticks(idx, [n + ("*" if r["published"] else "") for n, r in zip(names, rows)])
    for tick, r in zip(ax_m.get_xticklabels(), rows):
        tick.set_rotation(30)
        tick.set_ha("right")
        if not (r["gradcheck_random"] and all(r["gradcheck_edge"].values())):
            tick.set_color("C3")
    ax_m.set_xlabel(
        "variant (* = published in article 000; red = fails float64 gradcheck "
        "at random points or at an edge point)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rewrite_readme(readme: Path, table: str) -> None:
    text = readme.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{readme} lacks the {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{table}{END}{tail}")


def _finite(obj):
    """JSON has no NaN or inf: write those floats as the strings "nan", "inf", "-inf"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _unfinite(obj):
    """Inverse of _finite, for re-reading results.json."""
    if obj in ("nan", "inf", "-inf"):
        return float(obj)
    if isinstance(obj, dict):
        return {k: _unfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unfinite(v) for v in obj]
    return obj


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
        return report(_unfinite(json.loads(args.from_json.read_text())), args.out, args.readme)
    device = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but torch.cuda.is_available() is False")
    peak_method = (
        "torch.cuda.max_memory_allocated"
        if device.type == "cuda"
        else "live tensor storage counted by gradlab.memory.peak_bytes (a TorchDispatchMode; "
        "the CPU profiler's allocation events, profile_memory=True, give the same figure: "
        "peak_MB_profiler in results.json)"
    )
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": str(device),
        "device_name": device_name,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "size": args.size,
        "min_run_time_s": args.min_run_time,
        "rounds": args.rounds,
        "peak_method": peak_method,
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
    }
    rows = measure(device, args.size, args.min_run_time, args.rounds)
    res = {"meta": meta, "rows": rows, "ratios": ratios(rows)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(_finite(res), indent=2) + "\n")
    report(res, args.out, args.readme)


def report(res: dict, out: Path, readme: Path | None) -> None:
    """results.md and the plot into `out`; the README's marked section too when `out` is HERE."""
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(res)
    (out / "results.md").write_text(table)
    plot(res, out / "product_quotient.png")
    readme = readme or (HERE / "README.md" if out.resolve() == HERE else None)
    if readme is not None:
        rewrite_readme(readme, table)
    print(table)


if __name__ == "__main__":
    main()
