"""Compare runs: the measured article-004 table (report.md, .csv), PNG plots, one HTML page.

python scripts/report.py multirun/2025-01-01/12-00-00-123        # a sweep: every job in it
python scripts/report.py outputs/a outputs/b --out /tmp/report   # runs, or sweeps, anywhere below
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gradlab.reports.write import write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dirs", nargs="+", type=Path, help="run or sweep dirs (searched below)")
    parser.add_argument("--out", type=Path, help="where to write the report (default: first dir)")
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"error: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        written = write_report(args.dirs, args.out)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(written[0].read_text())
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
