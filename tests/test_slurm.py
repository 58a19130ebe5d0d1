"""Sweeps on SLURM (hydra/launcher=slurm, through submitit) on a real cluster: `bash
scripts/slurm_local.sh start` brings one up on this machine. A sweep gives the basic launcher's
losses; a job SLURM requeues (`scontrol requeue`, or submitit's time-limit signal) checkpoints,
is requeued and resumes in its own dir; a failing job, or one cancelled, fails alone; a refused
request is one line.
Every job a test submits has the test's own name, cancelled when the test ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from apphelpers import TRAIN, compose_cfg, run_cli, summary
from gradlab.app.launcher import refusal
from gradlab.app.run import train
from gradlab.training.record import read_metrics

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TESTS = Path(__file__).resolve().parent
QUICK = ["logger=csv", "check=none", "trainer.mem_every=0"]
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}


def _sinfo(*fmt: str) -> list[str]:
    out = subprocess.run(["sinfo", "-h", *fmt], capture_output=True, text=True, timeout=15)
    return out.stdout.split() if out.returncode == 0 else []


@pytest.fixture(scope="module")
def partition() -> str:
    """The cluster's default partition (the first one up without a default)."""
    if shutil.which("sbatch") is None:
        pytest.skip("sbatch not found: no SLURM here (bash scripts/slurm_local.sh start)")
    up = [p for p, state in zip(*[iter(_sinfo("-o", "%P %a"))] * 2) if state == "up"]
    nodes = [s for s in _sinfo("-o", "%T") if s.startswith(("idle", "mix", "alloc", "compl"))]
    if not up or not nodes:
        pytest.skip("SLURM is installed but not up (sinfo: no partition or node up)")
    return next((p for p in up if p.endswith("*")), up[0]).rstrip("*")


@pytest.fixture
def slurm(partition):
    """The overrides that send a sweep to SLURM under a name of this test's own; its jobs are
    cancelled at the end, whatever happened."""
    name = f"gradlab-test-{uuid.uuid4().hex[:8]}"
    yield [
        "hydra/launcher=slurm",
        f"hydra.launcher.partition={partition}",
        f"hydra.launcher.name={name}",
        "hydra.launcher.timeout_min=5",
    ]
    subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=30)
    deadline = time.time() + 60
    while time.time() < deadline and _queue(name):
        time.sleep(0.5)


def _queue(name: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", f"--name={name}", "-o", "%i"], capture_output=True, text=True, timeout=15
    )
    return out.stdout.split()


def _losses(run_dir: Path) -> torch.Tensor:
    rows = read_metrics(run_dir / "metrics.csv")
    return torch.tensor([r["train/loss"] for r in rows], dtype=torch.float64)


def _jobs(sweep: Path) -> list[Path]:
    return sorted(d for d in sweep.iterdir() if (d / "summary.json").exists())


