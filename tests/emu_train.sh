#!/usr/bin/env bash
# End-to-end training on the emulated CUDA device (KILN_CUDA=EMU, Note
# [Emulated CUDA device] in cuda/emu/emu.h): `kiln pretrain --device cuda` of
# the synthetic corpus's small BERT for a few steps, stopped halfway and
# resumed from its checkpoint, in float32, bf16 autocast and fp16 with the
# grad scaler, each against the same run on the CPU: the final evaluation
# losses must agree within 2%, the tolerance of the real GPU check
# (tools/gpu_check.sh train_check).
#
#   tests/emu_train.sh KILN_BINARY WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail
kiln=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

args=(pretrain --synthetic-documents 48 --max-seq-length 16 --batch-size 4 --workers 0 --max-steps 6
      --logging-steps 1 --save-steps 3 --eval-steps 0 --eval-batch-size 8)
final_loss() { sed -n 's/^final evaluation: loss \([0-9.eE+-]*\).*/\1/p' "$1" | tail -1; }

for amp in none bf16 fp16; do
  "$kiln" "${args[@]}" --amp "$amp" --device cpu --output-dir "cpu-$amp" >"cpu-$amp.txt" 2>&1 ||
    { tail -20 "cpu-$amp.txt"; fail "pretrain --amp $amp on the CPU"; continue; }
  "$kiln" "${args[@]}" --amp "$amp" --device cuda --output-dir "cuda-$amp" --stop-after-steps 3 >"cuda-$amp.txt" 2>&1 ||
    { tail -20 "cuda-$amp.txt"; fail "pretrain --amp $amp on the emulated device (first half)"; continue; }
  [[ -d cuda-$amp/checkpoint-3 ]] || { tail -20 "cuda-$amp.txt"; fail "no checkpoint-3 after --stop-after-steps 3"; continue; }
  "$kiln" "${args[@]}" --amp "$amp" --device cuda --output-dir "cuda-$amp" --resume >>"cuda-$amp.txt" 2>&1 ||
    { tail -20 "cuda-$amp.txt"; fail "pretrain --amp $amp --resume on the emulated device"; continue; }
  grep -q 'resum' "cuda-$amp.txt" || { tail -20 "cuda-$amp.txt"; fail "--resume did not say it resumed"; continue; }
  cpu=$(final_loss "cpu-$amp.txt")
  gpu=$(final_loss "cuda-$amp.txt")
  echo "amp $amp: final evaluation loss cpu ${cpu:-?}, emulated cuda (stopped at 3, resumed) ${gpu:-?}"
  awk -v a="$cpu" -v b="$gpu" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 0.02 * a) }' ||
    fail "amp $amp: the emulated device's loss ${gpu:-?} is not within 2% of the CPU's ${cpu:-?}"
done
echo "emu_train: $((3 - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
