"""Beyond the MLPs: the digits CNN's gradient methods, what they train to, and what the check
costs on a module it knows nothing about.

    python experiments/models/study.py [--quick] [--out-dir DIR] [--machine LABEL]
    python experiments/models/study.py --render experiments/models/study.json

Three parts, float32 and one torch thread throughout:

1. gradlab.models.DigitsCNN(8) on a batch of 64 and on the whole training split of
   make_dataset("digits", layout="image"), with autograd, manual (grads.manual_cnn) and
   function (grads.function_cnn), each got through grads.for_model: warm median time per
   gradient (measure.timing.round_robin_medians, the six cases taking turns so that load from
   other processes hits them all alike), the peak bytes one gradient allocates
   (measure.memory.peak_bytes, on a separate untimed call), and its error, the worst tensor's
   ||g - g_ref|| / ||g_ref||, against float64 autograd: the method run in float64 (its math)
   and in float32 (what a run gets).
2. The real command line, `python src/train.py experiment=digits_cnn grad=G logger=csv` for
   G = manual and autograd: what summary.json says (accuracy, loss, steps, gradient time, the
   checks' cost and verdicts) and the command's wall time.
3. The check (gradlab.check.Checker, default CheckSettings, method = baseline = autograd) on
   the same float32 MLP by its two paths: the MLPs' exact differences (the default) and the
   generic torch.func path with plain Richardson differences (checker.generic = True), at
   hidden widths 16, 64, 256 of three_layer_relu (4 -> H -> H -> 1) and two_layer_sigmoid
   (16 -> H -> 4), batch 256, random mse targets: median seconds per directional and per full
   check (budget_s=None: every coordinate; the generic full check only up to
   GENERIC_FULL_MAX parameters), the calls of both paths taking turns after one warm-up call
   each, in units of one autograd gradient; and each verdict's math.rel_err and math.tol (the
   generic path's tolerance is set by its own differences' accuracy floor). Then the generic
   check's cost on the DigitsCNN itself (batch 64), the only path a CNN has.

Writes study.json and study.md into --out-dir (default: this folder; with --quick, nothing
unless --out-dir is given) and rewrites the README's study section where that folder has one.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gradlab.check import GLOBAL_MARGIN, MATH_TOL, Checker, CheckSettings
from gradlab.data import make_dataset
from gradlab.grads import METHODS, for_model
from gradlab.measure.memory import peak_bytes
from gradlab.measure.timing import environment, make_batch, median_us, round_robin_medians
from gradlab.models import DigitsCNN, build_model
from gradlab.studies.results import rewrite_section
from gradlab.training.record import json_safe

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CNN_METHODS = ("autograd", "manual", "function")
CNN_CHANNELS, CNN_BATCH = 8, 64
# (d_in, d_out) of each MLP of part 3: three_layer_relu as in article 004, two_layer_sigmoid
# with a wider input and output
MLP_SHAPES = {"three_layer_relu": (4, 1), "two_layer_sigmoid": (16, 4)}
MLP_BATCH = 256
GENERIC_FULL_MAX = 2000  # the generic full check is timed only up to this many parameters
SUMMARY_KEYS = (
    "val_acc_final",
    "val_loss_final",
    "elapsed_s",
    "steps",
    "grad_ms_median",
    "check_time_ratio",
    "grad_check",
    "grad_precision",
    "step_ms_median",
    "grad_checks",
    "check_ms_total",
)


# ---------------------------------------------------------------- part 1: the CNN's methods


def worst_rel_err(grads: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """max over tensors of ||g - g_ref|| / ||g_ref||, in float64."""
    errs = []
    for name, r in ref.items():
        g = grads[name].detach().to(torch.float64)
        errs.append(float(torch.linalg.vector_norm(g - r) / torch.linalg.vector_norm(r)))
    return max(errs)


def cnn_methods(rounds: int, min_run_time: float) -> dict:
    """Time, peak memory and error of each CNN method on a batch of 64 and on the whole split."""
    model = DigitsCNN(CNN_CHANNELS)
    model64 = copy.deepcopy(model).to(torch.float64)
    data = make_dataset("digits", layout="image")
    batches = {CNN_BATCH: (data.x[:CNN_BATCH], data.y[:CNN_BATCH]), len(data.x): (data.x, data.y)}
    fns = {name: for_model(name, model) for name in CNN_METHODS}
    assert fns["autograd"] is METHODS["autograd"]
    cases = {
        (name, batch): (lambda f=fn, x=x, y=y: f(model, x, y))
        for batch, (x, y) in batches.items()
        for name, fn in fns.items()
    }
    us = round_robin_medians(cases, rounds=rounds, min_run_time=min_run_time)
    rows = []
    for batch, (x, y) in batches.items():
        x64 = x.to(torch.float64)
        _, ref = METHODS["autograd"](model64, x64, y)
        ref = {n: g.detach() for n, g in ref.items()}
        for name, fn in fns.items():
            _, peak = peak_bytes(lambda f=fn, x=x, y=y: f(model, x, y), torch.device("cpu"))
            _, g64 = fn(model64, x64, y)
            _, g32 = fn(model, x, y)
            rows.append(
                {
                    "batch": batch,
                    "method": name,
                    "grad_us": us[name, batch],
                    "peak_bytes": peak,
                    "rel_err_float64": worst_rel_err(g64, ref),
                    "rel_err_float32": worst_rel_err(g32, ref),
                }
            )
    for r in rows:
        base = next(b for b in rows if b["batch"] == r["batch"] and b["method"] == "autograd")
        r["time_ratio"] = r["grad_us"] / base["grad_us"]
        r["memory_ratio"] = r["peak_bytes"] / base["peak_bytes"]
    return {
        "model": f"DigitsCNN({CNN_CHANNELS})",
        "params": sum(p.numel() for p in model.parameters()),
        "rounds": rounds,
        "min_run_time": min_run_time,
        "rows": rows,
    }


# ---------------------------------------------------------------- part 2: the command line


def train_run(grad: str, extra: list[str]) -> dict:
    """`python src/train.py experiment=digits_cnn grad=GRAD logger=csv`: wall s and summary."""
    args = ["experiment=digits_cnn", f"grad={grad}", "logger=csv", *extra]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        env = {**os.environ, "CI": "true", "WANDB_MODE": "disabled"}
        cmd = [sys.executable, "src/train.py", *args, f"hydra.run.dir={run_dir}"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.strip()[-600:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "grad": grad,
        "command": "python src/train.py " + " ".join(args),
        "wall_s": wall,
        **{k: summary.get(k) for k in SUMMARY_KEYS},
    }


# ---------------------------------------------------------------- part 3: the check's two paths


def call_medians(
    cases: dict[str, Callable[[], object]], min_calls: int, max_calls: int, min_s: float
) -> tuple[dict[str, float], dict[str, list], dict[str, int]]:
    """Median seconds per call of each case after one warm-up call each, the cases taking turns
    (one call each per round); a case stops after min_calls once it has run min_s in all, or at
    max_calls. Also each case's results (warm-up first) and its number of timed calls."""
    results = {key: [fn()] for key, fn in cases.items()}
    times: dict[str, list[float]] = {key: [] for key in cases}

    def more(key: str) -> bool:
        n = len(times[key])
        return n < min_calls or (n < max_calls and sum(times[key]) < min_s)

    while any(more(key) for key in cases):
        for key, fn in cases.items():
            if more(key):
                t0 = time.perf_counter()
                results[key].append(fn())
                times[key].append(time.perf_counter() - t0)
    medians = {key: statistics.median(t) for key, t in times.items()}
    return medians, results, {key: len(t) for key, t in times.items()}


