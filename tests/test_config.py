"""The config: every default in the schema once, presets that win over train.yaml, option
files that carry only what they change, and keys an option does not have refused."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from apphelpers import CONF, compose_cfg, fast_first
from gradlab.app import cli
from gradlab.app.config import OPTIMIZERS, ConfigError, TrainConfig
from gradlab.app.validate import validate


def _values(node, prefix=()):
    """(key path, value) of every leaf a YAML file sets, its defaults list left out."""
    for key, value in node.items():
        if key == "defaults":
            continue
        if isinstance(value, dict):
            yield from _values(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _get(cfg, path):
    for key in path:
        cfg = cfg[key]
    return cfg


def _overrides(node) -> list[tuple[str, str]]:
    """(group, option) of the `override /group: option` entries of a defaults list."""
    out = []
    for entry in node.get("defaults", []):
        if isinstance(entry, dict):
            for key, option in entry.items():
                if key.startswith("override /"):
                    out.append((key.removeprefix("override /"), option))
    return out


PRESETS = sorted((CONF / "experiment").glob("*.yaml")) + sorted(
    (CONF / "hparams_search").glob("*.yaml")
)


@pytest.mark.parametrize("path", fast_first(PRESETS), ids=lambda p: f"{p.parent.name}={p.stem}")
def test_every_value_a_preset_sets_is_what_the_run_gets(path):
    node = OmegaConf.to_container(OmegaConf.load(path))
    cfg = cli.compose(CONF, [f"{path.parent.name}={path.stem}"], with_hydra=True)
    own = dict(_values(node))
    for path, value in own.items():
        got = _get(cfg, path)
        assert getattr(got, "name", got) == value, path  # an enum (hydra.mode) by its name
    for group, option in _overrides(node):  # the options it chooses, less what it sets itself
        if group.startswith("hydra/"):
            continue
        alone = dict(_values(OmegaConf.to_container(compose_cfg(f"{group}={option}")[group])))
        for path, value in alone.items():
            if (group, *path) not in own:
                assert _get(cfg[group], path) == value, (group, *path)


def test_the_schema_is_every_default():
    # the default run is the schema's values plus what each chosen option file sets
    cfg = validate(compose_cfg())
    schema = TrainConfig()
    assert cfg.trainer == schema.trainer and cfg.check == schema.check and cfg.data.noise == 0
    assert (cfg.seed, cfg.dtype, cfg.threads, cfg.device) == (0, "float32", 1, "auto")


@pytest.mark.parametrize("group", ["check", "data", "grad", "optimizer", "logger"])
def test_option_files_carry_only_what_they_change(group):
    defaults = {
        "check": dataclasses.asdict(TrainConfig().check),
        "data": {"n_samples": 100, "batch_size": 100, "noise": 0.0},
        "grad": {"compile": False},
    }.get(group, {})
    for path in sorted((CONF / group).glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path))
        for key, value in _values(node):
            key = ".".join(key)
            assert defaults.get(key, object()) != value, f"{path.name} repeats {key}={value}"


@pytest.mark.parametrize(
    "optimizer,key",
    [("adam", "momentum"), ("gd", "weight_decay"), ("gd", "momentum"), ("adam", "nesterov")],
)
def test_a_key_the_optimizer_does_not_have_is_refused(optimizer, key, capsys):
    with pytest.raises(SystemExit) as info:
        cli.precheck([f"optimizer={optimizer}", f"optimizer.{key}=0.9"], CONF)
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and f"optimizer.{key}" in line, line


def test_each_optimizer_has_its_own_schema():
    for name, schema in OPTIMIZERS.items():
        cfg = validate(compose_cfg(f"optimizer={name}"))
        assert type(cfg.optimizer) is schema and cfg.optimizer.name == name
    with pytest.raises(ConfigError, match="optimizer.name=adam needs the optimizer=adam choice"):
        validate(compose_cfg("optimizer.name=adam"))


def test_logger_choices_differ_in_what_they_write():
    loggers = {c: compose_cfg(f"logger={c}").logger for c in ("default", "wandb", "csv", "none")}
    assert loggers["default"].wandb is not None and loggers["default"].csv is not None
    assert loggers["wandb"].csv is None and loggers["csv"].wandb is None
    assert loggers["none"].wandb is None and loggers["none"].csv is None
