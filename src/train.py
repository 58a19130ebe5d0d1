"""gradlab's entry point: compose the config with Hydra, train one job, print its summary.

python src/train.py                                   # the default: three_layer_relu, manual, sgd
python src/train.py grad=manual device=cuda
python src/train.py -m grad=autograd,manual,function model=two_layer_sigmoid,three_layer_relu
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gradlab.app.cli import precheck
from gradlab.app.config import register

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

# use_cache: resolved once in the launching process; Hydra hands that cache to every job, so
# jobs in joblib/submitit/SLURM workers share the sweep dir instead of each using its own pid.
OmegaConf.register_new_resolver("gradlab_pid", lambda: os.getpid(), replace=True, use_cache=True)
register()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from gradlab.app.console import print_summary
    from gradlab.app.run import RunFailed, optimized_value, train

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    group = Path(hc.sweep.dir).name if multirun else None
    try:
        summary = train(cfg, Path(hc.runtime.output_dir), group=group)
    except RunFailed as e:  # the output dir already holds a run: touch nothing
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if multirun:  # the sweep callback prints the whole table at the end
        print(
            f"job {summary['run_name']}: {summary['status']} {summary.get('reason') or ''}".rstrip()
        )
    elif summary.get("steps"):  # a run that failed before its first step gets one line only
        print_summary(summary)
    if not multirun and summary["status"] in ("failed", "interrupted"):
        print(f"error: run {summary['status']}: {summary['reason']}", file=sys.stderr)
        raise SystemExit(1 if summary["status"] == "failed" else 130)
    direction = OmegaConf.select(hc, "sweeper.direction", default="minimize")
    return optimized_value(summary, cfg.optimized_metric, str(direction))


if __name__ == "__main__":
    precheck(sys.argv[1:], CONF_DIR)
    main()
