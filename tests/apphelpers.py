"""Shared helpers for the app tests: compose configs in-process and run the real CLI."""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradlab.app.cli import compose
from gradlab.training.record import RunSummary, read_summary

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
TRAIN = ROOT / "src" / "train.py"


def fast_first(cases: list, n: int = 2) -> list:
    """Parametrize cases with the first n in the fast suite and the rest marked slow: `make
    test` tries each kind of case, `make test-full` all of them."""
    slow = pytest.mark.slow
    return [
        c
        if i < n
        else pytest.param(*c, marks=slow)
        if isinstance(c, tuple)
        else pytest.param(c, marks=slow)
        for i, c in enumerate(cases)
    ]


def compose_cfg(*overrides: str):
    """The composed train config (no run), as `python src/train.py OVERRIDES` would see it: a
    copy of the one composition per override list (Hydra takes a fair fraction of a second)."""
    return copy.deepcopy(_composed(overrides))


@functools.cache
def _composed(overrides: tuple[str, ...]):
    return compose(CONF, list(overrides))


def run_cli(*args: str, cwd: Path, timeout: float = 120, env: dict | None = None):
    """Run `python src/train.py ARGS` in cwd (so outputs/ and multirun/ land there); env values
    of None unset a variable."""
    full_env = {**os.environ, "WANDB_MODE": "offline", "CI": "true"}
    full_env.pop("WANDB_API_KEY", None)
    full_env.update(env or {})
    full_env = {k: v for k, v in full_env.items() if v is not None}  # None: unset it
    return subprocess.run(
        [sys.executable, str(TRAIN), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def summary(run_dir: Path) -> RunSummary:
    """The run's summary.json, as its schema."""
    return RunSummary.from_dict(read_summary(run_dir / "summary.json"))


def wandb_records(path: Path):
    """Protobuf Records of an offline .wandb file (a LevelDB-style log: a 7-byte header, then
    32 KiB blocks of [crc32 u32][length u16][type u8][data] chunks)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    raw = path.read_bytes()
    assert raw[:4] == b":W&B", "not a W&B transaction log"
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:  # block trailer padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        data = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending = data if kind in (1, 2) else pending + data
        if kind in (1, 4):  # FULL or LAST: one whole record
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(pending)
            yield rec


def wandb_history(path: Path) -> list[dict]:
    """History rows (metric name -> value) of an offline .wandb file."""
    return [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
        for rec in wandb_records(path)
        if rec.WhichOneof("record_type") == "history"
    ]
