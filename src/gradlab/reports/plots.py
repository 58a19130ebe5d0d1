"""The report's four figures (loss, gradient error, gradient time, peak memory) with matplotlib:
a panel per model that has data, a colour per gradient method. Used by gradlab.reports.write."""

from __future__ import annotations

import statistics
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

import gradlab.training.metrics as m
from gradlab.reports.runs import Run
from gradlab.reports.table import Report, order_key

MARKERS = "osD^vPX*"
LINESTYLES = ("-", "--", ":", "-.")


def _aligned(runs: list[Run], metric: str, positive: bool = False):
    """Steps, then the median and min/max across runs at each step a run measured `metric`;
    None when no run measured it."""
    by_step: dict[float, list[float]] = {}
    for r in runs:
        for s, v in zip(*r.series(metric)):
            if v > 0 or not positive:
                by_step.setdefault(s, []).append(v)
    steps = sorted(by_step)
    if not steps:
        return None
    return (
        steps,
        [statistics.median(by_step[s]) for s in steps],
        [min(by_step[s]) for s in steps],
        [max(by_step[s]) for s in steps],
    )


class Plotter:
    """The four figures: a panel per model that has data, a colour per gradient method."""

    def __init__(self, report: Report):
        self.r = report
        grads = sorted({k[1] for k in report.groups}, key=lambda g: order_key(("", g)))
        self.color = {g: f"C{i % 10}" for i, g in enumerate(grads)}
        self.marker = {g: MARKERS[i % len(MARKERS)] for i, g in enumerate(grads)}
        variants = list(dict.fromkeys(tuple(report.variant(k)) for k in report.groups))
        self.style = {v: LINESTYLES[i % len(LINESTYLES)] for i, v in enumerate(variants)}

    def _panels(self, data) -> dict[str, list[tuple[tuple, Any]]]:
        """model -> [(group key, data(key))] for groups with data; models with none are left out."""
        panels: dict[str, list] = {}
        for key in self.r.groups:
            value = data(key)
            if value:
                panels.setdefault(key[0], []).append((key, value))
        return panels

    def _figure(self, title: str, models: list[str], height: float = 4.0):
        fig = Figure(figsize=(0.6 + 5.2 * len(models), height), layout="constrained")
        axes = fig.subplots(1, len(models), squeeze=False)[0]
        for ax, model in zip(axes, models):
            ax.set_title(f"model {model}", fontsize=10)
            ax.grid(True, alpha=0.3)
        fig.suptitle(title)
        return fig, axes

    def lines(self, metric: str, title: str, ylabel: str, log: bool | None) -> Figure | None:
        """Median across runs per step (min-max band over seeds); log y when `log` or wide.
        The y range fits the runs that did not diverge: a diverged curve leaves the top."""
        panels = self._panels(lambda k: _aligned(self.r.groups[k], metric, positive=bool(log)))
        if not panels:
            return None
        if any(len(self.r.groups[k]) > 1 for keys in panels.values() for k, _ in keys):
            title += "\nline: median across runs, band: min to max"
        fig, axes = self._figure(title, list(panels), height=5.0)
        for ax, keys in zip(axes, panels.values()):
            fitted, others = [], []
            for i, (key, (steps, med, lo, hi)) in enumerate(keys):
                diverged = all(r.summary.status == "diverged" for r in self.r.groups[key])
                every = max(1, len(steps) // 8)  # few markers, staggered: equal curves stay visible
                ax.plot(
                    steps,
                    med,
                    color=self.color[key[1]],
                    ls=self.style[tuple(self.r.variant(key))],
                    lw=1.2,
                    marker=self.marker[key[1]],
                    ms=4,
                    markevery=(i * every // len(keys), every),
                    label=self.r.label(key, n=False) + (" (diverged)" if diverged else ""),
                )
                if len(self.r.groups[key]) > 1:
                    ax.fill_between(steps, lo, hi, color=self.color[key[1]], alpha=0.15, lw=0)
                (others if diverged else fitted).extend([min(lo), max(hi)])
            lo, hi = min(fitted or others), max(fitted or others)
            if log or (log is None and lo > 0 and hi > 20 * lo):
                ax.set_yscale("log")
                ax.set_ylim(lo / 2, hi * 2)
            else:
                pad = 0.05 * (hi - lo) or abs(hi) * 0.05 or 1.0
                ax.set_ylim(lo - pad, hi + pad)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("training step")
            ax.set_ylabel(ylabel)
        handles = {}  # one legend for all panels, below them: it never hides a curve
        for ax in axes:
            handles.update({lb: h for h, lb in zip(*ax.get_legend_handles_labels())})
        fig.legend(
            handles.values(),
            handles.keys(),
            loc="outside lower center",
            ncols=min(3, len(handles)),
            fontsize=8,
            title=", ".join(["grad", *self.r.varying]),
            title_fontsize=8,
        )
        return fig

    def boxes(self) -> Figure | None:
        panels = self._panels(
            lambda k: [x for r in self.r.groups[k] for x in r.series(m.GRAD_MS)[1]]
        )
        if not panels:
            return None
        fig, axes = self._figure(
            "Time of one gradient computation (loss + gradients), per step\n"
            "box: quartiles, line: median, whiskers: 5th–95th percentile",
            list(panels),
        )
        for ax, keys in zip(axes, panels.values()):
            # Whiskers at the 5th/95th percentile; the rarer slow steps (the first, warm-up
            # step; OS noise) would squash the boxes, so they are not drawn.
            box = ax.boxplot(
                [d for _, d in keys],
                patch_artist=True,
                widths=0.6,
                whis=(5, 95),
                showfliers=False,
                medianprops={"color": "black"},
            )
            for patch, (key, _) in zip(box["boxes"], keys):
                patch.set(facecolor=self.color[key[1]], alpha=0.6)
            ax.set_xticks(range(1, len(keys) + 1), [self.r.label(k, "\n") for k, _ in keys])
            ax.tick_params(axis="x", labelsize=8)
            medians = [statistics.median(d) for _, d in keys]
            if max(medians) > 20 * min(medians):
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0)
            ax.set_ylabel("time per gradient (ms)")
        return fig

    def bars(self) -> Figure | None:
        unit, factor = self.r.mem_unit
        peaks = {k: row["peak_mem_mb"] for k, row in zip(self.r.groups, self.r.rows)}
        panels = self._panels(lambda k: peaks[k] is not None and [peaks[k] * factor])
        if not panels:
            return None
        fig, axes = self._figure(
            "Peak memory of one gradient computation (median across runs)", list(panels)
        )
        for ax, keys in zip(axes, panels.values()):
            x = range(len(keys))
            colors = [self.color[k[1]] for k, _ in keys]
            bars = ax.bar(x, [v for _, (v,) in keys], color=colors, alpha=0.8)
            ax.bar_label(bars, [f"{v:.3g}" for _, (v,) in keys], fontsize=8, padding=2)
            ax.set_xticks(list(x), [self.r.label(k, "\n") for k, _ in keys], fontsize=8)
            ax.set_ylabel(f"peak memory ({unit})")
            ax.margins(y=0.15)
        return fig

    def figures(self) -> dict[str, Figure | None]:
        return {
            "loss.png": self.lines(m.LOSS, "Training loss per step", "loss", None),
            "val_loss.png": self.lines(m.VAL_LOSS, "Validation loss", "loss", None),
            "val_acc.png": self.lines(m.VAL_ACC, "Validation accuracy", "accuracy", False),
            "grad_rel_err.png": self.lines(
                m.REL_ERR,
                "Relative error of the run's gradient\n"
                "(against its verified float64 re-run, or the float64 differences)",
                "relative error ‖g − g_ref‖ / max(‖g‖, ‖g_ref‖)",
                True,
            ),
            "grad_ms.png": self.boxes(),
            "peak_mem.png": self.bars(),
        }
