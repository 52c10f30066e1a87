#!/usr/bin/env bash
# `kiln embed` sentences/s with and without length sorting (Note [Embedding by
# length]) beside a plain transformers loop (bench/embed_torch.py), rounds
# alternating, on the same lines; prints every run and the medians.
#
#   bench/embed_vs_torch.sh KILN MODEL_DIR LINES_FILE [ROUNDS] [THREADS]
#
# KILN is build/bin/kiln; the Python is $PYTHON (default .venv-hf/bin/python).
set -euo pipefail
kiln=$1 model=$2 lines=$3 rounds=${4:-3} threads=${5:-2}
py=${PYTHON:-$(dirname "$0")/../.venv-hf/bin/python}
n=$(wc -l <"$lines")
declare -A runs
for r in $(seq "$rounds"); do
  for mode in sort no-sort; do
    flag=""; [[ $mode == no-sort ]] && flag=--no-sort
    t0=$(date +%s.%N)
    KILN_NUM_THREADS=$threads "$kiln" embed --model "$model" --batch-size 32 $flag <"$lines" >/dev/null
    t1=$(date +%s.%N)
    rate=$(echo "$n / ($t1 - $t0)" | bc -l)
    printf 'kiln %s round %d sentences_per_s=%.1f\n' "$mode" "$r" "$rate"
    runs[kiln-$mode]+="$rate "
  done
  for s in "" --sort; do
    out=$("$py" "$(dirname "$0")/embed_torch.py" "$model" "$lines" --batch-size 32 --threads "$threads" $s)
    echo "$out round $r"
    rate=${out##*sentences_per_s=}
    runs[torch${s:+-sort}]+="$rate "
  done
done
for k in kiln-sort kiln-no-sort torch-sort torch; do
  printf '%s median sentences_per_s=%s\n' "$k" "$(tr ' ' '\n' <<<"${runs[$k]}" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
done
