"""A W&B workspace for gradlab runs (wandb-workspaces): loss, gradient check, speed and memory
sections, runs grouped by gradient method, optionally filtered to one model. Building and printing
it never touches the network; only save() does."""

from __future__ import annotations

import json
import netrc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gradlab.training.metrics as m

PLACEHOLDER_ENTITY = "<your-entity>"
# Lightning's WandbLogger logs every row with trainer/global_step and makes it the step metric;
# W&B's own _step restarts when a resumed run starts a new W&B run, the training step does not.
X_AXIS = "trainer/global_step"
# The run config is the resolved Hydra config, logged nested: {"grad": {"name": ...}, ...}.
GROUP_KEY = "grad.name"
MODEL_KEY = "model.name"


@dataclass(frozen=True)
class Panel:
    """One chart: a line plot of `metrics` (or of every metric matching `regex`), or a bar chart
    of each group's last value."""

    title: str
    metrics: tuple[str, ...] = ()
    y_title: str = ""
    log_y: bool = False
    regex: str | None = None
    bars: bool = False


SECTIONS: dict[str, list[Panel]] = {
    "Loss": [
        Panel("Training loss", (m.LOSS,), "loss", log_y=True),
        Panel("Validation loss (data with a split)", (m.VAL_LOSS,), "loss", log_y=True),
        Panel("Validation accuracy (class labels)", (m.VAL_ACC,), "accuracy"),
    ],
    "Gradient check": [
        Panel(
            "Relative error of the run's gradient vs the reference",
            (m.REL_ERR,),
            "‖g − g_ref‖ / max(‖g‖, ‖g_ref‖)",
            log_y=True,
        ),
        Panel(
            "Math: the float64 gradient vs finite differences",
            (m.MATH_REL_ERR,),
            "relative error",
            log_y=True,
        ),
        Panel(
            "Precision: the run's error over its dtype's own",
            (m.PRECISION_RATIO,),
            "ratio",
            log_y=True,
        ),
        Panel("Cosine similarity to finite differences", (m.COS_SIM,), "cosine"),
        Panel("ReLU kinks straddled by the check", (m.KINKS,), "perturbations"),
        Panel(
            "Relative error per parameter",
            y_title="relative error",
            log_y=True,
            regex=rf"^{m.REL_ERR_PREFIX}.+$",
        ),
    ],
    "Speed": [
        Panel("Gradient time (loss + gradients)", (m.GRAD_MS,), "ms"),
        Panel("Training step time (incl. check and optimizer)", (m.STEP_MS,), "ms"),
        Panel("Check time", (m.CHECK_MS,), "ms"),
    ],
    "Memory": [
        Panel("Peak memory of one gradient computation", (m.PEAK_MB,), "MiB"),
        Panel("Peak memory, last measurement", (m.PEAK_MB,), "MiB", bars=True),
    ],
}


def _panel(p: Panel):
    import wandb_workspaces.reports.v2 as wr

    if p.bars:
        return wr.BarPlot(
            title=p.title, metrics=list(p.metrics), orientation="v", title_y=p.y_title
        )
    return wr.LinePlot(
        title=p.title,
        x=X_AXIS,
        y=list(p.metrics),
        metric_regex=p.regex,
        log_y=p.log_y or None,
        title_x="training step",
        title_y=p.y_title,
        # Runs grouped by method: a median line with its min-max band, as in the report.
        groupby_aggfunc="median",
        groupby_rangefunc="minmax",
    )


def build_workspace(
    entity: str | None = None,
    project: str = "gradlab",
    name: str | None = None,
    model: str | None = None,
):
    """The workspace object; nothing is sent. Without a model filter, runs are grouped by method
    and then by model, so the two networks' curves are never merged into one line."""
    import wandb_workspaces.workspaces as ws

    group = [ws.Config(GROUP_KEY)] + ([] if model else [ws.Config(MODEL_KEY)])
    # A filter key is sent as written; the W&B app stores nested config keys with ".value"
    # after the top-level key (grouping adds it itself), so write it the app's way.
    top, rest = MODEL_KEY.split(".", 1)
    filters = [ws.Config(f"{top}.value.{rest}") == model] if model else []
    return ws.Workspace(
        entity=entity or PLACEHOLDER_ENTITY,
        project=project,
        name=name or f"gradlab methods{f' ({model})' if model else ''}",
        sections=[
            ws.Section(name=title, panels=[_panel(p) for p in panels], is_open=True)
            for title, panels in SECTIONS.items()
        ],
        settings=ws.WorkspaceSettings(x_axis=X_AXIS),
        runset_settings=ws.RunsetSettings(groupby=group, filters=filters),
    )


def spec(workspace) -> dict[str, Any]:
    """The view exactly as save() would send it (Workspace.save serializes _to_model())."""
    return json.loads(workspace._to_model().model_dump_json(by_alias=True, exclude_none=True))


def describe(workspace) -> str:
    """What the workspace holds, in words."""
    rs = workspace.runset_settings
    lines = [
        f"W&B workspace {workspace.name!r} in {workspace.entity}/{workspace.project}",
        f"  runs grouped by {', '.join(g.name for g in rs.groupby)}"
        + (f"; filter: {rs.filters}" if rs.filters else "; all models"),
    ]
    for section in workspace.sections:
        lines.append(f"  section {section.name}:")
        for p in SECTIONS[section.name]:
            what = p.regex or ", ".join(p.metrics)
            kind = "bars" if p.bars else "line" + (", log y" if p.log_y else "")
            lines.append(f"    - {p.title}: {what} ({kind})")
    return "\n".join(lines)


def has_api_key() -> bool:
    """A W&B API key in WANDB_API_KEY or in the netrc entry for the W&B host (as `wandb login`
    writes it); read locally, never checked against the server."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc
    paths = [os.environ["NETRC"]] if os.environ.get("NETRC") else ["~/.netrc", "~/_netrc"]
    for path in (Path(p).expanduser() for p in paths):
        try:
            entry = netrc.netrc(str(path)).authenticators(host)
        except (OSError, netrc.NetrcParseError):
            continue
        if entry and entry[2]:
            return True
    return False
