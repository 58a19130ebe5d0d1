"""Catch bad command lines before Hydra and Lightning start: one line naming the key, exit 2.

Hydra reports an unknown group choice or a value of the wrong type in several lines with a hint
about HYDRA_FULL_ERROR; a user running an experiment wants one line saying what is allowed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gradlab.app.config import ConfigError, validate

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
    multirun = any(a in ("-m", "--multirun") for a in argv)
    overrides = [a for a in argv if not a.startswith("-")]
    try:
        check_group_choices(overrides, conf_dir)
        if multirun:
            return
        from hydra import compose, initialize_config_dir

        from gradlab.app.config import register

        register()
        plain = [a for a in overrides if not a.lstrip("+~").startswith("hydra")]
        with initialize_config_dir(str(conf_dir), version_base="1.3"):
            try:
                cfg = compose("train", overrides=plain)
            except Exception as e:  # Hydra/OmegaConf: unknown key, wrong type, missing value
                raise ConfigError(_one_line(e)) from None
        validate(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _one_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), None)
    msg = lines[0] if lines else type(e).__name__
    if len(lines) > 1 and lines[0].startswith("Error merging override"):
        msg = f"{lines[0].removeprefix('Error merging override').strip()}: {lines[1]}"
    elif key and key not in msg:
        msg = f"{key}: {msg}"
    return msg
