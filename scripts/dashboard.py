"""Build the gradlab W&B workspace: Loss, Gradient check, Speed and Memory sections, runs grouped
by gradient method (grad.name), optionally filtered to one model (model.name).

python scripts/dashboard.py --dry-run --model three_layer_relu   # the JSON spec; no network
python scripts/dashboard.py                                      # what it would create
python scripts/dashboard.py --entity me --save                   # create it (needs `wandb login`)
"""

from __future__ import annotations

import argparse
import json
import sys

from gradlab.app.dashboard import build_workspace, describe, has_api_key, spec

LOGIN_HINT = (
    "Not logged in to W&B (no WANDB_API_KEY, no netrc entry): nothing was created.\n"
    "Log in with `wandb login` (or set WANDB_API_KEY), then run again with --save."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entity", help="W&B user or team (default: your default entity)")
    parser.add_argument("--project", default="gradlab", help="W&B project (default: gradlab)")
    parser.add_argument("--name", help="workspace name (default: 'gradlab methods [(MODEL)]')")
    parser.add_argument("--model", help="show only runs of this model, e.g. three_layer_relu")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the JSON spec, send nothing")
    mode.add_argument("--save", action="store_true", help="create the workspace on W&B")
    args = parser.parse_args(argv)

    workspace = build_workspace(args.entity, args.project, args.name, args.model)
    if args.dry_run:
        print(json.dumps(spec(workspace), indent=2))
        return 0
    if not has_api_key():
        print(describe(workspace) + "\n\n" + LOGIN_HINT)
        return 0
    if not args.save:
        print(describe(workspace) + "\n\nAdd --save to create it, --dry-run for its JSON spec.")
        return 0

    import wandb

    try:
        if args.entity is None:
            entity = wandb.Api().default_entity
            if not entity:
                print("error: no default W&B entity; pass --entity", file=sys.stderr)
                return 2
            workspace = build_workspace(entity, args.project, args.name, args.model)
        workspace.save()
    except Exception as e:  # unreachable server, bad key, no such project
        print(f"error: could not save the workspace: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"saved: {workspace.url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
