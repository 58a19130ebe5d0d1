"""Typed config schema (Hydra structured configs) and the value checks run before training."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from gradlab.check import CheckSettings as CheckConfig  # the checks' own settings are the schema
from gradlab.grads import METHODS
from gradlab.models import MODELS
from gradlab.training.data import DATASETS

OPTIMIZERS = ("sgd", "adam", "gd")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "float64")
WANDB_MODES = ("auto", "offline", "online", "disabled")


@dataclass
class ModelConfig:
    name: str = MISSING  # two_layer_sigmoid | three_layer_relu
    d_in: int = MISSING  # input width
    hidden: int = MISSING  # hidden width (every hidden layer)
    d_out: int = MISSING  # output width


@dataclass
class GradConfig:
    name: str = MISSING  # label used in run names and reports
    method: str = MISSING  # a built-in method or an import path "pkg.module.fn" to your own
    compile: bool = False  # wrap the whole gradient method in torch.compile


@dataclass
class OptimizerConfig:
    name: str = MISSING  # sgd | adam | gd (article 002's hand-written gradient descent)
    lr: float = MISSING  # learning rate, > 0
    momentum: float = 0.0  # sgd only, >= 0
    weight_decay: float = 0.0  # sgd, adam; >= 0


@dataclass
class DeviceConfig:
    name: str = "auto"  # auto (CUDA when present) | cpu | cuda


@dataclass
class DataConfig:
    name: str = MISSING  # regression (fixed teacher net) | xor
    n_samples: int = 100  # samples in the data set, >= 1
    batch_size: int = 100  # >= 1; >= n_samples means full batch
    noise: float = 0.0  # regression target noise std, >= 0


@dataclass
class WandbConfig:
    project: str = "gradlab"
    entity: str | None = None
    # auto: WANDB_MODE if set, else online iff WANDB_API_KEY is set | offline | online | disabled
    mode: str = "auto"
    group: str | None = None  # default: the sweep name in multirun, else none
    tags: list[str] = field(default_factory=list)
    init_timeout_s: float = 20.0  # give up on an unreachable server after this, then go offline


@dataclass
class CsvConfig:
    """metrics.csv in the run dir. It is written for every run under that name (reports read
    it); choosing the csv logger alone means: no W&B."""


@dataclass
class LoggerConfig:
    wandb: WandbConfig | None = None
    csv: CsvConfig | None = None


@dataclass
class TrainerConfig:
    max_steps: int = 500  # optimizer steps, >= 1
    # optimizer steps per Lightning training_step (Lightning's per-batch work is paid once per
    # group; global_step still counts optimizer steps), >= 1
    inner_steps: int = 10
    log_every_n_steps: int = 1  # write metrics every N steps, >= 1
    # hand the logged rows to metrics.csv and W&B every N steps (and at the end), >= 1
    flush_every_n_steps: int = 10
    mem_every: int = 100  # measure peak memory every N steps (0 = never)
    progress: str = "auto"  # auto (a rich bar on a terminal, quiet under CI) | on | off


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    grad: GradConfig = field(default_factory=GradConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    data: DataConfig = field(default_factory=DataConfig)
    check: CheckConfig = field(default_factory=CheckConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    seed: int = 0
    dtype: str = "float32"  # float32 | float64
    threads: int = 1  # torch intra-op threads; these nets are far too small to gain from more
    run_name: str = MISSING
    ckpt_path: str | None = None  # resume from this checkpoint
    optimized_metric: str = "loss_final"  # summary key returned to sweepers (Optuna)


def register() -> None:
    """Register the schema with Hydra's ConfigStore as `train_schema`."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


class ConfigError(ValueError):
    """A config value that is out of range; the message is one line naming the key."""


def _allowed(key: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; allowed: {', '.join(allowed)}")


def _at_least(key: str, value: float, low: float, strict: bool = False) -> None:
    if value is None or (value <= low if strict else value < low):
        raise ConfigError(f"{key}={value!r} must be {'>' if strict else '>='} {low}")


def validate(cfg) -> None:
    """Check values a type alone cannot; raise ConfigError with a one-line message."""
    _allowed("model.name", cfg.model.name, MODELS)
    for key in ("d_in", "hidden", "d_out"):
        _at_least(f"model.{key}", cfg.model[key], 1)
    method = cfg.grad.method
    if method not in METHODS and "." not in method and ":" not in method:
        raise ConfigError(
            f"grad.method={method!r} is not allowed; allowed: {', '.join(METHODS)}, "
            "or an import path pkg.module.fn"
        )
    _allowed("optimizer.name", cfg.optimizer.name, OPTIMIZERS)
    _at_least("optimizer.lr", cfg.optimizer.lr, 0, strict=True)
    _at_least("optimizer.momentum", cfg.optimizer.momentum, 0)
    _at_least("optimizer.weight_decay", cfg.optimizer.weight_decay, 0)
    _allowed("device.name", cfg.device.name, DEVICES)
    _allowed("data.name", cfg.data.name, DATASETS)
    _at_least("data.n_samples", cfg.data.n_samples, 1)
    _at_least("data.batch_size", cfg.data.batch_size, 1)
    _at_least("data.noise", cfg.data.noise, 0)
    if cfg.data.name == "xor" and (cfg.model.d_in, cfg.model.d_out) != (2, 1):
        raise ConfigError(
            f"data=xor needs model.d_in=2 and model.d_out=1, got {cfg.model.d_in} and "
            f"{cfg.model.d_out}"
        )
    _at_least("check.directional_every", cfg.check.directional_every, 0)
    _at_least("check.full_every", cfg.check.full_every, 0)
    _at_least("check.k", cfg.check.k, 1)
    if cfg.check.h is not None:
        _at_least("check.h", cfg.check.h, 0, strict=True)
    if cfg.check.tol is not None:
        _at_least("check.tol", cfg.check.tol, 0, strict=True)
    if cfg.logger.wandb is not None:
        _allowed("logger.wandb.mode", cfg.logger.wandb.mode, WANDB_MODES)
    _at_least("trainer.max_steps", cfg.trainer.max_steps, 1)
    _at_least("trainer.inner_steps", cfg.trainer.inner_steps, 1)
    _at_least("trainer.log_every_n_steps", cfg.trainer.log_every_n_steps, 1)
    _at_least("trainer.flush_every_n_steps", cfg.trainer.flush_every_n_steps, 1)
    _at_least("trainer.mem_every", cfg.trainer.mem_every, 0)
    _allowed("trainer.progress", cfg.trainer.progress, ("auto", "on", "off"))
    _allowed("dtype", cfg.dtype, DTYPES)
    _at_least("threads", cfg.threads, 1)
