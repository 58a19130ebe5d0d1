"""A user's own nn.Module, the bundled data sets, the loss choice and the validation figures:
what a run on them does, and the one-line refusals of what cannot run (exit 2, nothing
written)."""

from __future__ import annotations

import pytest
import torch

from apphelpers import CONF, ROOT, fast_first, run_cli, summary
from gradlab.app.cli import precheck
from gradlab.data import make_dataset
from gradlab.grads import for_model
from gradlab.models import three_layer_relu
from gradlab.reports.write import write_report
from usermodels import build

CUSTOM = ["model=custom", "grad=autograd", "data.d_in=4", "data.d_out=1"]


@pytest.mark.parametrize(
    "overrides,message",
    fast_first(
        [
            (["model.target=usermodels.nope"], "model.target=usermodels.nope: usermodels has no"),
            (["model.target=no_such_pkg.build"], "cannot import no_such_pkg"),
            (["model.target=usermodels.NOT_CALLABLE"], "not callable"),
            (["model.target=usermodels.not_a_module"], "not a torch.nn.Module"),
            (["model.target=usermodels.NoParameters"], "a module without parameters"),
            (["model.target=usermodels.raises"], "raised RuntimeError: the user's factory failed"),
            (
                ["model.target=usermodels.build", "model.kwargs={depth: 2}"],
                "model.kwargs=.*rejects",
            ),
            (["model.target=usermodels.build", "data.d_in=5"], "a trial forward of x \\(2, 5\\)"),
            (["model.target=usermodels.build", "data.d_out=3"], "gives output \\(2, 1\\)"),
            (["model.target=usermodels.build", "grad=manual"], "grad.method=manual is written for"),
            (["model.target=usermodels.build", "grad=tape"], "cannot handle the model Sequential"),
        ],
        n=3,
    ),
)
def test_a_model_that_cannot_train_is_refused_in_one_line(overrides, message, capsys):
    with pytest.raises(SystemExit) as info:
        precheck([*CUSTOM, *overrides], CONF)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert __import__("re").search(message, err), err


@pytest.mark.parametrize(
    "overrides,message",
    fast_first(
        [
            (["model=custom", "model.target=usermodels.build"], "needs data.d_in and data.d_out"),
            (["data=digits"], "data=digits \\(loss=cross_entropy\\) needs model.d_in=64"),
            (["data=digits", "data.layout=image", "model.d_in=64", "model.d_out=10"], "flat"),
            (["data=diabetes", "loss=cross_entropy"], "data=diabetes has a real target"),
            (["data=xor", "model=two_layer_sigmoid", "loss=cross_entropy"], "model.d_out=2"),
            (["data=regression", "loss=cross_entropy"], "d_out >= 2"),
            (["data=digits", "data.val_fraction=1.0"], "data.val_fraction=1.0 must be in"),
            (["loss=hinge"], "loss='hinge' is not allowed"),
            (["data=xor", "data.noise=0.1"], "Key 'noise' not in 'XorConfig'"),
        ],
        n=3,
    ),
)
def test_data_and_loss_that_do_not_fit_are_refused_in_one_line(overrides, message, capsys):
    with pytest.raises(SystemExit):
        precheck(overrides, CONF)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and __import__("re").search(message, err), err


@pytest.mark.slow
def test_refused_on_the_command_line_writes_nothing(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "tests")}
    args = [*CUSTOM, "model.target=usermodels.not_a_module", "logger=csv"]
    result = run_cli(*args, cwd=tmp_path, env=env)
    assert result.returncode == 2 and result.stderr.startswith("error: model.target="), result
    assert list(tmp_path.iterdir()) == []


def test_the_method_for_a_model_is_the_one_written_for_it():
    assert for_model("autograd", build()) is for_model("autograd", three_layer_relu())
    with pytest.raises(ValueError, match="grad.method=fused is written for MLP only"):
        for_model("fused", build())


@pytest.mark.slow
def test_digits_is_standardized_split_the_same_way_for_every_seed():
    a = make_dataset("digits", seed=0, dtype=torch.float64)
    b = make_dataset("digits", seed=5, dtype=torch.float64, layout="image")
    assert a.x.shape == (1438, 64) and a.x_val.shape == (359, 64) and a.classes == 10
    assert b.x.shape == (1438, 1, 8, 8) and torch.equal(a.x.view(-1, 1, 8, 8), b.x)
    assert torch.equal(a.y, b.y) and a.y.dtype == torch.int64
    kept = a.x.std(0) > 0  # the constant pixels stay 0
    torch.testing.assert_close(a.x.mean(0), torch.zeros(64, dtype=torch.float64))
    torch.testing.assert_close(a.x.std(0)[kept], torch.ones(int(kept.sum()), dtype=torch.float64))
    onehot = make_dataset("digits", loss="mse", dtype=torch.float64)
    assert onehot.y.shape == (1438, 10) and torch.equal(onehot.y.argmax(1), a.y)