def test_a_sweep_on_slurm_gives_the_basic_launchers_losses(tmp_path, slurm):
    # the basic launcher runs each job as train() in its own process; so does the reference
    models, grads = ("two_layer_sigmoid", "three_layer_relu"), ("autograd", "manual")
    grid = ["-m", f"grad={','.join(grads)}", f"model={','.join(models)}"]
    common = ["logger=csv", "trainer.max_steps=30"]
    proc = run_cli(
        *grid, *common, *slurm, f"hydra.sweep.dir={tmp_path / 'S'}", cwd=tmp_path, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    assert "4 jobs: 4 completed" in (tmp_path / "S" / "summary.md").read_text()
    jobs = _jobs(tmp_path / "S")
    assert len(jobs) == 4 and all(summary(job).job_id for job in jobs)  # each a SLURM job
    for job, (grad, model) in zip(jobs, [(g, m) for g in grads for m in models]):
        assert job.name.endswith(f"-{model}-{grad}-sgd-s0")
        ref = train(compose_cfg(*common, f"grad={grad}", f"model={model}"), tmp_path / job.name)
        assert ref.status == "completed"
        assert torch.equal(_losses(job), _losses(tmp_path / job.name)), job.name


def test_a_failing_job_fails_alone(tmp_path, slurm):
    proc = run_cli(
        "-m", "grad=custom", "grad.method=autograd,faultmethods.raises", *QUICK,
        "trainer.max_steps=10", *slurm, f"hydra.sweep.dir={tmp_path / 'F'}",
        cwd=tmp_path, env=ENV, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    done, failed = (summary(d) for d in _jobs(tmp_path / "F"))
    assert done.status == "completed" and done.steps == 10
    assert failed.status == "failed" and "faultmethods.raises" in failed.reason
    assert "boom from a user's method" in failed.reason
    assert "2 jobs: 1 completed, 1 failed" in (tmp_path / "F" / "summary.md").read_text()


def _popen(cwd: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, **ENV, "CI": "true"}
    return subprocess.Popen(
        [sys.executable, str(TRAIN), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:  # never leave the sweep behind
        proc.kill()
        proc.wait()


def _wait_for_rows(jobs: list[Path], rows: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        counts = [
            (j / "metrics.csv").read_text().count("\n") if (j / "metrics.csv").exists() else 0
            for j in jobs
        ]
        if all(c > rows for c in counts):
            return
        time.sleep(0.2)
    pytest.fail(f"jobs did not reach {rows} rows: {proc.poll()=}")


def test_a_requeued_job_checkpoints_and_resumes_in_its_own_dir(tmp_path, slurm):
    # job 0 is requeued by SLURM (SIGTERM), job 1 gets submitit's time-limit signal (USR2);
    # each stops at a step boundary, saves interrupted.ckpt, is started again by SLURM with the
    # same job id in the same dir, and resumes there: the losses are an uninterrupted run's.
    # Job 2, still waiting for a CPU, is cancelled: it ends without a result, and the sweep
    # still summarizes all three
    steps, sweep = 200, tmp_path / "P"
    args = ["-m", "seed=0,1,2", "grad.method=faultmethods.slow_autograd", *QUICK]
    proc = _popen(tmp_path, *args, f"trainer.max_steps={steps}", *slurm, f"hydra.sweep.dir={sweep}")
    try:
        jobs = [sweep / f"{i}-three_layer_relu-manual-sgd-s{i}" for i in (0, 1)]
        _wait_for_rows(jobs, 40, proc)
        requeued, signalled = (summary(j).job_id for j in jobs)
        cancelled = requeued.replace("_0", "_2")  # the same job array's third task
        subprocess.run(["scancel", cancelled], check=True, timeout=30)
        subprocess.run(["scontrol", "requeue", requeued], check=True, timeout=30)
        subprocess.run(["scancel", "--signal=USR2", signalled], check=True, timeout=30)
        out, err = proc.communicate(timeout=240)
    finally:
        _end(proc)
    assert proc.returncode == 0, err
    assert "3 jobs: 2 completed, 1 failed" in out
    lost = summary(sweep / "2-three_layer_relu-manual-sgd-s2")
    assert lost.status == "failed" and f"SLURM job {cancelled} ended CANCELLED" in lost.reason
    assert [ln for ln in err.splitlines() if ln.startswith("error: ")] == [
        f"error: job #2: {lost.reason}; log: {sweep}/.submitit/{cancelled}/{cancelled}_0_log.err"
    ]
    for seed, job in enumerate(jobs):
        s, ckpt = summary(job), job / "checkpoints" / "interrupted.ckpt"
        assert s.status == "completed" and s.steps == steps and s.job_restarts == 1, s
        assert s.resumed_from == str(ckpt)
        assert 40 < torch.load(ckpt, weights_only=True)["global_step"] < steps
        assert [r["step"] for r in read_metrics(job / "metrics.csv")] == list(range(steps))
        cfg = compose_cfg(
            *QUICK, "grad.method=autograd", f"seed={seed}", f"trainer.max_steps={steps}"
        )
        assert train(cfg, tmp_path / f"ref{seed}").status == "completed"
        assert torch.equal(_losses(job), _losses(tmp_path / f"ref{seed}")), job.name


@pytest.mark.parametrize(
    "override,resource",
    [
        ("hydra.launcher.mem_gb=100000", "memory: hydra.launcher.mem_gb=100000"),
        ("hydra.launcher.partition=no_such_partition", "partition: hydra.launcher.partition="),
    ],
)
def test_a_refused_request_is_one_line_naming_the_override(tmp_path, slurm, override, resource):
    proc = run_cli("-m", "grad=autograd", *QUICK, *slurm, override, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: SLURM refused the jobs: {resource}")
    assert "; use " in lines[0] and "hydra.launcher." in lines[0].split("; use ")[1], lines[0]
    assert not list(tmp_path.glob("multirun/*/*/*/summary.json"))  # no job ran


@pytest.mark.parametrize(
    "sbatch_says,params,line",
    [
        (
            "sbatch: error: Batch job submission failed: More processors requested than permitted",
            {"cpus_per_task": 4096},
            "CPUs: hydra.launcher.cpus_per_task=4096 is more than a node of partition {p} has",
        ),
        (
            "sbatch: error: Invalid generic resource (gres) specification",
            {"gpus_per_node": 1},
            "GPUs: hydra.launcher.gpus_per_node=1 but a node of partition {p} has",
        ),
    ],
)
def test_what_sbatch_refuses_is_named_with_its_override(partition, sbatch_says, params, line):
    said = refusal(sbatch_says, {**params, "partition": partition})
    assert said.startswith("SLURM refused the jobs: " + line.format(p=partition)), said
    key = next(iter(params))
    assert f"hydra.launcher.{key}=" in said.split("; use ")[1], said
