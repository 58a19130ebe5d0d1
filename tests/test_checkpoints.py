"""Checkpoints: last.ckpt every N steps and at the end, written atomically; a SIGKILLed run
resumes from it exactly; a checkpoint of another kind of run, or a broken one, is one line
before any run dir exists; a SLURM job restarted by SLURM resumes in its own dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from apphelpers import CONF, TRAIN, compose_cfg, fast_first, run_cli, summary
from gradlab.app import checkpoints, cli, slurmjob
from gradlab.app.job import RunFailed, _event_every
from gradlab.app.run import train
from gradlab.app.validate import validate
from gradlab.training.record import RunSummary, read_metrics, write_summary

TESTS = Path(__file__).resolve().parent
QUICK = ["logger=csv", "check=none", "trainer.mem_every=0"]


def _losses(run_dir: Path, start: int = 0) -> torch.Tensor:
    rows = read_metrics(run_dir / "metrics.csv")
    return torch.tensor([r["train/loss"] for r in rows[start:]], dtype=torch.float64)


@pytest.mark.slow
def test_last_ckpt_after_every_nth_step_at_group_ends_and_at_the_end(tmp_path, monkeypatch):
    saved = []
    save = checkpoints.save
    monkeypatch.setattr(
        checkpoints, "save", lambda tr, p: saved.append(tr.global_step) or save(tr, p)
    )
    cfg = compose_cfg(*QUICK, "trainer.max_steps=50", "trainer.ckpt_every_n_steps=20")
    result = train(cfg, tmp_path)
    assert result.status == "completed"
    assert saved == [21, 41, 50]  # after steps 20 and 40 (global step = steps done), and at the end
    ckpt = checkpoints.load(tmp_path / "checkpoints" / "last.ckpt")
    assert ckpt["global_step"] == 50
    assert ckpt[checkpoints.RECORD] == checkpoints.identity(validate(cfg))
    assert ckpt[checkpoints.RECORD]["loss"] == "mse"
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))


@pytest.mark.slow
def test_checkpoint_steps_end_step_groups():
    t = "trainer"
    base = [f"{t}.flush_every_n_steps=50", f"{t}.mem_every=0", "check=none"]
    assert _event_every(validate(compose_cfg(*base, f"{t}.ckpt_every_n_steps=25"))) == 25
    assert _event_every(validate(compose_cfg(*base, f"{t}.ckpt_every_n_steps=0"))) == 50


@pytest.mark.slow
def test_a_diverged_run_saves_no_final_checkpoint(tmp_path):
    cfg = compose_cfg(*QUICK, "optimizer.lr=1e6", "trainer.max_steps=200")
    result = train(cfg, tmp_path)
    assert result.status == "diverged" and result.steps < 200
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()


def test_a_write_that_dies_halfway_leaves_the_previous_checkpoint_whole(tmp_path):
    path = tmp_path / "checkpoints" / "last.ckpt"
    checkpoints.replace_atomically(path, lambda tmp: torch.save({"global_step": 7}, tmp))
    before = path.read_bytes()

    def dies_halfway(tmp: Path) -> None:
        tmp.write_bytes(before[: len(before) // 2])
        raise OSError("no space left on device")

    with pytest.raises(OSError):
        checkpoints.replace_atomically(path, dies_halfway)
    assert path.read_bytes() == before
    assert checkpoints.load(path)["global_step"] == 7
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]


def _sigkill_after_checkpoint(run_dir: Path, *args: str) -> int:
    """Start the real CLI, SIGKILL it once last.ckpt exists and some more rows are written;
    returns the checkpoint's step."""
    env = {**os.environ, "CI": "true", "WANDB_MODE": "offline"}
    cmd = [sys.executable, str(TRAIN), *args, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=run_dir.parent, env=env, stderr=subprocess.PIPE, text=True)
    last, metrics = run_dir / "checkpoints" / "last.ckpt", run_dir / "metrics.csv"
    try:
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None:
            if last.exists() and metrics.exists() and metrics.read_text().count("\n") > 100:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:  # never leave a training process behind
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return checkpoints.load(last)["global_step"]


