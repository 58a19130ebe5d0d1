"""The typed config (Hydra structured configs): every default of a run is here, once; the YAML
files under conf/ carry only what a choice changes. gradlab.app.validate checks what a type
cannot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from gradlab.check import CheckSettings as CheckConfig  # the checks' own settings are the schema


@dataclass
class ModelConfig:
    """What every model has; each option's schema adds its own keys, so a key the chosen model
    does not have is an error."""

    name: str = MISSING


@dataclass
class MLPConfig(ModelConfig):
    """two_layer_sigmoid | three_layer_relu."""

    d_in: int = MISSING  # input width
    hidden: int = MISSING  # hidden width (every hidden layer)
    d_out: int = MISSING  # output width


@dataclass
class CustomModelConfig(ModelConfig):
    """Your own nn.Module: target(**kwargs), the target's package on PYTHONPATH."""

    name: str = "custom"
    target: str = MISSING  # import path of a class or factory, e.g. mymodels.build
    kwargs: Any = None  # keyword arguments for the target, e.g. {width: 8} (None: none)


@dataclass
class DigitsCNNConfig(ModelConfig):
    """conv 3x3 -> ReLU -> 2x2 average pool -> linear, for data=digits data.layout=image."""

    name: str = "digits_cnn"
    channels: int = 8  # conv channels, >= 1


MODEL_SCHEMAS = {"mlp": MLPConfig, "custom": CustomModelConfig, "digits_cnn": DigitsCNNConfig}


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
    """What every data set has; each option's schema adds its own keys."""

    name: str = MISSING
    batch_size: int = 100  # >= 1; >= the training set's size means full batch


@dataclass
class RegressionConfig(DataConfig):
    """x ~ N(0, 1), y from a fixed teacher net: an MLP's own architecture, else a ReLU MLP
    d_in -> 16 -> 16 -> d_out (gradlab.data.synthetic)."""

    name: str = "regression"
    n_samples: int = 100  # >= 1
    noise: float = 0.0  # target noise std, >= 0
    d_in: int | None = None  # required for a model that is not an MLP (an MLP's are its own)
    d_out: int | None = None


@dataclass
class XorConfig(DataConfig):
    name: str = "xor"
    n_samples: int = 4  # the four points, repeated
    batch_size: int = 4


@dataclass
class DigitsConfig(DataConfig):
    """scikit-learn's bundled 8x8 digits, 10 classes, standardized."""

    name: str = "digits"
    batch_size: int = 64
    layout: str = "flat"  # flat (64 features, for an MLP) | image (1x8x8)
    val_fraction: float = 0.2  # the fixed validation split, in [0, 1)


@dataclass
class DiabetesConfig(DataConfig):
    """scikit-learn's bundled diabetes regression: 10 features, 1 target, standardized."""

    name: str = "diabetes"
    batch_size: int = 64
    val_fraction: float = 0.2


DATA_SCHEMAS = {
    "regression": RegressionConfig,
    "xor": XorConfig,
    "digits": DigitsConfig,
    "diabetes": DiabetesConfig,
}


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
    # validation loss (and accuracy) every N steps and after the last, on data with a split
    val_every_n_steps: int = 50  # (0 = only after the last)
    # write checkpoints/last.ckpt (atomically) every N steps and at the end (0 = never)
    ckpt_every_n_steps: int = 250
    progress: str = "auto"  # auto (a rich bar on a terminal, quiet under CI) | on | off


@dataclass
class TrainConfig:
    model: ModelConfig = MISSING  # one of MODEL_SCHEMAS
    grad: GradConfig = field(default_factory=GradConfig)
    optimizer: OptimizerConfig = MISSING  # one of OPTIMIZERS' schemas
    data: DataConfig = MISSING  # one of DATA_SCHEMAS
    # auto: cross_entropy for data whose targets are classes (digits), mse otherwise
    loss: str = "auto"  # auto | mse | cross_entropy (integer class labels)
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
    """Register the schema with Hydra's ConfigStore: `train_schema`, and each option's schema
    as `<group>/<name>_schema` for conf/<group>/<option>.yaml to extend."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    for group, schemas in (
        ("optimizer", OPTIMIZERS),
        ("model", MODEL_SCHEMAS),
        ("data", DATA_SCHEMAS),
    ):
        for name, schema in schemas.items():
            store.store(group=group, name=f"{name}_schema", node=schema)


class ConfigError(ValueError):
    """A config value that is out of range; the message is one line naming the key."""


def typed(cfg: DictConfig | TrainConfig) -> TrainConfig:
    """The config as its dataclasses (a composed DictConfig is converted)."""
    return cfg if isinstance(cfg, TrainConfig) else OmegaConf.to_object(cfg)
