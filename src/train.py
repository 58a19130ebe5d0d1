"""gradlab's entry point: compose the config with Hydra, train one job, print its summary.

python src/train.py                                   # the default: three_layer_relu, manual, sgd
python src/train.py grad=manual device=cuda
python src/train.py -m grad=autograd,manual,function model=two_layer_sigmoid,three_layer_relu
"""

import sys
from pathlib import Path

import hydra

from gradlab.app import cli

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
cli.setup()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg) -> float:
    return cli.run(cfg)


if __name__ == "__main__":
    cli.precheck(sys.argv[1:], CONF_DIR)
    main()