def verdict_figures(verdicts: list) -> dict:
    """The math verdicts of a case's calls (warm-up included): worst rel_err, strictest tol,
    all passed, kinks; and how many of the timed calls (all but the first) judged tensor by
    tensor (a directional check escalates when its global error is not far enough below tol)."""
    return {
        "per_tensor_calls": sum(bool(v.math.rel_err_per_param) for v in verdicts[1:]),
        "rel_err_max": max(v.math.rel_err for v in verdicts),
        "tol_min": min(v.math.tol for v in verdicts),
        "tol_max": max(v.math.tol for v in verdicts),
        "passed_all": all(v.passed for v in verdicts),
        "kinks_max": max(v.math.kinks for v in verdicts),
        "excluded_max": max(v.math.excluded for v in verdicts),
        "coverage_min": min(v.math.coverage for v in verdicts),
        "basis": verdicts[0].basis,
    }


def check_case(model, x, y, grad_s_run: float, calls: tuple[int, int, float], paths) -> dict:
    """The checks of one model by each path ("mlp": exact differences, "generic": torch.func),
    both modes; the full mode of the generic path only up to GENERIC_FULL_MAX parameters."""
    grad_fn = METHODS["autograd"]
    params = sum(p.numel() for p in model.parameters())
    grad_s = median_us(lambda: grad_fn(model, x, y), grad_s_run) / 1e6
    _, grads = grad_fn(model, x, y)
    cases = {}
    for path in paths:
        checker = Checker(model, grad_fn, grad_fn, CheckSettings())
        checker.generic = path == "generic"
        checker.reseed(0)
        cases[path, "directional"] = lambda c=checker: c("directional", x, y, grads)
        if path == "mlp" or params <= GENERIC_FULL_MAX:
            cases[path, "full"] = lambda c=checker: c("full", x, y, grads, budget_s=None)
    medians, results, n_calls = call_medians(cases, *calls)
    checks = {}
    for path in paths:
        for mode in ("directional", "full"):
            key = (path, mode)
            if key not in cases:
                checks[f"{path} {mode}"] = {
                    "skipped": f"{params} parameters > {GENERIC_FULL_MAX}",
                }
                continue
            checks[f"{path} {mode}"] = {
                "seconds": medians[key],
                "in_gradients": medians[key] / grad_s,
                "calls": n_calls[key],
                **verdict_figures(results[key]),
            }
    return {"params": params, "grad_s": grad_s, "checks": checks}


