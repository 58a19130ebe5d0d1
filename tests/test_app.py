"""The training app: every choice composes, each model x method trains, W&B offline, determinism."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest
import torch

from apphelpers import CONF, compose_cfg, fast_first, run_cli, summary, wandb_history
from gradlab.app.config import ConfigError
from gradlab.app.run import train
from gradlab.app.validate import validate
from gradlab.data import make_dataset
from gradlab.models import MLPS, three_layer_relu
from gradlab.training.batches import StepBatches
from gradlab.training.record import read_metrics, read_summary

MODELS = sorted(MLPS)  # the other models need their own data (tests/test_models.py)
GRADS = sorted(p.stem for p in (CONF / "grad").glob("*.yaml") if p.stem != "custom")
OPTIMIZERS = sorted(p.stem for p in (CONF / "optimizer").glob("*.yaml"))


def _each_choice_once() -> list[tuple[str, str, str]]:
    """Every model, grad and optimizer choice at least once, in as few combinations."""
    n = max(len(MODELS), len(GRADS), len(OPTIMIZERS))
    return [
        (MODELS[i % len(MODELS)], GRADS[i % len(GRADS)], OPTIMIZERS[i % len(OPTIMIZERS)])
        for i in range(n)
    ]


@pytest.mark.parametrize("model,grad,optimizer", _each_choice_once())
def test_each_model_grad_and_optimizer_choice_composes(model, grad, optimizer):
    cfg = validate(compose_cfg(f"model={model}", f"grad={grad}", f"optimizer={optimizer}"))
    assert (cfg.model.name, cfg.grad.name, cfg.optimizer.name) == (model, grad, optimizer)


@pytest.mark.slow
@pytest.mark.parametrize("model,grad,optimizer", itertools.product(MODELS, GRADS, OPTIMIZERS))
def test_every_combination_composes_and_validates(model, grad, optimizer):
    cfg = compose_cfg(f"model={model}", f"grad={grad}", f"optimizer={optimizer}")
    validate(cfg)
    assert (cfg.model.name, cfg.grad.name, cfg.optimizer.name) == (model, grad, optimizer)
    assert cfg.run_name == f"{model}-{grad}-{optimizer}-s0"


@pytest.mark.parametrize("group", fast_first(["data", "check", "logger", "experiment"], n=1))
def test_every_choice_of_other_groups_composes(group):
    choices = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    assert choices
    fits = {  # a data set's model
        "xor": ["model=two_layer_sigmoid"],
        "digits": ["model.d_in=64", "model.d_out=10"],
        "diabetes": ["model.d_in=10"],
    }
    for choice in choices:
        validate(compose_cfg(f"{group}={choice}", *fits.get(choice, [])))


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda"])
def test_every_device_composes(device):
    assert validate(compose_cfg(f"device={device}")).device == device


@pytest.mark.parametrize(
    "override,message",
    fast_first(
        [
            ("optimizer.lr=-1", "optimizer.lr"),
            ("model.hidden=0", "model.hidden"),
            ("grad.method=nope", "grad.method"),
            ("dtype=float16", "dtype"),
            ("data.batch_size=0", "data.batch_size"),
            ("check.k=0", "check.k"),
            ("trainer.inner_steps=0", "trainer.inner_steps"),
            ("trainer.flush_every_n_steps=0", "trainer.flush_every_n_steps"),
        ],
        n=3,
    ),
)
def test_invalid_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        validate(compose_cfg(override))
    assert "\n" not in str(info.value)


def _train(tmp_path: Path, *overrides: str) -> tuple[dict, list[dict]]:
    cfg = compose_cfg("logger=csv", "device=cpu", *overrides)
    result = train(cfg, tmp_path)
    return result, read_metrics(tmp_path / "metrics.csv")


@pytest.mark.slow
@pytest.mark.parametrize("model,grad", itertools.product(MODELS, GRADS))
def test_smoke_run_per_model_and_method(tmp_path, model, grad):
    # numerical in float32 is differences in float32, a precision finding by design (the checks
    # say so): its smoke run trains in float64, where it is as exact as the others.
    dtype = "float64" if grad == "numerical" else "float32"
    result, rows = _train(
        tmp_path,
        f"model={model}",
        f"grad={grad}",
        f"dtype={dtype}",
        "trainer.max_steps=30",
        "optimizer.lr=0.1",
        "check.directional_every=1",  # every step checked (the default checks one in twenty)
        "check.full_every=10",
        "trainer.mem_every=10",
    )
    assert result.status == "completed", result.reason
    assert result.grad_check == "pass", result.get("grad_check_first_fail")
    assert result.loss_final < result.loss_initial
    assert result.steps == 30 and len(rows) == 30
    with (tmp_path / "metrics.csv").open() as f:
        header = next(csv.reader(f))
    for col in (
        "train/loss",
        "grad/rel_err",
        "grad/cos_sim",
        "grad/kinks",
        "time/grad_ms",
        "time/step_ms",
        "mem/peak_mb",
        "grad/rel_err/layer1.weight",
    ):
        assert col in header
    assert all(r["grad/rel_err"] < 1e-3 for r in rows)
    assert result.peak_mem_mb > 0 and result.grad_ms_median > 0
    saved = read_summary(tmp_path / "summary.json")  # the file itself holds every key
    for key in (
        "model",
        "grad",
        "optimizer",
        "device",
        "seed",
        "steps",
        "loss_initial",
        "loss_final",
        "grad_rel_err_max",
        "grad_check",
        "grad_ms_median",
        "step_ms_median",
        "peak_mem_mb",
        "status",
        "wandb_dir",
    ):
        assert key in saved


@pytest.mark.parametrize("preset", ["default", "every_step"])
def test_check_cadence(tmp_path, preset):
    # default: directional every 20 steps (global directions: no per-tensor figures unless it
    # fails), full every 200; every_step: per-tensor directional at every step
    result, rows = _train(
        tmp_path, f"check={preset}", "trainer.max_steps=25", "trainer.mem_every=0"
    )
    assert result.status == "completed" and result.grad_check == "pass"
    checked = [step for step, r in enumerate(rows) if "grad/rel_err" in r]
    per_tensor = [step for step, r in enumerate(rows) if "grad/rel_err/layer2.weight" in r]
    if preset == "default":
        assert checked == [0, 20] and per_tensor == [0]  # step 0: the full check too
    else:
        assert checked == per_tensor == list(range(25))
    assert all(rows[step]["grad/rel_err"] < 1e-2 for step in checked)


def test_step_groups_end_on_multiples_of_inner_steps():
    model = three_layer_relu()
    data = make_dataset("regression", model, n_samples=10, batch_size=4)

    def groups(start: int, k: int, n: int) -> list[list[int]]:
        batches = itertools.islice(StepBatches(data, start, k), n)
        return [[step for step, _, _ in group] for group in batches]

    assert groups(0, 10, 3) == [[0], list(range(1, 11)), list(range(11, 21))]
    assert groups(14, 10, 2) == [list(range(14, 21)), list(range(21, 31))]
    assert groups(5, 1, 3) == [[5], [6], [7]]
    x, y = data.batch(7)  # each step keeps its own data batch
    step, gx, gy = next(iter(StepBatches(data, 7, 10)))[0]
    assert step == 7 and torch.equal(gx, x) and torch.equal(gy, y)


@pytest.mark.slow
def test_steps_per_lightning_batch_do_not_change_the_run(tmp_path):
    # trainer.inner_steps groups optimizer steps into one Lightning batch; 25 steps end inside
    # a group of 7 (and of the default 10): the same rows, the same losses
    curves = {}
    for inner in (1, 7, 10):
        result, rows = _train(
            tmp_path / str(inner), f"trainer.inner_steps={inner}", "trainer.max_steps=25"
        )
        assert result.status == "completed" and result.steps == 25
        assert [r["step"] for r in rows] == list(range(25))
        curves[inner] = [r["train/loss"] for r in rows]
    assert curves[1] == curves[7] == curves[10]


@pytest.mark.slow
def test_same_seed_same_curves_across_methods(tmp_path):
    curves = {}
    for grad in ("autograd", "manual", "function"):
        result, rows = _train(
            tmp_path / grad,
            f"grad={grad}",
            "dtype=float64",
            "trainer.max_steps=200",
            "check=none",
            "trainer.mem_every=0",
            "optimizer.lr=0.05",
        )
        assert result.status == "completed"
        curves[grad] = torch.tensor([r["train/loss"] for r in rows], dtype=torch.float64)
    assert len(curves["autograd"]) == 200
    assert curves["autograd"][-1] < curves["autograd"][0]
    for grad in ("manual", "function"):  # float64 exact methods agree to rounding
        torch.testing.assert_close(curves[grad], curves["autograd"], rtol=1e-10, atol=0)


def test_optimizers_all_train(tmp_path):
    for opt in OPTIMIZERS:
        result, _ = _train(tmp_path / opt, f"optimizer={opt}", "trainer.max_steps=20", "check=none")
        assert result.status == "completed" and result.loss_final < result.loss_initial


def test_acceptance_command_two_layer_sigmoid(tmp_path):
    out = tmp_path / "X"
    proc = run_cli(
        "grad=manual",
        "model=two_layer_sigmoid",
        "trainer.max_steps=300",
        "logger=csv",
        f"hydra.run.dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    s = summary(out)
    assert (s.status, s.grad_check) == ("completed", "pass")
    assert s.loss_final < s.loss_initial
    assert "grad/rel_err" in (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "gradlab run" in proc.stdout  # the summary table


@pytest.mark.slow
def test_wandb_offline_run_holds_history(tmp_path):
    out = tmp_path / "W"
    proc = run_cli("trainer.max_steps=25", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = summary(out)
    run_dir = Path(s.wandb_dir)
    assert run_dir.name.startswith("offline-run-") and run_dir.parent == out / "wandb"
    assert list(run_dir.glob("*.wandb")), "offline run has no history file"
    assert s.wandb_sync == f"wandb sync {run_dir}"
    assert "wandb sync" in proc.stdout
    history = wandb_history(next(run_dir.glob("*.wandb")))
    losses = [row["train/loss"] for row in history if "train/loss" in row]
    assert len(losses) == 25


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_manual_run(tmp_path):
    result, rows = _train(tmp_path, "grad=manual", "device=cuda", "trainer.max_steps=50")
    assert result.status == "completed" and result.device.startswith("cuda")
    assert result.grad_check == "pass" and result.peak_mem_mb > 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("grad", GRADS)
def test_cuda_methods_match_autograd(grad):
    from gradlab.grads import resolve
    from gradlab.models import build_model

    for name in MODELS:
        model = build_model(name, dtype=torch.float64, device="cuda")
        x = torch.randn(17, model.sizes[0], dtype=torch.float64, device="cuda")
        y = torch.randn(17, model.sizes[-1], dtype=torch.float64, device="cuda")
        _, ref = resolve("autograd")(model, x, y)
        _, got = resolve(grad)(model, x, y)
        rtol, atol = (1e-6, 1e-8) if grad == "numerical" else (1e-10, 1e-12)  # FD vs exact
        for key in ref:
            torch.testing.assert_close(got[key], ref[key], rtol=rtol, atol=atol)


@pytest.mark.slow
def test_presets_leave_the_logger_choice_alone():
    for preset in sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")):
        cfg = compose_cfg(f"experiment={preset}", "logger=csv")
        assert cfg.logger.get("wandb") is None, preset
