"""Checkpoints: what a run saves (Lightning's checkpoint, plus the run's identity under
"gradlab"), how (atomically: a kill during the write leaves the previous file whole), and what a
resume accepts (a readable checkpoint of a run like this one; anything else is one line).

checkpoints/last.ckpt is written every trainer.ckpt_every_n_steps steps, at the end of the step
group that ends on such a step (groups end there, so no timed gradient waits for the disk), and
when training ends; checkpoints/interrupted.ckpt on Ctrl-C, SIGTERM or a pre-emption signal.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import torch

from gradlab.app.config import ConfigError, TrainConfig

RECORD = "gradlab"  # the checkpoint's key for the identity of the run that wrote it
LAST, INTERRUPTED = "last.ckpt", "interrupted.ckpt"  # under <run dir>/checkpoints/


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed; the message is one line naming ckpt_path."""


def identity(cfg: TrainConfig) -> dict[str, object]:
    """What a run resuming a checkpoint must share with the run that wrote it: the model and
    every key of its option (sizes, target and kwargs, channels), the data set, the loss, the
    gradient method, the optimizer and the dtype."""
    from gradlab.data import loss_of

    model = {f"model.{k}": v for k, v in dataclasses.asdict(cfg.model).items()}
    return {
        **model,
        "data.name": cfg.data.name,
        "loss": loss_of(cfg.data.name, cfg.loss),
        "grad.method": cfg.grad.method,
        "optimizer.name": cfg.optimizer.name,
        "dtype": cfg.dtype,
    }


def load(path: str | Path) -> dict:
    """The checkpoint's content (tensors on the CPU), or CheckpointError: missing, unreadable
    (truncated, corrupt), or not a Lightning checkpoint."""
    if not Path(path).is_file():
        raise CheckpointError(f"ckpt_path={path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises RuntimeError, EOFError, UnpicklingError, ...
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(f"ckpt_path={path} is not a readable checkpoint: {why}") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("global_step"), int):
        raise CheckpointError(f"ckpt_path={path} is not a Lightning checkpoint (no global_step)")
    return ckpt


def resume_step(cfg: TrainConfig) -> int:
    """0, or the global step of cfg.ckpt_path once it is known to be a checkpoint of a run like
    this one; CheckpointError (one line naming the keys that differ) otherwise."""
    if not cfg.ckpt_path:
        return 0
    ckpt = load(cfg.ckpt_path)
    saved = ckpt.get(RECORD)
    if not isinstance(saved, dict):
        raise CheckpointError(
            f"ckpt_path={cfg.ckpt_path} has no gradlab run record, so it cannot be checked "
            "against this config (not written by gradlab's training)"
        )
    here = identity(cfg)
    differ = [k for k in here if saved.get(k) != here[k]]
    if differ:
        what = ", ".join(f"{k} ({saved.get(k)} there, {here[k]} here)" for k in differ)
        raise CheckpointError(f"ckpt_path={cfg.ckpt_path} is from another kind of run: {what}")
    return ckpt["global_step"]


def newest(run_dir: Path) -> tuple[Path, int] | None:
    """The run dir's own checkpoint furthest on (last.ckpt or interrupted.ckpt) and its step;
    None if it has no readable one."""
    found = []
    for name in (LAST, INTERRUPTED):  # on a tie the later one, interrupted.ckpt, wins
        try:
            found.append((load(run_dir / "checkpoints" / name)["global_step"], name))
        except CheckpointError:
            continue
    if not found:
        return None
    step, name = max(found)
    return run_dir / "checkpoints" / name, step


def replace_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """write(tmp) to a temporary file beside `path`, flush it to disk, rename it over `path`:
    `path` is always either the old file or the whole new one, also after a crash of the
    machine (the rename itself may then be lost: the old file stays)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def save(trainer, path: Path) -> Path:
    """A Lightning Trainer's trainer.save_checkpoint(path), atomically."""
    return replace_atomically(path, trainer.save_checkpoint)
