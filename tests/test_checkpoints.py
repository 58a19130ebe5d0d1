"""Checkpoints: last.ckpt every N steps and at the end, written atomically; a SIGKILLed run
resumes from it exactly; a checkpoint of another kind of run, or a broken one, is one line
before any run dir exists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from apphelpers import CONF, TRAIN, compose_cfg, run_cli, summary
from gradlab.app import checkpoints, cli
from gradlab.app.config import validate
from gradlab.app.job import _event_every
from gradlab.app.run import train
from gradlab.training.record import read_metrics

TESTS = Path(__file__).resolve().parent
QUICK = ["logger=csv", "check=none", "trainer.mem_every=0"]


def _losses(run_dir: Path, start: int = 0) -> torch.Tensor:
    rows = read_metrics(run_dir / "metrics.csv")
    return torch.tensor([r["train/loss"] for r in rows[start:]], dtype=torch.float64)


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


def test_checkpoint_steps_end_step_groups():
    t = "trainer"
    base = [f"{t}.flush_every_n_steps=50", f"{t}.mem_every=0", "check=none"]
    assert _event_every(validate(compose_cfg(*base, f"{t}.ckpt_every_n_steps=25"))) == 25
    assert _event_every(validate(compose_cfg(*base, f"{t}.ckpt_every_n_steps=0"))) == 50


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
    [
        (["model.hidden=32"], ["model.hidden"]),
        (["dtype=float64"], ["dtype"]),
        (["grad=autograd"], ["grad.method"]),
        (["optimizer=adam"], ["optimizer.name"]),
        (["model.d_in=3", "model.hidden=8"], ["model.d_in", "model.hidden"]),
    ],
)
def test_a_checkpoint_of_another_kind_of_run_names_the_keys(capsys, saved_ckpt, overrides, keys):
    line = _precheck(capsys, f"ckpt_path={saved_ckpt}", *overrides)
    named = [k for k in checkpoints.identity(validate(compose_cfg())) if f" {k} (" in line]
    assert named == keys


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


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "not_lightning", "no_record"])
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
