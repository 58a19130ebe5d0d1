"""Framework overhead benchmark (issue 7): `python scripts/bench.py --out FILE [--device cuda]`.

The logic lives in gradlab.app.perf; this prints the table and writes the JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gradlab.app.perf import format_table, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--no-sweeps", action="store_true", help="skip the two 12-job sweeps")
    args = parser.parse_args()
    result = measure(device=args.device, sweeps=not args.no_sweeps)
    print(format_table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
