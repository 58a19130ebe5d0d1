"""Time every gradient method and the gradient check; print a table and the target ratios."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from gradlab import bench
from gradlab.grads import METHODS
from gradlab.models import MODELS


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    parser.add_argument("--quick", action="store_true", help="short runs (smoke tests)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument(
        "--methods",
        nargs="+",
        default=[*METHODS, *bench.CHECKS],
        help=f"gradient methods (or import paths) and checks: {', '.join(bench.CHECKS)}",
    )
    parser.add_argument("--dtypes", nargs="+", default=list(bench.DTYPES), choices=bench.DTYPES)
    parser.add_argument("--batch", type=int, default=bench.BATCH)
    parser.add_argument("--rounds", type=int, default=10, help="turns per case (median over all)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1, as training: on 2 shared cores a second MKL "
        "thread that cannot get a core stalls these tiny matmuls by milliseconds)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = bench.run(args.models, args.methods, args.dtypes, args.batch, args.quick, args.rounds)
    result = bench.report(rows)
    print(bench.format_table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
