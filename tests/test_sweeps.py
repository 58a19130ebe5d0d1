"""Multirun through the real CLI: jobs never collide, the callback writes the sweep summary."""

from __future__ import annotations

import csv

import pytest

from apphelpers import run_cli, wandb_history, wandb_records

pytestmark = pytest.mark.slow  # the real CLI: seconds per sweep


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_two_by_two_sweep_writes_summary(tmp_path, launcher):
    sweep = tmp_path / "S"
    extra = [] if launcher == "basic" else ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    proc = run_cli(
        "-m",
        "grad=autograd,manual",
        "model=two_layer_sigmoid,three_layer_relu",
        "trainer.max_steps=30",
        "logger=csv",
        f"hydra.sweep.dir={sweep}",
        *extra,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rows = _rows(sweep)
    assert len(rows) == 4
    assert {(r["model"], r["grad"]) for r in rows} == {
        (m, g) for m in ("two_layer_sigmoid", "three_layer_relu") for g in ("autograd", "manual")
    }
    assert all(r["status"] == "completed" and r["grad_check"] == "pass" for r in rows)
    assert all(float(r["grad_ms_median"]) > 0 and float(r["peak_mem_mb"]) > 0 for r in rows)
    assert len({r["job"] for r in rows}) == 4  # one dir per job, none shared
    md = (sweep / "summary.md").read_text()
    assert "4 jobs: 4 completed" in md and md.count("| completed |") == 4
    assert "4 jobs: 4 completed" in proc.stdout  # the callback prints the table


def test_sweep_jobs_get_separate_wandb_runs_grouped_by_sweep(tmp_path):
    sweep = tmp_path / "sweep-g7"
    proc = run_cli(
        "-m",
        "grad=autograd,manual",
        "trainer.max_steps=5",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    runs = sorted(sweep.glob("*/wandb/offline-run-*"))
    assert len(runs) == 2 and runs[0].name != runs[1].name
    infos = []
    for run in runs:
        records = [
            r
            for r in wandb_records(next(run.glob("*.wandb")))
            if r.WhichOneof("record_type") == "run"
        ]
        infos.append((records[0].run.run_id, records[0].run.run_group, records[0].run.display_name))
    assert infos[0][0] != infos[1][0]
    assert {group for _, group, _ in infos} == {"sweep-g7"}
    assert {name for *_, name in infos} == {
        "three_layer_relu-autograd-sgd-s0",
        "three_layer_relu-manual-sgd-s0",
    }
    assert len(wandb_history(next(runs[0].glob("*.wandb")))) == 5


def test_failed_job_shows_as_failed_and_others_are_summarized(tmp_path):
    sweep = tmp_path / "F"
    proc = run_cli(
        "-m",
        "grad.method=manual,no_such.module.fn",
        "trainer.max_steps=10",
        "logger=csv",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rows = _rows(sweep)
    assert [r["status"] for r in rows] == ["completed", "failed"]
    assert "no_such" in rows[1]["reason"]


def test_parallel_jobs_share_the_default_sweep_dir(tmp_path):
    # the sweep dir's name holds the launching process's pid: every joblib worker must see the
    # same one, not its own
    proc = run_cli(
        "-m",
        "grad=autograd,manual",
        "trainer.max_steps=5",
        "logger=csv",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (sweep,) = (tmp_path / "multirun").glob("*/*")
    assert len(list(sweep.glob("*/summary.json"))) == 2
    assert "2 jobs: 2 completed" in (sweep / "summary.md").read_text()


def test_optuna_search_survives_diverging_trials(tmp_path):
    sweep = tmp_path / "O"
    proc = run_cli(
        "hparams_search=lr_optuna",
        "hydra.sweeper.n_trials=2",
        "optimizer.lr=interval(100000,1000000)",
        "trainer.max_steps=10",
        "logger=csv",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 jobs: 2 diverged" in (sweep / "summary.md").read_text()
    assert "best_value: .inf" in (sweep / "optimization_results.yaml").read_text()


def _rows(sweep):
    with (sweep / "summary.csv").open() as f:
        return list(csv.DictReader(f))
