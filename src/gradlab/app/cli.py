"""The command line: bad input caught before Hydra and Lightning start (one line naming the key,
exit 2), and one job run from the config Hydra composed.

Hydra reports an unknown group choice or a value of the wrong type in several lines with a hint
about HYDRA_FULL_ERROR; a user running an experiment wants one line saying what is allowed.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gradlab.app.config import ConfigError, register
from gradlab.app.validate import validate

_SWEEP_FN = re.compile(r"^(choice|range|interval|tag|glob|shuffle|sort)\(")


def group_options(conf_dir: Path) -> dict[str, list[str]]:
    """Config groups under conf_dir and the choices each offers."""
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in sorted(conf_dir.iterdir())
        if d.is_dir()
    }


def _choices(value: str) -> list[str]:
    if _SWEEP_FN.match(value):
        value = value[value.index("(") + 1 : value.rindex(")")]
    return [v.strip() for v in value.strip("[]").split(",") if v.strip()]


def check_group_choices(overrides: list[str], conf_dir: Path) -> None:
    """Raise ConfigError for `group=choice` naming a choice that is not in conf_dir/group."""
    groups = group_options(conf_dir)
    for arg in overrides:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in groups:
            continue
        for choice in _choices(value):
            if choice not in groups[key] and choice != "null" and "${" not in choice:
                raise ConfigError(
                    f"{key}={choice} is not a known choice; allowed: {', '.join(groups[key])}"
                )


def precheck(argv: list[str], conf_dir: Path) -> None:
    """Validate the command line (choices always; types and values for a single run)."""
    if any(
        a in ("--help", "-h", "--hydra-help", "--info", "-i") or a.startswith("--cfg") for a in argv
    ):
        return
    multirun = any(
        a in ("-m", "--multirun", "hydra.mode=MULTIRUN")
        or (a.startswith("hparams_search=") and a != "hparams_search=null")  # presets set MULTIRUN
        for a in argv
    )
    overrides = [a for a in argv if not a.startswith("-")]
    try:
        check_group_choices(overrides, conf_dir)
        if multirun:
            _check_fresh_dir(argv)
            return
        plain = [a for a in overrides if not a.lstrip("+~").startswith("hydra")]
        try:
            cfg = compose(conf_dir, plain)
        except Exception as e:  # Hydra/OmegaConf: unknown key, wrong type, missing value
            raise ConfigError(_one_line(e)) from None
        try:
            checked = validate(cfg)
        except OmegaConfBaseException as e:  # e.g. a required (???) value left unset
            raise ConfigError(_one_line(e)) from None
        if checked.ckpt_path:  # before Hydra makes the run dir
            from gradlab.app.checkpoints import resume_step

            resume_step(checked)
        _check_fresh_dir(argv)
        _try_build(checked)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _try_build(cfg) -> None:
    """The model, its data and its method built on the CPU and tried on two samples (a user's
    target that cannot be imported, kwargs it rejects, data it does not fit), before Hydra
    creates the run's dir."""
    import torch

    from gradlab.app.job import prepare

    prepare(cfg, torch.device("cpu"))


def compose(conf_dir: Path, overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The train config as `python src/train.py OVERRIDES` composes it, without running (with
    Hydra's own node when with_hydra)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register()
    with initialize_config_dir(str(conf_dir), version_base="1.3"):
        return hydra_compose("train", overrides=list(overrides), return_hydra_config=with_hydra)


def _one_line(e: BaseException) -> str:
    """Hydra/OmegaConf errors as one line: what failed, then why (from the chained cause)."""
    head = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    head = head.removeprefix("Error merging override").strip()
    cause = e.__cause__
    if cause is not None and str(cause).strip():
        head = f"{head.rstrip('.')}: {str(cause).strip().splitlines()[0]}"
    if head.startswith("Missing mandatory value: "):
        head = f"{head.removeprefix('Missing mandatory value: ')} must be set"
    return head


def _check_fresh_dir(argv: list[str]) -> None:
    """An explicit hydra.run.dir / hydra.sweep.dir must not hold an earlier run: Hydra would
    overwrite its .hydra/ files before the job starts. (The same SLURM job started again by
    SLURM resumes its own run.)"""
    from gradlab.app.slurmjob import is_restart

    for arg in argv:
        key, _, value = arg.partition("=")
        run = Path(value)
        if key == "hydra.run.dir" and (run / "summary.json").exists() and not is_restart(run):
            raise ConfigError(f"hydra.run.dir={value} already holds a run; choose a new dir")
        if key == "hydra.sweep.dir" and Path(value).is_dir() and any(Path(value).iterdir()):
            raise ConfigError(f"hydra.sweep.dir={value} is not empty; choose a new dir")


def setup() -> None:
    """What composing needs before Hydra starts: the schema, and the ${gradlab_pid:} resolver.

    use_cache: the pid is resolved once in the launching process and Hydra hands that cache to
    every job, so jobs in joblib/submitit/SLURM workers share the sweep dir."""
    OmegaConf.register_new_resolver("gradlab_pid", os.getpid, replace=True, use_cache=True)
    register()


def run(cfg: DictConfig) -> float:
    """One job (of a run or a sweep) from Hydra's config: train, print, exit code, and the
    value a sweeper optimizes."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from gradlab.app import slurmjob
    from gradlab.app.console import print_summary
    from gradlab.app.run import RunFailed, optimized_value, train

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    group = Path(hc.sweep.dir).name if multirun else None
    requeue = slurmjob.requeue_handler()  # submitit's, before the run installs its own
    try:
        summary = train(cfg, Path(hc.runtime.output_dir), group=group)
    except RunFailed as e:  # the output dir already holds a run: touch nothing
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    slurmjob.hand_over(summary, requeue)  # a pre-empted SLURM job: requeued, no result
    if multirun:  # the sweep callback prints the whole table at the end
        print(f"job {summary.run_name}: {summary.status} {summary.reason}".rstrip())
    elif summary.steps:  # a run that failed before its first step gets one line only
        print_summary(summary)
    if not multirun and summary.status in ("failed", "interrupted"):
        print(f"error: run {summary.status}: {summary.reason}", file=sys.stderr)
        raise SystemExit(1 if summary.status == "failed" else 130)
    direction = OmegaConf.select(hc, "sweeper.direction", default="minimize")
    return optimized_value(summary, cfg.optimized_metric, str(direction))
