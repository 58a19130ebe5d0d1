#!/usr/bin/env bash
# On a CUDA machine: the CUDA tests, then a `grad=manual device=cuda` run (a few minutes at most).
#   bash scripts/gpu_check.sh [OUT_DIR]     (OUT_DIR gets the run dir and the logs)
# Without CUDA the tests skip and the run exits with its one-line error.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"; [ -x "$PY" ] || PY=python3
OUT="${1:-$(mktemp -d /tmp/gradlab-gpu.XXXXXX)}"; mkdir -p "$OUT"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" CI=true WANDB_MODE=offline
start=$(date +%s)
"$PY" -c "import torch; print('torch', torch.__version__, '| cuda', torch.cuda.is_available(), '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
echo "== CUDA tests"
# only the files that hold CUDA tests: the others may need packages a bare GPU box lacks
mapfile -t files < <(grep -l "mark.cuda" "$ROOT"/tests/test_*.py)
"$PY" -m pytest -q -m cuda -p no:cacheprovider "${files[@]}" 2>&1 | tail -5; rc_tests=${PIPESTATUS[0]}
echo "== python src/train.py grad=manual device=cuda"
"$PY" "$ROOT/src/train.py" grad=manual device=cuda logger=csv trainer.max_steps=500 \
  hydra.run.dir="$OUT/run-manual-cuda" 2>&1 | tail -16; rc_run=${PIPESTATUS[0]}
echo "== summary.json"
cat "$OUT/run-manual-cuda/summary.json" 2>/dev/null | head -40
echo "tests exit $rc_tests, run exit $rc_run, $(( $(date +%s) - start )) s"
[ "$rc_tests" -eq 0 ] && [ "$rc_run" -eq 0 ]
