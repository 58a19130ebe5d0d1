"""What a type cannot check: values in range, the choice's own schema, and whether the model,
the data and the loss fit together. Every problem is a ConfigError of one line naming the key."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from gradlab.app.config import (
    DATA_SCHEMAS,
    MODEL_SCHEMAS,
    OPTIMIZERS,
    CheckConfig,
    ConfigError,
    MLPConfig,
    OptimizerConfig,
    TrainConfig,
    typed,
)
from gradlab.data import LOSSES, loss_of
from gradlab.grads import METHODS
from gradlab.models import MLPS, MODELS

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "float64")
WANDB_MODES = ("auto", "offline", "online", "disabled")
# the MLPs' (d_in, d_out) each data set needs, by loss; regression: the model's own
MLP_SHAPES = {
    "xor": {"mse": (2, 1), "cross_entropy": (2, 2)},
    "digits": {"mse": (64, 10), "cross_entropy": (64, 10)},
    "diabetes": {"mse": (10, 1)},
}


def _allowed(key: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; allowed: {', '.join(allowed)}")


def _at_least(key: str, value: float | None, low: float, strict: bool = False) -> None:
    if value is None or (value <= low if strict else value < low):
        raise ConfigError(f"{key}={value!r} must be {'>' if strict else '>='} {low}")


def _own_schema(group: str, name: str, value, schema) -> None:
    if type(value) is not schema:
        raise ConfigError(f"{group}.name={name} needs the {group}={name} choice (its own keys)")


def validate(cfg: DictConfig | TrainConfig) -> TrainConfig:
    """Check values a type alone cannot; raise ConfigError with a one-line message. Returns the
    typed config."""
    cfg = typed(cfg)
    _validate_model(cfg)
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
    for key in ("mem_every", "val_every_n_steps", "ckpt_every_n_steps"):
        _at_least(f"trainer.{key}", getattr(t, key), 0)
    _allowed("trainer.progress", t.progress, ("auto", "on", "off"))
    _allowed("dtype", cfg.dtype, DTYPES)
    _at_least("threads", cfg.threads, 1)
    return cfg


def _validate_model(cfg: TrainConfig) -> None:
    m = cfg.model
    _allowed("model.name", m.name, MODELS)
    schema = MLPConfig if m.name in MLPS else MODEL_SCHEMAS[m.name]
    _own_schema("model", m.name, m, schema)
    if m.name in MLPS:
        for key in ("d_in", "hidden", "d_out"):
            _at_least(f"model.{key}", getattr(m, key), 1)
    elif m.name == "custom" and not m.target.strip():
        raise ConfigError("model.target must be the import path of a class or factory")
    elif m.name == "digits_cnn":
        _at_least("model.channels", m.channels, 1)


def _validate_optimizer(o: OptimizerConfig) -> None:
    _allowed("optimizer.name", o.name, OPTIMIZERS)
    _own_schema("optimizer", o.name, o, OPTIMIZERS[o.name])
    _at_least("optimizer.lr", o.lr, 0, strict=True)
    for key in ("momentum", "weight_decay"):
        if hasattr(o, key):
            _at_least(f"optimizer.{key}", getattr(o, key), 0)


def _validate_data(cfg: TrainConfig) -> None:
    d, m = cfg.data, cfg.model
    _allowed("data.name", d.name, DATA_SCHEMAS)
    _own_schema("data", d.name, d, DATA_SCHEMAS[d.name])
    _at_least("data.batch_size", d.batch_size, 1)
    for key in ("n_samples", "d_in", "d_out"):
        if getattr(d, key, None) is not None:
            _at_least(f"data.{key}", getattr(d, key), 1)
    if hasattr(d, "noise"):
        _at_least("data.noise", d.noise, 0)
    if hasattr(d, "val_fraction") and not 0.0 <= d.val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction={d.val_fraction} must be in [0, 1)")
    if hasattr(d, "layout"):
        _allowed("data.layout", d.layout, ("flat", "image"))
    _allowed("loss", cfg.loss, LOSSES)
    loss = loss_of(d.name, cfg.loss)
    if d.name == "diabetes" and loss != "mse":
        raise ConfigError("loss=cross_entropy needs class labels; data=diabetes has a real target")
    if m.name in MLPS:
        _mlp_fits(cfg, loss)
    elif m.name == "digits_cnn" and (d.name, getattr(d, "layout", None)) != ("digits", "image"):
        raise ConfigError("model=digits_cnn needs data=digits data.layout=image")
    elif d.name == "regression" and (d.d_in is None or d.d_out is None):
        raise ConfigError(f"data=regression for model={m.name} needs data.d_in and data.d_out")
    if d.name == "regression" and loss == "cross_entropy":
        classes = m.d_out if m.name in MLPS else d.d_out
        if classes is not None and classes < 2:
            raise ConfigError(f"loss=cross_entropy needs d_out >= 2 classes, got {classes}")


def _mlp_fits(cfg: TrainConfig, loss: str) -> None:
    d, m = cfg.data, cfg.model
    if getattr(d, "layout", "flat") != "flat":
        raise ConfigError(f"model={m.name} takes flat features: set data.layout=flat")
    if d.name == "regression":
        for key in ("d_in", "d_out"):
            if getattr(d, key) is not None and getattr(d, key) != getattr(m, key):
                raise ConfigError(
                    f"data.{key}={getattr(d, key)} does not fit model.{key}={getattr(m, key)}"
                )
        return
    want = MLP_SHAPES[d.name][loss]
    if (m.d_in, m.d_out) != want:
        raise ConfigError(
            f"data={d.name} (loss={loss}) needs model.d_in={want[0]} and model.d_out={want[1]}, "
            f"got {m.d_in} and {m.d_out}"
        )


def _validate_check(c: CheckConfig) -> None:
    _at_least("check.directional_every", c.directional_every, 0)
    _at_least("check.full_every", c.full_every, 0)
    _at_least("check.k", c.k, 1)
    for key in ("h", "tol", "full_max_gradients"):
        if getattr(c, key) is not None:
            _at_least(f"check.{key}", getattr(c, key), 0, strict=True)