@pytest.mark.slow
def test_after_sigkill_last_ckpt_resumes_the_uninterrupted_trajectory_exactly(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    k = _sigkill_after_checkpoint(
        a, *QUICK, "trainer.max_steps=1000000", "trainer.ckpt_every_n_steps=30"
    )
    assert k > 1 and (k - 1) % 30 == 0
    assert summary(a).status == "running"  # killed: nothing settled it
    resumed = run_cli(
        *QUICK,
        f"ckpt_path={a / 'checkpoints' / 'last.ckpt'}",
        f"trainer.max_steps={k + 25}",
        f"hydra.run.dir={b}",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert summary(b).resumed_from == str(a / "checkpoints" / "last.ckpt")
    assert [r["step"] for r in read_metrics(b / "metrics.csv")] == list(range(k, k + 25))
    ref = train(compose_cfg(*QUICK, f"trainer.max_steps={k + 25}"), tmp_path / "C")
    assert ref.status == "completed"
    assert torch.equal(_losses(b), _losses(tmp_path / "C", k))  # bit for bit


@pytest.fixture(scope="module")
def saved_ckpt(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("saved") / "run"
    assert train(compose_cfg(*QUICK, "trainer.max_steps=5"), run_dir).status == "completed"
    return run_dir / "checkpoints" / "last.ckpt"


def _precheck(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as e:
        cli.precheck(list(args), CONF)
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ckpt_path="), lines
    return lines[0]


@pytest.mark.parametrize(
    "overrides,keys",
    fast_first(
        [
            (["model.hidden=32"], ["model.hidden"]),
            (["dtype=float64"], ["dtype"]),
            (["grad=autograd"], ["grad.method"]),
            (["optimizer=adam"], ["optimizer.name"]),
            (["model.d_in=3", "model.hidden=8"], ["model.d_in", "model.hidden"]),
            (["loss=cross_entropy", "model.d_out=3"], ["model.d_out", "loss"]),
            (["data=diabetes", "model.d_in=10"], ["model.d_in", "data.name"]),
        ]
    ),
)
def test_a_checkpoint_of_another_kind_of_run_names_the_keys(capsys, saved_ckpt, overrides, keys):
    line = _precheck(capsys, f"ckpt_path={saved_ckpt}", *overrides)
    here = validate(compose_cfg(*overrides))
    named = [k for k in checkpoints.identity(here) if f" {k} (" in line]
    assert named == keys


@pytest.mark.slow
def test_every_key_of_a_models_option_is_part_of_the_identity():
    custom = ["model=custom", "model.target=usermodels.build", "data.d_in=4", "data.d_out=1"]
    a = checkpoints.identity(validate(compose_cfg(*custom, "model.kwargs={width: 8}")))
    b = checkpoints.identity(validate(compose_cfg(*custom, "model.kwargs={width: 9}")))
    assert a["model.target"] == "usermodels.build" and a["model.kwargs"] != b["model.kwargs"]
    cnn = checkpoints.identity(validate(compose_cfg("experiment=digits_cnn")))
    assert (cnn["model.channels"], cnn["data.name"], cnn["loss"]) == (8, "digits", "cross_entropy")


def test_loss_is_part_of_the_identity(saved_ckpt, tmp_path):
    ckpt = torch.load(saved_ckpt, weights_only=True)
    ckpt[checkpoints.RECORD]["loss"] = "cross_entropy"
    other = tmp_path / "other.ckpt"
    torch.save(ckpt, other)
    cfg = validate(compose_cfg(f"ckpt_path={other}"))
    with pytest.raises(
        checkpoints.CheckpointError, match=r"loss \(cross_entropy there, mse here\)"
    ):
        checkpoints.resume_step(cfg)


@pytest.mark.parametrize(
    "damage",
    fast_first(["truncated", "garbage", "empty", "not_lightning", "no_record"]),
)
def test_a_broken_checkpoint_is_one_line(capsys, saved_ckpt, tmp_path, damage):
    raw, path = saved_ckpt.read_bytes(), tmp_path / f"{damage}.ckpt"
    if damage == "not_lightning":
        torch.save({"weights": torch.zeros(3)}, path)
    elif damage == "no_record":
        ckpt = torch.load(saved_ckpt, weights_only=True)
        del ckpt[checkpoints.RECORD]
        torch.save(ckpt, path)
    else:
        path.write_bytes(
            {"truncated": raw[: len(raw) // 2], "garbage": b"\x00junk" * 99}.get(damage, b"")
        )
    line = _precheck(capsys, f"ckpt_path={path}")
    what = {"not_lightning": "not a Lightning checkpoint", "no_record": "no gradlab run record"}
    assert what.get(damage, "not a readable checkpoint") in line


@pytest.mark.slow
def test_a_bad_checkpoint_writes_no_run_dir(tmp_path, saved_ckpt):
    proc = run_cli(
        f"ckpt_path={saved_ckpt}", "model.hidden=8", f"hydra.run.dir={tmp_path / 'R'}", cwd=tmp_path
    )
    assert proc.returncode == 2
    what = "is from another kind of run: model.hidden (16 there, 8 here)"
    assert proc.stderr.strip().splitlines() == [f"error: ckpt_path={saved_ckpt} {what}"]
    assert not (tmp_path / "R").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_sweep_job_with_a_bad_checkpoint_fails_with_the_reason(tmp_path, saved_ckpt):
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(saved_ckpt.read_bytes()[:100])
    proc = run_cli(
        "-m", f"ckpt_path={saved_ckpt},{truncated}", *QUICK, "trainer.max_steps=8",
        f"hydra.sweep.dir={tmp_path / 'S'}", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    good, bad = (summary(d) for d in sorted((tmp_path / "S").glob("[01]-*")))
    assert good.status == "completed" and good.steps == 8
    assert bad.status == "failed" and bad.reason.startswith(
        f"ckpt_path={truncated} is not a readable"
    )
    assert "2 jobs: 1 completed, 1 failed" in (tmp_path / "S" / "summary.md").read_text()


# ---- a SLURM job that SLURM starts again (requeue, pre-emption) resumes in its own dir


def _job_env(monkeypatch, job: str, restarts: int) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_RESTART_COUNT", str(restarts))
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(name, raising=False)


def _killed_run(run_dir: Path, job: str, rows: int, ckpts: dict[str, int]) -> None:
    """What a SIGKILLed start of SLURM job `job` leaves: summary "running", metrics rows
    0..rows-1 and half a row, checkpoints at the given steps."""
    run_dir.mkdir()
    write_summary(run_dir / "summary.json", RunSummary(job_id=job, job_restarts=0))
    lines = ["step,train/loss\n", *(f"{s},0.5\n" for s in range(rows)), f"{rows},0.4"]
    (run_dir / "metrics.csv").write_text("".join(lines))
    for name, step in ckpts.items():
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        torch.save({"global_step": step, "state_dict": {}}, run_dir / "checkpoints" / name)


@pytest.mark.parametrize(
    "ckpts,resumes",
    [
        ({}, None),
        ({"last.ckpt": 41}, "last.ckpt"),
        ({"last.ckpt": 41, "interrupted.ckpt": 50}, "interrupted.ckpt"),
    ],
)
def test_a_restarted_job_claims_its_dir_at_its_newest_checkpoint(
    tmp_path, monkeypatch, ckpts, resumes
):
    run_dir = tmp_path / "R"
    _killed_run(run_dir, "4242", 60, ckpts)
    _job_env(monkeypatch, "4242", 1)
    restart = slurmjob.claim(run_dir)
    step = ckpts.get(resumes, 0)
    assert restart.step == step
    assert restart.checkpoint == (run_dir / "checkpoints" / resumes if resumes else None)
    assert [r["step"] for r in read_metrics(run_dir / "metrics.csv")] == list(range(step))


@pytest.mark.parametrize("job,restarts", [("4243", 1), ("4242", 0), (None, 0)])
def test_any_other_run_never_claims_the_dir(tmp_path, monkeypatch, job, restarts):
    run_dir = tmp_path / "R"
    _killed_run(run_dir, "4242", 60, {"last.ckpt": 41})
    if job is None:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
        monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    else:
        _job_env(monkeypatch, job, restarts)
    before = (run_dir / "metrics.csv").read_bytes()
    with pytest.raises(RunFailed, match="already holds a run"):
        slurmjob.claim(run_dir)
    assert (run_dir / "metrics.csv").read_bytes() == before


@pytest.mark.slow
def test_a_requeued_job_resumes_from_its_own_checkpoint_and_trajectory(tmp_path, monkeypatch):
    # the first start is interrupted inside a step group (SIGINT at step 13, as SIGTERM at a
    # requeue); SLURM starts the same job again (same id, restart count 1) in the same dir
    run_dir, common = tmp_path / "R", [*QUICK, "grad.method=faultmethods.sigint_at_step_13"]
    args = [*common, "trainer.max_steps=30", f"hydra.run.dir={run_dir}"]
    job = {"PYTHONPATH": str(TESTS), "SLURM_JOB_ID": "4242", "SUBMITIT_EXECUTOR": None}
    job.update(SLURM_ARRAY_JOB_ID=None, SLURM_ARRAY_TASK_ID=None)
    first = run_cli(*args, cwd=tmp_path, env={**job, "SLURM_RESTART_COUNT": "0"})
    assert first.returncode == 130, first.stderr
    assert summary(run_dir).steps == 14 and summary(run_dir).job_id == "4242"
    again = run_cli(
        *args,
        cwd=tmp_path,
        env={**job, "SLURM_RESTART_COUNT": "1", "FAULTMETHODS_SIGINT_CALL": "0"},
    )
    assert again.returncode == 0, again.stderr
    s = summary(run_dir)
    assert s.status == "completed" and s.steps == 30 and s.job_restarts == 1
    assert s.resumed_from == str(run_dir / "checkpoints" / "interrupted.ckpt")
    assert [r["step"] for r in read_metrics(run_dir / "metrics.csv")] == list(range(30))
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("FAULTMETHODS_SIGINT_CALL", "0")
    ref = train(compose_cfg(*common, "trainer.max_steps=30"), tmp_path / "C")
    assert ref.status == "completed"
    assert torch.equal(_losses(run_dir), _losses(tmp_path / "C"))
