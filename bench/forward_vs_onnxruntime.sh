#!/usr/bin/env bash
# `kiln bench forward --model DIR` beside ONNX Runtime on the model `kiln
# export` writes from the same directory (bench/onnxruntime_forward.py): same
# shapes, same thread count, rounds alternating; prints every run, the medians
# and ORT's speed relative to kiln's.
#
#   bench/forward_vs_onnxruntime.sh KILN MODEL_DIR [ROUNDS] [THREADS] [BATCH] [SEQ] [STEPS]
#
# KILN is build/bin/kiln; the Python is $PYTHON (default .venv/bin/python, which has onnxruntime).
set -euo pipefail
kiln=$1 model=$2 rounds=${3:-3} threads=${4:-2} batch=${5:-8} seq=${6:-128} steps=${7:-5}
py=${PYTHON:-$(dirname "$0")/../.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$kiln" export --model "$model" --task embed --output "$work/model.onnx" 2>&1 | tail -1
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$model/config.json")
kiln_runs="" ort_runs=""
for r in $(seq "$rounds"); do
  out=$("$kiln" bench forward --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" --threads "$threads")
  echo "kiln round $r: $out"
  kiln_runs+="${out##*tokens_per_s=} "
  out=$("$py" "$(dirname "$0")/onnxruntime_forward.py" "$work/model.onnx" --batch "$batch" --seq "$seq" \
    --steps "$steps" --threads "$threads" --vocab "$vocab")
  echo "onnxruntime round $r: $out"
  ort_runs+="${out##*tokens_per_s=} "
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
k=$(median "$kiln_runs") o=$(median "$ort_runs")
echo "median tokens_per_s: kiln=$k onnxruntime=$o (batch $batch, seq $seq, $threads threads)"
echo "onnxruntime / kiln = $(echo "scale=3; $o / $k" | bc -l)"
