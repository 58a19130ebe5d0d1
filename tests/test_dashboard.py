"""scripts/dashboard.py: the W&B workspace spec (sections, panels, grouping, model filter), and the
dry-run and not-logged-in paths, which must work offline and never open a connection."""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import subprocess
import sys

import pytest

from apphelpers import ROOT

_script = importlib.util.spec_from_file_location("dashboard_cli", ROOT / "scripts" / "dashboard.py")
cli = importlib.util.module_from_spec(_script)
_script.loader.exec_module(cli)

SECTIONS = {
    "Loss": {"train/loss", "val/loss", "val/acc"},
    "Gradient check": {
        "grad/rel_err",
        "grad/math_rel_err",
        "grad/precision_ratio",
        "grad/cos_sim",
        "grad/kinks",
    },
    "Speed": {"time/grad_ms", "time/step_ms", "time/check_ms"},
    "Memory": {"mem/peak_mb"},
}


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No API key anywhere (env, netrc) and any connection attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access: {args[:2]}")

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def _spec(capsys, *args: str) -> dict:
    assert cli.main(["--dry-run", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _panels(spec: dict) -> dict[str, list[dict]]:
    sections = spec["spec"]["section"]["panelBankConfig"]["sections"]
    return {s["name"]: s["panels"] for s in sections}


@pytest.mark.slow
def test_dry_run_spec_sections_panels_grouping_filter(offline, capsys):
    spec = _spec(capsys, "--model", "three_layer_relu", "--project", "p")
    assert (spec["entity"], spec["project"]) == ("<your-entity>", "p")
    panels = _panels(spec)
    assert list(panels) == list(SECTIONS)
    for name, metrics in SECTIONS.items():
        shown = {m for p in panels[name] for m in p["config"].get("metrics", [])}
        assert shown == metrics, name
    by_metric = {tuple(p["config"]["metrics"]): p["config"] for p in panels["Gradient check"]}
    assert by_metric["grad/rel_err",]["yLogScale"] is True
    (per_param,) = [p["config"] for p in panels["Gradient check"] if p["config"].get("metricRegex")]
    regex = re.compile(per_param["metricRegex"])
    assert regex.match("grad/rel_err/layer1.weight") and not regex.match("grad/rel_err")
    assert per_param["useMetricRegex"] is True and per_param["yLogScale"] is True
    lines = [p for ps in panels.values() for p in ps if p["viewType"] == "Run History Line Plot"]
    assert {p["config"]["xAxis"] for p in lines} == {"trainer/global_step"}

    runset = spec["spec"]["section"]["runSets"][0]
    assert runset["grouping"] == [{"section": "config", "name": "grad.value.name"}]
    (flt,) = runset["filters"]["filters"]
    assert (flt["key"], flt["op"], flt["value"]) == (
        {"section": "config", "name": "model.value.name"},
        "=",
        "three_layer_relu",
    )


def test_spec_loads_back_into_the_library(offline, capsys):
    import wandb_workspaces.workspaces as ws
    from wandb_workspaces.workspaces import internal

    spec = _spec(capsys, "--model", "two_layer_sigmoid", "--entity", "me")
    back = ws.Workspace._from_model(internal.View.model_validate(spec))
    assert [s.name for s in back.sections] == list(SECTIONS)
    assert [g.name for g in back.runset_settings.groupby] == ["grad.name"]
    assert "two_layer_sigmoid" in back.runset_settings.filters
    assert back.entity == "me" and back.name == "gradlab methods (two_layer_sigmoid)"


def test_without_model_runs_are_grouped_by_method_then_model(offline, capsys):
    runset = _spec(capsys)["spec"]["section"]["runSets"][0]
    assert [g["name"] for g in runset["grouping"]] == ["grad.value.name", "model.value.name"]
    assert runset["filters"]["filters"] == []


def test_no_key_prints_plan_and_login_hint(offline, capsys):
    assert cli.main(["--save", "--model", "three_layer_relu"]) == 0
    out = capsys.readouterr().out
    assert "wandb login" in out and "WANDB_API_KEY" in out and "nothing was created" in out
    for name in SECTIONS:
        assert f"section {name}:" in out
    assert "grad.name" in out and "three_layer_relu" in out


def test_netrc_entry_counts_as_logged_in(offline, tmp_path, monkeypatch):
    from gradlab.app.dashboard import has_api_key

    assert not has_api_key()
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert has_api_key()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert not has_api_key()  # the entry is for another host


@pytest.mark.slow
def test_cli_offline_process(tmp_path):
    """The real script in a fresh process: no key, no netrc, W&B offline; exits 0 with the hint."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "WANDB_MODE": "offline"}
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dashboard.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "wandb login" in r.stdout and "section Gradient check:" in r.stdout