def test_diabetes_xor_and_regression_for_each_loss():
    d = make_dataset("diabetes")
    assert d.x.shape == (354, 10) and d.y.shape == (354, 1) and d.x_val.shape == (88, 10)
    xor = make_dataset("xor", loss="cross_entropy", n_samples=8)
    assert xor.y.tolist() == [0, 1, 1, 0, 0, 1, 1, 0] and xor.classes == 2
    labels = make_dataset("regression", loss="cross_entropy", model=None, d_in=3, d_out=4)
    assert labels.x.shape == (100, 3) and labels.y.dtype == torch.int64 and labels.classes == 4
    assert len(set(labels.y.tolist())) > 1  # the teacher's argmax is not one class
    mlp = three_layer_relu(d_in=3, d_out=2)
    with pytest.raises(ValueError, match="data.d_in=4 does not fit the MLP's d_in=3"):
        make_dataset("regression", model=mlp, d_in=4)


@pytest.mark.slow
def test_a_custom_model_on_digits_trains_checks_and_reports_validation(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "tests")}
    args = ["model=custom", "model.target=usermodels.build", "model.kwargs={d_in: 64, d_out: 10}"]
    args += ["data=digits", "grad=autograd", "trainer.max_steps=40", "trainer.val_every_n_steps=20"]
    args += ["check.directional_every=10", "logger=csv", f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_cli(*args, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    s = summary(tmp_path / "run")
    assert (s.model, s.model_desc, s.params) == ("custom", "Sequential (usermodels.build)", 610)
    assert s.loss == "cross_entropy" and s.grad_check == "pass" and s.grad_checks >= 4
    assert s.val_acc_final is not None and 0.0 < s.val_acc_final <= 1.0
    assert "plain differences" in s.grad_check_basis
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    val = [r.split(",")[header.index("val/acc")] for r in rows[1:]]
    assert [i for i, v in enumerate(val) if v] == [0, 20, 39]  # every 20 steps, after the last
    written = {p.name for p in write_report([tmp_path / "run"], tmp_path / "report")}
    assert {"val_loss.png", "val_acc.png"} <= written
    table = (tmp_path / "report" / "report.md").read_text()
    assert "| val loss | val acc | params |" in table and "| 610 |" in table


@pytest.mark.slow
def test_a_users_wrong_function_in_a_model_fails_the_run_through_autograd(tmp_path):
    env = {"PYTHONPATH": str(ROOT / "tests")}
    args = [*CUSTOM, "model=custom", "model.target=usermodels.SquareNet"]
    args += ["model.kwargs={error: 0.001}", "trainer.max_steps=5", "logger=none"]
    result = run_cli(*args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=env)
    s = summary(tmp_path / "run")
    assert s.grad_check == "fail", result.stderr
    assert s.grad_check_first_fail["step"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("grad", ["manual", "autograd"])
def test_the_digits_cnn_experiment_reaches_95_percent(grad, tmp_path):
    args = ["experiment=digits_cnn", f"grad={grad}", "logger=csv", f"hydra.run.dir={tmp_path}/r"]
    result = run_cli(*args, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    s = summary(tmp_path / "r")
    assert (s.model_desc, s.params, s.loss) == ("DigitsCNN", 1370, "cross_entropy")
    assert s.grad_check == "pass" and s.grad_precision == "ok"
    assert s.val_acc_final >= 0.95, s.val_acc_final


def test_the_digits_cnn_takes_its_own_methods_and_refuses_the_mlp_ones(capsys):
    precheck(["experiment=digits_cnn", "grad=function"], CONF)  # written for it: passes
    with pytest.raises(SystemExit):
        precheck(["experiment=digits_cnn", "grad=fused"], CONF)
    assert "cannot handle the model DigitsCNN" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        precheck(["experiment=digits_cnn", "data.layout=flat"], CONF)
    assert "model=digits_cnn needs data=digits data.layout=image" in capsys.readouterr().err
