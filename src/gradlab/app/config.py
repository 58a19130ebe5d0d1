"""The typed config (Hydra structured configs): every default of a run is here, once; the YAML
files under conf/ carry only what a choice changes. validate() checks what a type cannot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from gradlab.check import CheckSettings as CheckConfig  # the checks' own settings are the schema
from gradlab.grads import METHODS
from gradlab.models import MODELS
from gradlab.training.data import DATASETS

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
    """What every optimizer takes; each option's schema adds its own keys, so a key the chosen
    optimizer does not have is an error."""

    name: str = MISSING
    lr: float = 0.01  # learning rate, > 0


@dataclass
class SGDConfig(OptimizerConfig):
    name: str = "sgd"
    momentum: float = 0.0  # >= 0
    weight_decay: float = 0.0  # >= 0


@dataclass
class AdamConfig(OptimizerConfig):
    name: str = "adam"
    weight_decay: float = 0.0  # >= 0


@dataclass
class GDConfig(OptimizerConfig):
    name: str = "gd"  # article 002's hand-written gradient descent: p -= lr * p.grad


OPTIMIZERS = {"sgd": SGDConfig, "adam": AdamConfig, "gd": GDConfig}


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
    """metrics.csv in the run dir, the file reports plot from."""


@dataclass
class LoggerConfig:
    """Where the logged rows go; summary.json is written whatever this says."""

    wandb: WandbConfig | None = None
    csv: CsvConfig | None = None


@dataclass
class TrainerConfig:
    max_steps: int = 500  # optimizer steps, >= 1
    # at most this many optimizer steps per Lightning batch (Lightning's per-batch work is paid
    # once per group; global_step still counts optimizer steps), >= 1; a group also ends on
    # every step that runs a check or hands rows over, so those never fall inside one
    inner_steps: int = 10
    log_every_n_steps: int = 1  # log a row every N steps, >= 1
    # hand the logged rows to metrics.csv and W&B every N steps (and at the end), >= 1
    flush_every_n_steps: int = 10
    mem_every: int = 100  # measure peak memory every N steps (0 = never)
    # write checkpoints/last.ckpt (atomically) every N steps and at the end (0 = never)
    ckpt_every_n_steps: int = 250
    progress: str = "auto"  # auto (a rich bar on a terminal, quiet under CI) | on | off


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    grad: GradConfig = field(default_factory=GradConfig)
    optimizer: OptimizerConfig = MISSING  # one of OPTIMIZERS' schemas
    data: DataConfig = field(default_factory=DataConfig)
    check: CheckConfig = field(default_factory=CheckConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda
    seed: int = 0
    dtype: str = "float32"  # float32 | float64
    threads: int = 1  # torch intra-op threads; these nets are far too small to gain from more
    run_name: str = MISSING
    ckpt_path: str | None = None  # resume from this checkpoint
    optimized_metric: str = "loss_final"  # summary field returned to sweepers (Optuna)


def register() -> None:
    """Register the schema with Hydra's ConfigStore: `train_schema`, and each optimizer's schema
    as `optimizer/<name>_schema` for conf/optimizer/<name>.yaml to extend."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    for name, schema in OPTIMIZERS.items():
        store.store(group="optimizer", name=f"{name}_schema", node=schema)


class ConfigError(ValueError):
    """A config value that is out of range; the message is one line naming the key."""


def typed(cfg: DictConfig | TrainConfig) -> TrainConfig:
    """The config as its dataclasses (a composed DictConfig is converted)."""
    return cfg if isinstance(cfg, TrainConfig) else OmegaConf.to_object(cfg)


def _allowed(key: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; allowed: {', '.join(allowed)}")


def _at_least(key: str, value: float | None, low: float, strict: bool = False) -> None:
    if value is None or (value <= low if strict else value < low):
        raise ConfigError(f"{key}={value!r} must be {'>' if strict else '>='} {low}")


def validate(cfg: DictConfig | TrainConfig) -> TrainConfig:
    """Check values a type alone cannot; raise ConfigError with a one-line message. Returns the
    typed config."""
    cfg = typed(cfg)
    m = cfg.model
    _allowed("model.name", m.name, MODELS)
    for key in ("d_in", "hidden", "d_out"):
        _at_least(f"model.{key}", getattr(m, key), 1)
    if cfg.grad.method not in METHODS and not any(c in cfg.grad.method for c in ".:"):
        raise ConfigError(
            f"grad.method={cfg.grad.method!r} is not allowed; allowed: {', '.join(METHODS)}, "
            "or an import path pkg.module.fn"
        )
    _validate_optimizer(cfg.optimizer)
    _allowed("device", cfg.device, DEVICES)
    _validate_data(cfg)
    _validate_check(cfg.check)
    if cfg.logger.wandb is not None:
        _allowed("logger.wandb.mode", cfg.logger.wandb.mode, WANDB_MODES)
    t = cfg.trainer
    for key in ("max_steps", "inner_steps", "log_every_n_steps", "flush_every_n_steps"):
        _at_least(f"trainer.{key}", getattr(t, key), 1)
    _at_least("trainer.mem_every", t.mem_every, 0)
    _at_least("trainer.ckpt_every_n_steps", t.ckpt_every_n_steps, 0)
    _allowed("trainer.progress", t.progress, ("auto", "on", "off"))
    _allowed("dtype", cfg.dtype, DTYPES)
    _at_least("threads", cfg.threads, 1)
    return cfg


def _validate_optimizer(o: OptimizerConfig) -> None:
    _allowed("optimizer.name", o.name, OPTIMIZERS)
    if type(o) is not OPTIMIZERS[o.name]:
        raise ConfigError(
            f"optimizer.name={o.name} needs the optimizer={o.name} choice (its own keys)"
        )
    _at_least("optimizer.lr", o.lr, 0, strict=True)
    for key in ("momentum", "weight_decay"):
        if hasattr(o, key):
            _at_least(f"optimizer.{key}", getattr(o, key), 0)


def _validate_data(cfg: TrainConfig) -> None:
    d = cfg.data
    _allowed("data.name", d.name, DATASETS)
    _at_least("data.n_samples", d.n_samples, 1)
    _at_least("data.batch_size", d.batch_size, 1)
    _at_least("data.noise", d.noise, 0)
    if d.name == "xor" and (cfg.model.d_in, cfg.model.d_out) != (2, 1):
        raise ConfigError(
            f"data=xor needs model.d_in=2 and model.d_out=1, got {cfg.model.d_in} and "
            f"{cfg.model.d_out}"
        )


def _validate_check(c: CheckConfig) -> None:
    _at_least("check.directional_every", c.directional_every, 0)
    _at_least("check.full_every", c.full_every, 0)
    _at_least("check.k", c.k, 1)
    for key in ("h", "tol", "full_max_gradients"):
        if getattr(c, key) is not None:
            _at_least(f"check.{key}", getattr(c, key), 0, strict=True)
