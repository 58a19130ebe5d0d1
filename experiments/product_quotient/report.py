"""Tables and plot of experiments/product_quotient, from run.py's results (or a saved results.json).

markdown(): the correctness, cost and ratio tables, published figures beside the measured ones;
plot(): time and memory per variant; report(): both into a folder and the README's marked section.
"""

from __future__ import annotations

import math
from pathlib import Path

from gradlab.studies import rules
from gradlab.studies.results import rewrite_section

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
F32_TOL = 1e-6  # float32 gradients off the exact one by more than this count as wrong
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


def from_json_safe(obj):
    """Inverse of json_safe, for re-reading a results.json."""
    if obj in ("nan", "inf", "-inf"):
        return float(obj)
    if isinstance(obj, dict):
        return {k: from_json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_json_safe(v) for v in obj]
    return obj


def report(res: dict, out: Path, readme: Path | None) -> None:
    """results.md and the plot into `out`; the README's marked section too when `out` is HERE."""
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(res)
    (out / "results.md").write_text(table)
    plot(res, out / "product_quotient.png")
    readme = readme or (HERE / "README.md" if out.resolve() == HERE else None)
    if readme is not None:
        rewrite_section(readme, table)
    print(table)