def checker_paths(widths: list[int], calls: tuple[int, int, float], grad_s_run: float) -> dict:
    rows = []
    for name, (d_in, d_out) in MLP_SHAPES.items():
        for hidden in widths:
            model = build_model(name, d_in=d_in, hidden=hidden, d_out=d_out)
            x, y = make_batch(model, torch.float32, MLP_BATCH)
            case = check_case(model, x, y, grad_s_run, calls, ("mlp", "generic"))
            rows.append({"model": name, "sizes": model.sizes, "hidden": hidden, **case})
            print(name, hidden, json.dumps(json_safe(case)), file=sys.stderr, flush=True)
    cnn = DigitsCNN(CNN_CHANNELS)
    data = make_dataset("digits", layout="image")
    x, y = data.x[:CNN_BATCH], data.y[:CNN_BATCH]
    case = check_case(cnn, x, y, grad_s_run, calls, ("generic",))
    rows.append({"model": f"DigitsCNN({CNN_CHANNELS})", "sizes": None, "hidden": None, **case})
    print("cnn", json.dumps(json_safe(case)), file=sys.stderr, flush=True)
    return {
        "batch": MLP_BATCH,
        "cnn_batch": CNN_BATCH,
        "generic_full_max": GENERIC_FULL_MAX,
        "math_tol": MATH_TOL,
        "settings": vars(CheckSettings()),
        "calls": {"min": calls[0], "max": calls[1], "min_s": calls[2]},
        "rows": rows,
    }


# ---------------------------------------------------------------- rendering


def _ratio_range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2g}x" if f"{lo:.2g}" == f"{hi:.2g}" else f"{lo:.2g}x to {hi:.2g}x"


def _mb(n: int) -> str:
    return f"{n / 1e6:.3g}"


