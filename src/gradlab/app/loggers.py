"""Weights & Biases through Lightning's WandbLogger: offline by default, online with a key,
falling back to offline (one warning, bounded wait) when the server cannot be reached."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def wandb_mode(requested: str) -> str:
    """auto -> WANDB_MODE if set, else online when WANDB_API_KEY is set, else offline."""
    if requested != "auto":
        return requested
    env = os.environ.get("WANDB_MODE")
    if env in ("offline", "online", "disabled", "dryrun"):
        return "offline" if env == "dryrun" else env
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def _redact(text: str) -> str:
    key = os.environ.get("WANDB_API_KEY")
    return text.replace(key, "***") if key else text


def make_wandb_logger(wcfg: Any, run_name: str, save_dir: Path, config: dict, group: str | None):
    """A WandbLogger whose run is already started; None when mode is disabled or wandb is not
    installed (then metrics.csv is the record, and one warning says so)."""
    try:
        import wandb
    except ImportError:
        print("warning: wandb is not installed; logging to metrics.csv only", file=sys.stderr)
        return None
    from lightning.pytorch.loggers import WandbLogger

    if os.environ.get("WANDB_MODE") == "":  # an empty WANDB_MODE makes wandb.Settings invalid
        del os.environ["WANDB_MODE"]
    mode = wandb_mode(wcfg.mode)
    if mode == "disabled":
        return None
    os.environ.setdefault("WANDB_SILENT", "true")  # gradlab prints its own one-line notes
    save_dir.mkdir(parents=True, exist_ok=True)

    def start(mode: str) -> WandbLogger:
        logger = WandbLogger(
            name=run_name,
            project=wcfg.project,
            entity=wcfg.entity,
            group=group,
            tags=list(wcfg.tags) or None,
            save_dir=str(save_dir),
            mode=mode,
            config=config,
            settings=wandb.Settings(
                init_timeout=float(wcfg.init_timeout_s), silent=True, console="off"
            ),
        )
        # Lightning passes anonymous=None, which wandb 0.31 warns about on every run.
        logger._wandb_init.pop("anonymous", None)
        _ = logger.experiment  # start the run now, so a failure is handled here
        return logger

    if mode == "offline":
        return start("offline")
    try:
        return start("online")
    except Exception as e:  # unreachable server, bad key, timeout
        if wandb.run is not None:
            wandb.finish(exit_code=1)
        reason = _redact(str(e).splitlines()[0] if str(e) else type(e).__name__)
        print(
            f"warning: W&B online unavailable ({reason}); logging offline instead", file=sys.stderr
        )
        return start("offline")


def finish_wandb(logger) -> tuple[str | None, str | None]:
    """wandb.finish() (every job, so multirun jobs never merge); the run dir and sync command."""
    import wandb

    run_dir = sync = None
    if logger is not None and wandb.run is not None:
        run_dir = str(Path(wandb.run.dir).parent)
        offline = wandb.run.settings.mode == "offline" or getattr(wandb.run, "offline", False)
        sync = f"wandb sync {run_dir}" if offline else None
    if wandb.run is not None:
        wandb.finish()
    return run_dir, sync
