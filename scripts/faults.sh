#!/usr/bin/env bash
# Fault injection through the real CLI: each case runs `python src/train.py ...` in a scratch dir
# and the table shows what the run did (exit code, summary.json status and reason).
#   bash scripts/faults.sh            (uses .venv/bin/python when present)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"; [ -x "$PY" ] || PY=python3
WORK="$(mktemp -d /tmp/gradlab-faults.XXXXXX)"
export CI=true WANDB_MODE=offline PYTHONPATH="$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}"
TRAIN="$ROOT/src/train.py"
rows=()

status_of() {  # summary.json -> "status: reason" (or "-" when the run wrote none)
  "$PY" - "$1" <<'PYEOF'
import json, sys, pathlib
p = pathlib.Path(sys.argv[1]) / "summary.json"
if not p.exists():
    print("-")
else:
    s = json.loads(p.read_text())
    f = s.get("grad_check_first_fail") or {}
    extra = f" grad_check=fail (step {f.get('step')}, {f.get('param')})" if f else ""
    print(f"{s['status']}{extra}: {s.get('reason') or ''}"[:110])
PYEOF
}

run_case() {  # name, args... : records exit code, summary status, last stderr line
  local name="$1"; shift
  local err="$WORK/$name.err"
  (cd "$WORK" && "$PY" "$TRAIN" "$@" >/dev/null 2>"$err")
  local rc=$?
  rows+=("$name|$rc|$(status_of "$WORK/$name")|$(tail -1 "$err" | cut -c1-110)")
}

signal_case() {  # name, signal: start a long run, send the signal after 20 logged steps
  local name="$1" sig="$2"
  (cd "$WORK" && exec "$PY" "$TRAIN" trainer.max_steps=1000000 check=none logger=csv \
      hydra.run.dir="$WORK/$name" >/dev/null 2>"$WORK/$name.err") &
  local pid=$!
  for _ in $(seq 600); do
    [ -f "$WORK/$name/metrics.csv" ] && [ "$(wc -l < "$WORK/$name/metrics.csv")" -gt 20 ] && break
    sleep 0.1
  done
  kill -s "$sig" "$pid"; wait "$pid"; local rc=$?
  rows+=("$name|$rc|$(status_of "$WORK/$name")|$(tail -1 "$WORK/$name.err" | cut -c1-110)")
}

run_case bad_choice grad=nope hydra.run.dir="$WORK/bad_choice"
run_case bad_value optimizer.lr=-1 hydra.run.dir="$WORK/bad_value"
run_case bad_type model.hidden=abc hydra.run.dir="$WORK/bad_type"
run_case no_cuda device=cuda logger=csv hydra.run.dir="$WORK/no_cuda"
run_case oom grad.method=faultmethods.out_of_memory logger=csv hydra.run.dir="$WORK/oom"
run_case diverge optimizer.lr=1e6 logger=csv hydra.run.dir="$WORK/diverge"
run_case method_raises grad.method=faultmethods.raises logger=csv hydra.run.dir="$WORK/method_raises"
run_case method_missing grad.method=faultmethods.missing_bias logger=csv hydra.run.dir="$WORK/method_missing"
run_case method_shape grad.method=faultmethods.wrong_shape logger=csv hydra.run.dir="$WORK/method_shape"
run_case method_dtype grad.method=faultmethods.wrong_dtype logger=csv hydra.run.dir="$WORK/method_dtype"
run_case check_fails grad.method=faultmethods.sign_flip_bias trainer.max_steps=50 logger=csv hydra.run.dir="$WORK/check_fails"
run_case check_fail_fast grad.method=faultmethods.sign_flip_bias check.fail_fast=true logger=csv hydra.run.dir="$WORK/check_fail_fast"
signal_case sigint INT
signal_case sigterm TERM
ckpt="$WORK/sigint/checkpoints/interrupted.ckpt"
run_case resume ckpt_path="$ckpt" trainer.max_steps=300 check=none logger=csv hydra.run.dir="$WORK/resume"
key=0123456789abcdef0123456789abcdef01234567
(cd "$WORK" && env -u WANDB_MODE WANDB_API_KEY=$key WANDB_BASE_URL=http://127.0.0.1:9 \
   "$PY" "$TRAIN" trainer.max_steps=20 logger.wandb.init_timeout_s=5 \
   hydra.run.dir="$WORK/wandb_unreachable" >"$WORK/wandb_unreachable.out" 2>&1); rc=$?
leak=$(grep -c "$key" "$WORK/wandb_unreachable.out")
rows+=("wandb_unreachable|$rc|$(status_of "$WORK/wandb_unreachable") (key printed $leak times)|$(grep '^warning' "$WORK/wandb_unreachable.out" | cut -c1-110)")
run_case reuse_dir logger=csv hydra.run.dir="$WORK/diverge"
(cd "$WORK" && "$PY" "$TRAIN" -m optimizer.lr=1e6,0.01 logger=csv trainer.max_steps=50 \
   hydra.sweep.dir="$WORK/sweep" >/dev/null 2>"$WORK/sweep.err"); rc=$?
rows+=("sweep_with_divergence|$rc|$(tail -n +3 "$WORK/sweep/summary.md" 2>/dev/null | head -1)|")

printf '\n| case | exit | summary.json status: reason | last stderr line |\n|---|---|---|---|\n'
for r in "${rows[@]}"; do echo "| ${r//|/ | } |"; done
echo; echo "scratch dir: $WORK"