def render_methods(p: dict) -> str:
    lines = [
        f"### 1. The CNN's gradient methods ({p['model']}, {p['params']} parameters)",
        "",
        "| batch | method | ms per gradient | / autograd | peak MB per gradient | / autograd "
        "| error, float64 run | error, float32 run |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in p["rows"]:
        e64 = "0 (reference)" if r["method"] == "autograd" else f"{r['rel_err_float64']:.1e}"
        lines.append(
            f"| {r['batch']} | {r['method']} | {r['grad_us'] / 1e3:.3g} | {r['time_ratio']:.2f} "
            f"| {_mb(r['peak_bytes'])} | {r['memory_ratio']:.2f} | {e64} "
            f"| {r['rel_err_float32']:.1e} |"
        )
    by = {(r["method"], r["batch"]): r for r in p["rows"]}
    small, whole = sorted({r["batch"] for r in p["rows"]})
    others = [r for r in p["rows"] if r["method"] != "autograd"]

    def speed(method: str, batch: int) -> str:
        ratio = by[method, batch]["time_ratio"]
        word = "faster" if ratio < 1 else "slower"
        factor = 1 / ratio if ratio < 1 else ratio
        return f"{method} {factor:.2g}x {word}"

    text = (
        f"**What it shows.** Against autograd, at batch {small}: {speed('manual', small)}, "
        f"{speed('function', small)}; on the whole split ({whole}): {speed('manual', whole)}, "
        f"{speed('function', whole)}. Peak memory per gradient relative to autograd: manual "
        f"{by['manual', small]['memory_ratio']:.2f} / {by['manual', whole]['memory_ratio']:.2f}, "
        f"function {by['function', small]['memory_ratio']:.2f} / "
        f"{by['function', whole]['memory_ratio']:.2f} (batch {small} / {whole}). In float64 "
        f"both hand-written methods are within "
        f"{max(r['rel_err_float64'] for r in others):.1e} of autograd; in float32 every "
        "method, autograd included, is "
        f"{min(r['rel_err_float32'] for r in p['rows']):.1e} to "
        f"{max(r['rel_err_float32'] for r in p['rows']):.1e} off the float64 gradient."
    )
    foot = (
        "Time: warm median of round_robin_medians (the six cases taking turns, "
        f"{p['rounds']} rounds of {p['min_run_time']:g} s blocks each). Memory: tensor storage "
        "one gradient call allocates at its peak (gradlab.measure.memory), 1 MB = 10^6 bytes. "
        "Error: max over tensors of ||g - g_ref|| / ||g_ref||, g_ref = autograd on the float64 "
        "copy of the model and batch; 'float64 run': the method on that copy, 'float32 run': "
        "on the float32 model."
    )
    return "\n".join([*lines, "", foot, "", text])


def _share(r: dict) -> str:
    """The checks' seconds and the gradients' (steps x median), against the run's elapsed_s."""
    if not r.get("check_ms_total") or not r.get("grad_ms_median"):
        return "-"
    checks, grads = r["check_ms_total"] / 1e3, r["steps"] * r["grad_ms_median"] / 1e3
    return (
        f"{r['grad_checks']} checks took {checks:.1f} s and the gradients about {grads:.1f} s "
        f"of {r['elapsed_s']:.1f} s"
    )


def render_training(runs: list[dict]) -> str:
    lines = [
        "### 2. What the command line trains to",
        "",
        "| grad | val acc | val loss | steps | elapsed s (summary) | wall s (command) | "
        "grad ms (median) | check time / grad time | grad check | grad precision |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    for r in runs:
        lines.append(
            f"| {r['grad']} | {num(r['val_acc_final'], '.4f')} | "
            f"{num(r['val_loss_final'], '.4f')} | {r['steps']} | {num(r['elapsed_s'], '.1f')} | "
            f"{r['wall_s']:.1f} | {num(r['grad_ms_median'], '.3g')} | "
            f"{num(r['check_time_ratio'], '.2f')} | {r['grad_check']} | {r['grad_precision']} |"
        )
    by = {r["grad"]: r for r in runs}
    text = ""
    if {"manual", "autograd"} <= set(by):
        m, a = by["manual"], by["autograd"]
        accs = [r["val_acc_final"] for r in (m, a)]
        if None in accs:
            acc_text = "- (not logged)"
        elif f"{accs[0]:.4f}" == f"{accs[1]:.4f}":
            acc_text = f"{accs[0]:.1%}, the same to four digits,"
        else:
            acc_text = f"{accs[0]:.1%} (manual) and {accs[1]:.1%} (autograd)"
        grad_ratio = (
            f"; its median gradient took {m['grad_ms_median'] / a['grad_ms_median']:.2f}x "
            "autograd's"
            if m["grad_ms_median"] and a["grad_ms_median"]
            else ""
        )
        verdicts = {r["grad_check"] for r in runs}
        text = (
            f"**What it shows.** Both runs reach a validation accuracy of {acc_text} in "
            f"{m['steps']} steps. The manual run's command took {m['wall_s']:.1f} s against "
            f"{a['wall_s']:.1f} s ({m['wall_s'] / a['wall_s']:.2f}x){grad_ratio}. The run "
            f"itself (summary.json's elapsed_s) is {m['elapsed_s'] / m['wall_s']:.0%} (manual) "
            f"and {a['elapsed_s'] / a['wall_s']:.0%} (autograd) of the command's wall time, the "
            "rest is outside it (interpreter, imports, config, exit). Within the run: "
            f"{_share(m)} (manual); {_share(a)} (autograd). Grad check verdicts: "
            f"{', '.join(sorted(verdicts))}; precision: "
            f"{', '.join(sorted({str(r['grad_precision']) for r in runs}))}."
        )
    foot = (
        f"`{runs[0]['command']} hydra.run.dir=<tmp>` (and grad=autograd), cwd the repository "
        "root, CI=true WANDB_MODE=disabled; the default checks (directional every 20 steps, "
        "full every 200). Wall: the whole command, process start included."
    )
    return "\n".join([*lines, "", foot, "", text])


def _cell(c: dict, mode: str) -> str:
    if "skipped" in c:
        return f"skipped ({c['skipped']})"
    escalated = ""
    if mode == "directional" and c["per_tensor_calls"]:
        escalated = f"; per tensor in {c['per_tensor_calls']}/{c['calls']}"
    return f"{c['seconds'] * 1e3:.3g} ({c['in_gradients']:.3g}{escalated})"


def _err(c: dict) -> str:
    if "skipped" in c:
        return "-"
    tol = (
        f"{c['tol_min']:.1e}"
        if f"{c['tol_min']:.1e}" == f"{c['tol_max']:.1e}"
        else f"{c['tol_min']:.1e}..{c['tol_max']:.1e}"
    )
    return f"{c['rel_err_max']:.1e} ({tol}){'' if c['passed_all'] else ', FAIL'}"


def render_paths(p: dict) -> str:
    lines = [
        "### 3. The check's two paths: MLP exact differences vs generic torch.func",
        "",
        "| model | sizes | params | gradient ms | check | MLP path ms (gradients) | generic ms "
        "(gradients) | generic / MLP | MLP rel_err (tol) | generic rel_err (tol) |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    faster: dict[str, list[tuple[str, float]]] = {"directional": [], "full": []}
    for r in p["rows"]:
        sizes = "-".join(map(str, r["sizes"])) if r["sizes"] else f"batch {p['cnn_batch']}"
        for mode in ("directional", "full"):
            mlp = r["checks"].get(f"mlp {mode}")
            gen = r["checks"][f"generic {mode}"]
            ratio = "-"
            if mlp and "skipped" not in gen:
                ratio = f"{gen['seconds'] / mlp['seconds']:.2f}"
                faster[mode].append((f"{r['model']} {sizes}", gen["seconds"] / mlp["seconds"]))
            mlp_cell = _cell(mlp, mode) if mlp else "- (no MLP path)"
            lines.append(
                f"| {r['model']} | {sizes} | {r['params']} | {r['grad_s'] * 1e3:.3g} | {mode} | "
                f"{mlp_cell} | {_cell(gen, mode)} | {ratio} | "
                f"{_err(mlp) if mlp else '-'} | {_err(gen)} |"
            )
    mlp_rows = [r for r in p["rows"] if "mlp directional" in r["checks"]]
    cnn = next(r for r in p["rows"] if "mlp directional" not in r["checks"])

    def verdict(mode: str) -> str:
        pairs = faster[mode]
        slow = [name for name, q in pairs if q > 1]
        quick = [f"{name} ({q:.2f}x)" for name, q in pairs if q <= 1]
        span = _ratio_range([q for _, q in pairs])
        parts = [f"the generic path takes {span} the MLP path's time"]
        if quick:
            parts.append(f"it is the faster one only for {', '.join(quick)}")
        elif slow:
            parts.append("the MLP path is faster at every size measured")
        return "; ".join(parts)

    modes = ("directional", "full")
    generic = [r["checks"][f"generic {m}"] for r in mlp_rows for m in modes]
    generic = [c for c in generic if "skipped" not in c]
    gen_tols = [c[key] for c in generic for key in ("tol_min", "tol_max")]
    gen_errs = [c["rel_err_max"] for c in generic]
    mlp_errs = [r["checks"][f"mlp {m}"]["rel_err_max"] for r in mlp_rows for m in modes]
    skipped = [
        f"{r['model']} H={r['hidden']} ({r['params']})"
        for r in mlp_rows
        if "skipped" in r["checks"]["generic full"]
    ]
    all_passed = all(c.get("passed_all", True) for r in p["rows"] for c in r["checks"].values())
    cd, cf = cnn["checks"]["generic directional"], cnn["checks"]["generic full"]
    cnn_full = (
        f"a full one {cf['seconds']:.3g} s ({cf['in_gradients']:.3g} gradients)"
        if "skipped" not in cf
        else "a full one was skipped"
    )
    text = (
        f"**What it shows.** Directional checks: {verdict('directional')}. Full checks (every "
        f"coordinate): {verdict('full')}. The generic full check was not timed above "
        f"{p['generic_full_max']} parameters ({', '.join(skipped) or 'none'}). Accuracy: the "
        f"MLP path's exact differences meet the float64 gradient to "
        f"{max(mlp_errs):.1e} at most, judged at {p['math_tol']:.0e}; the generic path's plain "
        f"differences to {max(gen_errs):.1e}, and its tolerance, set by their own accuracy "
        f"floor, was {min(gen_tols):.1e} to {max(gen_tols):.1e}, "
        f"{min(gen_tols) / p['math_tol']:.3g}x to {max(gen_tols) / p['math_tol']:.3g}x the MLP "
        "path's. "
        f"{'Every check passed. ' if all_passed else 'Some checks FAILED (see the table). '}"
        f"On the {cnn['model']} ({cnn['params']} parameters, batch {p['cnn_batch']}), which has "
        f"only the generic path, a directional check costs {cd['seconds'] * 1e3:.3g} ms "
        f"({cd['in_gradients']:.3g} autograd gradients) and {cnn_full}."
    )
    s = p["settings"]
    foot = (
        f"Float32 models, method = baseline = autograd, default CheckSettings (k={s['k']} "
        f"directions); MLPs on a random batch of {p['batch']} with mse targets. ms: median per "
        f"call after one warm-up call, the cases of a model taking turns ({p['calls']['min']} "
        f"to {p['calls']['max']} timed calls, at least {p['calls']['min_s']:g} s where that "
        "fits); a check includes the float64 re-run of the method and the precision judgement. "
        "(gradients): that time over one autograd gradient's; 'per tensor in a/n': a of the n "
        "timed directional checks judged tensor by tensor (the global stage passes only an "
        f"error below tol / {GLOBAL_MARGIN:g}, else escalates). rel_err (tol): the worst "
        "verdict.math.rel_err over the calls and verdict.math.tol (a range where it varied). "
        "Full checks with budget_s=None: every coordinate."
    )
    return "\n".join([*lines, "", foot, "", text])


def render(result: dict) -> str:
    env = result["env"]
    head = [
        f"Measured {str(env['date'])[:10]} on {env['machine']} ({env['cpu']}), "
        f"{env['threads']} torch thread, torch {env['torch']}, Python {env['python']}; "
        f"1-minute load average {env['loadavg_1min']} at the start"
        + (" (--quick: a smoke run, not the figures)." if result["quick"] else ".")
        + f" The whole study took {result['study_s']:.0f} s.",
    ]
    parts = [
        render_methods(result["cnn_methods"]),
        render_training(result["training"]),
        render_paths(result["checker_paths"]),
    ]
    return "\n\n".join(["\n".join(head), *parts])


def write(out_dir: Path, result: dict, markdown: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "study.json").write_text(json.dumps(json_safe(result), indent=2) + "\n")
    (out_dir / "study.md").write_text(markdown + "\n")
    readme = out_dir / "README.md"
    if readme.exists():
        rewrite_section(readme, markdown, "study")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--out-dir", type=Path, help="default: this folder (--quick: none)")
    parser.add_argument("--machine", help="what the figures were measured on, in words")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--render", type=Path, help="only rewrite the markdown from this JSON")
    args = parser.parse_args(argv)
    out_dir = args.out_dir or (None if args.quick else HERE)
    if args.render:
        result = json.loads(args.render.read_text())
        markdown = render(result)
        print(markdown)
        if not args.no_write:
            write(args.out_dir or args.render.parent, result, markdown)
        return result
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    env = environment()
    env["machine"] = args.machine or f"{env['cores']} CPU cores"
    result: dict = {"env": env, "quick": args.quick}
    if args.quick:
        rounds, run_time, widths, calls, grad_run = 2, 0.02, [16], (1, 3, 0.2), 0.05
        extra = ["trainer.max_steps=40", "trainer.val_every_n_steps=20"]
    else:
        rounds, run_time, widths, calls, grad_run = 20, 0.05, [16, 64, 256], (5, 100, 2.0), 0.5
        extra = []
    result["cnn_methods"] = cnn_methods(rounds, run_time)
    print(json.dumps(result["cnn_methods"]["rows"]), file=sys.stderr, flush=True)
    result["training"] = []
    for grad in ("manual", "autograd"):
        result["training"].append(train_run(grad, extra))
        print(result["training"][-1], file=sys.stderr, flush=True)
    result["checker_paths"] = checker_paths(widths, calls, grad_run)
    result["study_s"] = time.perf_counter() - t0
    markdown = render(result)
    print(markdown)
    if out_dir is not None and not args.no_write:
        write(out_dir, result, markdown)
    return result


if __name__ == "__main__":
    main()
