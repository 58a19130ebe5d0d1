"""Reliability: bad input, divergence, broken methods, failed checks, signals, W&B outages and
reused dirs each end with a clear message, and nothing already written is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from apphelpers import TRAIN, compose_cfg, fast_first, run_cli, summary
from gradlab.app.run import train
from gradlab.training.record import read_metrics

TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,key",
    [
        (["grad=nope"], "grad=nope"),
        (["optimizer.lr=-1"], "optimizer.lr"),
        (["model.hidden=abc"], "model.hidden"),
        (["logger=[wandb,nope]"], "logger=nope"),
    ],
)
def test_bad_config_is_one_line_before_training(tmp_path, args, key):
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and key in lines[0], proc.stderr
    assert (
        "allowed" in lines[0] or "must" in lines[0] or "Float" in lines[0] or "Integer" in lines[0]
    )
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_requested_without_cuda(tmp_path):
    proc = run_cli("device=cuda", "logger=csv", f"hydra.run.dir={tmp_path / 'R'}", cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "error: run failed: device=cuda requested but CUDA is not available on this machine"
    ]
    s = summary(tmp_path / "R")
    assert s.status == "failed" and "CUDA is not available" in s.reason


def test_out_of_memory_is_a_failed_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    result = train(compose_cfg("logger=csv", "grad.method=faultmethods.out_of_memory"), tmp_path)
    assert result.status == "failed" and result.reason.startswith("out of memory")
    assert summary(tmp_path).status == "failed"


def test_rows_logged_before_a_failure_are_all_written(tmp_path, monkeypatch):
    # rows reach metrics.csv every 10 steps: those of steps 11 and 12 are written on the way out
    monkeypatch.syspath_prepend(str(TESTS))
    import faultmethods

    monkeypatch.setattr(faultmethods, "calls", 0)
    cfg = compose_cfg(
        "logger=csv", "grad.method=faultmethods.raises_at_step_13", "trainer.mem_every=0"
    )
    result = train(cfg, tmp_path)
    assert result.status == "failed" and "boom at step 13" in result.reason
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.csv")] == list(range(13))


@pytest.mark.slow
def test_divergence_stops_at_first_nonfinite_step(tmp_path):
    proc = run_cli(
        "optimizer.lr=1e6",
        "logger=csv",
        "trainer.max_steps=200",
        f"hydra.run.dir={tmp_path / 'D'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    s = summary(tmp_path / "D")
    assert s.status == "diverged" and "non-finite" in s.reason
    rows = read_metrics(tmp_path / "D" / "metrics.csv")
    assert 1 < len(rows) < 200 and rows[-1]["step"] == len(rows) - 1
    assert all(torch.isfinite(torch.tensor(r["train/loss"])) for r in rows[:-1])
    assert f"at step {len(rows) - 1}" in s.reason


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("layout", ["dense", "expanded"])  # expanded: the fused check refuses it
def test_nonfinite_gradient_with_a_finite_loss_stops_before_the_update(bad, layout):
    from gradlab.grads import METHODS
    from gradlab.models import build_model
    from gradlab.training.state import RunState
    from gradlab.training.step import StepRunner

    def broken_at_step_3(model, x, y):
        calls.append(None)  # one call per step: no checks, no memory probe
        loss, grads = METHODS["autograd"](model, x, y)
        if len(calls) == 4:  # step 3
            if layout == "dense":
                grads["layer2.bias"] = grads["layer2.bias"].clone()
                grads["layer2.bias"][5] = bad
            else:
                grads["layer2.bias"] = torch.full((1,), bad).expand(16)
        elif layout == "expanded":  # a finite expanded gradient passes and is applied
            grads["layer2.bias"] = torch.zeros(1).expand(16)
        return loss, grads

    calls: list = []
    model = build_model("three_layer_relu")
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    rows, state = [], RunState()
    runner = StepRunner(model, broken_at_step_3, "broken", None, state, mem_every=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        before = [p.detach().clone() for p in model.parameters()]
        runner(x, y, step, opt.step)
        rows.append(step)  # the step returned its metrics
        if state.status != "running":
            break
    assert state.status == "diverged" and step == 3 and rows == [0, 1, 2, 3]
    assert state.reason == "non-finite gradient at step 3 (layer2.bias)"
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # not applied


@pytest.mark.slow
def test_divergent_job_does_not_stop_the_sweep(tmp_path):
    proc = run_cli(
        "-m",
        "optimizer.lr=1e6,0.01,-1",
        "logger=csv",
        "trainer.max_steps=50",
        f"hydra.sweep.dir={tmp_path / 'S'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    table = (tmp_path / "S" / "summary.csv").read_text()
    assert table.count("diverged") == 1 and table.count("completed") == 1
    assert "optimizer.lr=-1.0 must be > 0" in table


@pytest.mark.parametrize(
    "method,param,what",
    fast_first(
        [
            ("raises", None, "raised: RuntimeError"),
            ("missing_bias", "layer1.bias", "is missing"),
            ("wrong_shape", "layer1.weight", "has shape"),
            ("wrong_dtype", "layer1.weight", "torch.float16"),
            ("not_a_dict", None, "expected a dict"),
        ]
    ),
)
def test_broken_user_method_names_method_and_parameter(tmp_path, monkeypatch, method, param, what):
    monkeypatch.syspath_prepend(str(TESTS))
    path = f"faultmethods.{method}"
    result = train(
        compose_cfg("logger=csv", f"grad.method={path}", "trainer.max_steps=5"), tmp_path
    )
    assert result.status == "failed"
    assert path in result.reason and what in result.reason
    if param:
        assert repr(param) in result.reason


def test_failed_check_is_recorded_and_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    cfg = compose_cfg(
        "logger=csv", "grad.method=faultmethods.sign_flip_bias", "trainer.max_steps=10"
    )
    result = train(cfg, tmp_path)
    assert result.status == "completed" and result.steps == 10
    assert result.grad_check == "fail"
    assert result.grad_check_first_fail["step"] == 0
    assert result.grad_check_first_fail["param"] == "layer3.bias"


def test_failed_check_with_fail_fast_stops(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    cfg = compose_cfg(
        "logger=csv", "grad.method=faultmethods.sign_flip_bias", "check.fail_fast=true"
    )
    result = train(cfg, tmp_path)
    assert result.status == "failed" and "layer3.bias" in result.reason
    assert result.steps == 1 and len(read_metrics(tmp_path / "metrics.csv")) == 1


def _interrupt(run_dir: Path, sig: int, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "true", "WANDB_MODE": "offline"}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TRAIN),
            "trainer.max_steps=1000000",
            "check=none",
            f"hydra.run.dir={run_dir}",
            *extra,
        ],
        cwd=run_dir.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.csv"
    deadline = time.time() + 90
    while time.time() < deadline:
        if metrics.exists() and metrics.read_text().count("\n") > 20:
            break
        time.sleep(0.1)
    try:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # never leave a training process behind
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
def test_sigint_saves_everything_and_resume_matches(tmp_path):
    a = tmp_path / "A"
    proc = _interrupt(a, signal.SIGINT, "logger=csv")
    assert proc.returncode == 130, proc.stderr
    s = summary(a)
    assert s.status == "interrupted" and s.reason == "SIGINT received"
    ckpt = Path(s.checkpoint)
    assert ckpt.is_file()
    rows = read_metrics(a / "metrics.csv")
    k = len(rows)
    assert k == s.steps and rows[-1]["step"] == k - 1

    b = tmp_path / "B"
    resumed = run_cli(
        f"ckpt_path={ckpt}",
        f"trainer.max_steps={k + 15}",
        "check=none",
        "logger=csv",
        f"hydra.run.dir={b}",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr
    tail = read_metrics(b / "metrics.csv")
    assert [r["step"] for r in tail] == list(range(k, k + 15))

    ref = train(
        compose_cfg("logger=csv", "check=none", f"trainer.max_steps={k + 15}"), tmp_path / "C"
    )
    assert ref.status == "completed"
    full = read_metrics(tmp_path / "C" / "metrics.csv")
    expect = torch.tensor([r["train/loss"] for r in full[k:]], dtype=torch.float64)
    got = torch.tensor([r["train/loss"] for r in tail], dtype=torch.float64)
    assert torch.equal(got, expect)  # the same computation from the same state: bit for bit


@pytest.mark.slow
def test_interrupt_inside_a_step_group_resumes_exactly(tmp_path, monkeypatch):
    # Lightning runs trainer.inner_steps = 10 optimizer steps per batch: a stop at step 14 is
    # inside the group 10..19; the checkpoint holds 14 steps and the resumed run goes on at 14
    a, b = tmp_path / "A", tmp_path / "B"
    common = ["logger=csv", "check=none", "trainer.mem_every=0"]
    stopped = run_cli(
        *common,
        "grad.method=faultmethods.sigint_at_step_13",
        f"hydra.run.dir={a}",
        cwd=tmp_path,
        env={"PYTHONPATH": str(TESTS)},
    )
    assert stopped.returncode == 130, stopped.stderr
    s = summary(a)
    assert s.status == "interrupted" and s.steps == 14
    assert [r["step"] for r in read_metrics(a / "metrics.csv")] == list(range(14))
    resumed = run_cli(
        *common, "grad.method=faultmethods.sigint_at_step_13", f"ckpt_path={s.checkpoint}",
        "trainer.max_steps=30", f"hydra.run.dir={b}", cwd=tmp_path,
        env={"PYTHONPATH": str(TESTS), "FAULTMETHODS_SIGINT_CALL": "0"},
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    # the uninterrupted reference: the same method, never interrupted
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("FAULTMETHODS_SIGINT_CALL", "0")
    method = "grad.method=faultmethods.sigint_at_step_13"
    ref = train(compose_cfg(*common, method, "trainer.max_steps=30"), tmp_path / "C")
    assert ref.status == "completed"
    tail = read_metrics(b / "metrics.csv")
    assert [r["step"] for r in tail] == list(range(14, 30))
    full = read_metrics(tmp_path / "C" / "metrics.csv")
    torch.testing.assert_close(
        torch.tensor([r["train/loss"] for r in tail], dtype=torch.float64),
        torch.tensor([r["train/loss"] for r in full[14:]], dtype=torch.float64),
        rtol=1e-6,
        atol=0,
    )


@pytest.mark.slow
def test_sigterm_preemption_finishes_wandb_and_checkpoints(tmp_path):
    a = tmp_path / "T"
    proc = _interrupt(a, signal.SIGTERM)
    assert proc.returncode == 130, proc.stderr
    s = summary(a)
    assert s.status == "interrupted" and s.reason == "SIGTERM received"
    assert Path(s.checkpoint).is_file()
    assert s.wandb_dir and list(Path(s.wandb_dir).glob("*.wandb"))
    assert len(read_metrics(a / "metrics.csv")) == s.steps


@pytest.mark.slow
def test_wandb_unreachable_falls_back_offline_without_leaking_the_key(tmp_path):
    key = "0123456789abcdef0123456789abcdef01234567"
    proc = run_cli(
        "trainer.max_steps=10",
        "logger.wandb.init_timeout_s=3",
        f"hydra.run.dir={tmp_path / 'W'}",
        cwd=tmp_path,
        env={"WANDB_API_KEY": key, "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_MODE": None},
    )
    assert proc.returncode == 0, proc.stderr
    assert key not in proc.stdout + proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: W&B online")]
    assert len(warnings) == 1
    s = summary(tmp_path / "W")
    assert s.status == "completed" and Path(s.wandb_dir).name.startswith("offline-run-")


@pytest.mark.slow
def test_a_run_never_overwrites_an_earlier_run(tmp_path):
    run_dir = tmp_path / "R"
    first = run_cli("logger=csv", "trainer.max_steps=5", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    again = run_cli("logger=csv", "trainer.max_steps=7", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
