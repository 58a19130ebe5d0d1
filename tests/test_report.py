"""scripts/report.py: the table, plots and HTML page from a real sweep, and from hand-made runs
that failed, diverged, crashed or repeat a configuration over seeds."""

from __future__ import annotations

import base64
import csv
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from apphelpers import ROOT, run_cli, summary
from gradlab.reports import table as report_table
from gradlab.reports import write
from gradlab.training.record import write_summary

PNG = b"\x89PNG\r\n\x1a\n"
MODELS = ("two_layer_sigmoid", "three_layer_relu")
GRADS = ("autograd", "manual")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A real 2 x 2 sweep through the CLI, once for this module, and the report on it."""
    tmp = tmp_path_factory.mktemp("report")
    args = [f"grad={','.join(GRADS)}", f"model={','.join(MODELS)}", "trainer.max_steps=30"]
    r = run_cli("-m", *args, "logger=csv", f"hydra.sweep.dir={tmp / 'S'}", cwd=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "report.py"), str(tmp / "S")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| model | grad |" in r.stdout
    return tmp / "S"


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_sweep_table_one_row_per_method_and_model(sweep):
    rows = _csv_rows(sweep / "report.csv")
    assert list(rows[0]) == report_table.COLUMNS
    assert sorted((r["model"], r["grad"]) for r in rows) == sorted(
        (m, g) for m in MODELS for g in GRADS
    )
    jobs = {(s.model, s.grad): s for s in map(summary, sweep.glob("*/"))}
    for row in rows:
        s = jobs[row["model"], row["grad"]]
        assert (row["status"], row["n"], row["steps"], row["grad_check"]) == (
            "completed", "1", "30", "pass"
        )  # fmt: skip
        # A single run: the table repeats its summary.json (all steps' medians, 4 digits).
        for col, key in [
            ("loss_final", "loss_final"),
            ("grad_ms_median", "grad_ms_median"),
            ("step_ms_median", "step_ms_median"),
            ("peak_mem_mb", "peak_mem_mb"),
            ("rel_err_max", "grad_rel_err_max"),
        ]:
            assert float(row[col]) == pytest.approx(getattr(s, key), rel=1e-3), col
        p25, med, p75 = (float(row[c]) for c in ("grad_ms_p25", "grad_ms_median", "grad_ms_p75"))
        assert 0 < p25 <= med <= p75
        assert (
            float(row["rel_err_median"]) <= float(row["rel_err_max"]) < 1e-3
        )  # float32 rounding, well inside the 1e-2 tolerance
    md = (sweep / "report.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(rows)  # header + a row each
    assert "grad ms median (IQR)" in table[0] and "peak mem KiB" in table[0]


@pytest.mark.slow
def test_sweep_plots_are_pngs(sweep):
    pngs = sorted(sweep.glob("*.png"))
    # no validation split in these runs: no validation plots
    assert {p.name for p in pngs} == set(write.PLOTS) - {"val_loss.png", "val_acc.png"}
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == PNG and len(data) > 10_000, p.name
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width > 600 and height > 300, p.name
    assert all(f"]({p.name})" in (sweep / "report.md").read_text() for p in pngs)


@pytest.mark.slow
def test_sweep_html_is_self_contained(sweep):
    page = (sweep / "report.html").read_text()
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == len(write.PLOTS) - 2  # the validation plots: no split here
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    assert 'src="http' not in page and "<link" not in page and "<script" not in page
    embedded = {base64.b64decode(s.split(",", 1)[1]) for s in sources}
    assert embedded == {p.read_bytes() for p in sweep.glob("*.png")}
    assert page.count("<tr>") == 1 + len(MODELS) * len(GRADS)


# Hand-made runs: what the app writes, shaped by hand.


def _run(root: Path, name: str, metrics: list[dict] | None, **fields) -> Path:
    d = root / name
    d.mkdir(parents=True)
    base = {
        "run_name": name, "model": "three_layer_relu", "grad": "manual", "method": "manual",
        "optimizer": "sgd", "lr": 0.01, "device": "cpu", "dtype": "float32", "seed": 0,
        "data": "regression", "status": "completed", "reason": "", "steps": 3,
        "grad_check": "pass", "grad_check_first_fail": None,
    }  # fmt: skip
    write_summary(d / "summary.json", {**base, **fields})
    if metrics is None:
        (d / "metrics.csv").write_text("")
        return d
    cols = ["step", "train/loss", "grad/rel_err", "time/grad_ms", "time/step_ms", "mem/peak_mb"]
    with (d / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows({"step": i, **m} for i, m in enumerate(metrics))
    return d


def _steps(losses, grad_ms, rel_err=1e-7, mem=0.5):
    return [
        {"train/loss": loss, "grad/rel_err": rel_err, "time/grad_ms": ms, "time/step_ms": 2 * ms}
        | ({"mem/peak_mb": mem} if i == 0 else {})
        for i, (loss, ms) in enumerate(zip(losses, grad_ms))
    ]


@pytest.fixture
def handmade(tmp_path) -> Path:
    root = tmp_path / "runs"
    # Two seeds of autograd: aggregated into one row (n=2).
    _run(root, "a0", _steps([3.0, 2.0, 1.0], [1.0, 2.0, 3.0], 1e-7), grad="autograd",
         method="autograd", loss_final=1.0)  # fmt: skip
    _run(root, "a1", _steps([3.0, 2.0, 0.5], [3.0, 4.0, 5.0], 4e-7, mem=0.7), grad="autograd",
         method="autograd", seed=1, loss_final=0.5)  # fmt: skip
    # Failed before its first step: empty metrics.csv, no figures.
    _run(root, "f", None, grad="function", method="function", status="failed",
         reason="RuntimeError: boom", steps=0, grad_check="none", loss_final=None)  # fmt: skip
    # Diverged: NaN loss at the last step (no check that step); summary.json holds "nan".
    # Its summary says grad_check "pass" although a first failure is recorded.
    _run(root, "d", _steps([1.0, 1e30, math.nan], [1.0, 1.0, 1.0]), status="diverged",
         reason="non-finite loss at step 2", loss_final=math.nan,
         grad_check_first_fail={"step": 1, "mode": "directional", "param": "layer1.weight",
                                "rel_err": 0.5, "tol": 1e-3})  # fmt: skip
    # A Hydra job that crashed before writing anything.
    (root / "7-crashed" / ".hydra").mkdir(parents=True)
    return root


@pytest.mark.slow
def test_failed_diverged_and_seeds(handmade, tmp_path):
    written = write.write_report([handmade], tmp_path / "out")
    assert {p.name for p in written} >= {"report.md", "report.csv", "report.html", "loss.png"}
    rows = {(r["grad"], r["status"]): r for r in _csv_rows(tmp_path / "out" / "report.csv")}
    assert set(rows) == {
        ("autograd", "completed"), ("function", "failed"), ("manual", "diverged"),
        ("7-crashed", "failed"),
    }  # fmt: skip

    seeds = rows["autograd", "completed"]
    assert seeds["n"] == "2"
    assert float(seeds["grad_ms_median"]) == 3.0  # median of the runs' medians 2 and 4
    assert (float(seeds["grad_ms_p25"]), float(seeds["grad_ms_p75"])) == (2.25, 3.75)  # all steps
    assert float(seeds["loss_final"]) == 0.75
    assert float(seeds["rel_err_max"]) == 4e-7  # the worst run
    assert float(seeds["peak_mem_mb"]) == 0.6

    failed = rows["function", "failed"]
    assert failed["reason"] == "RuntimeError: boom" and failed["grad_ms_median"] == ""
    diverged = rows["manual", "diverged"]
    assert diverged["loss_final"] == "nan" and diverged["grad_check"] == "fail"
    assert "check failed at step 1 on layer1.weight" in diverged["reason"]
    assert "no summary.json" in rows["7-crashed", "failed"]["reason"]

    md = (tmp_path / "out" / "report.md").read_text()
    assert "5 runs in 4 configurations (2 completed, 1 diverged, 2 failed)" in md
    assert "RuntimeError: boom" in md and "non-finite loss at step 2" in md
    assert "| autograd | 2 | completed |" in md


def test_only_failed_runs_still_report(tmp_path):
    _run(tmp_path, "f", None, status="failed", reason="boom", loss_final=None)
    written = write.write_report([tmp_path])
    assert not [p for p in written if p.suffix == ".png"]  # nothing to plot, no crash
    assert "| failed |" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_cli_without_runs_exits_2(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "report.py"), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "no runs" in r.stderr


@pytest.mark.slow
def test_summary_figures_win_over_sparse_csv(tmp_path):
    # trainer.log_every_n_steps > 1: metrics.csv misses the step whose check was worst and the
    # step memory was measured at; summary.json (fed every step) has them
    _run(tmp_path, "sparse", _steps([3.0, 2.0, 1.0], [1.0, 1.0, 1.0], 1e-7), loss_final=1.0,
         grad_rel_err_max=0.25, peak_mem_mb=0.9, grad_ms_median=1.5)  # fmt: skip
    write.write_report([tmp_path], tmp_path / "out")
    (row,) = _csv_rows(tmp_path / "out" / "report.csv")
    assert float(row["rel_err_max"]) == 0.25
    assert float(row["peak_mem_mb"]) == 0.9 and float(row["grad_ms_median"]) == 1.5
