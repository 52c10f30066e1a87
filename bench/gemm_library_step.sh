#!/usr/bin/env bash
# The training step under each CPU GEMM rule (Note [GEMM library per shape]),
# beside transformers + torch 2.15 (../shared/peer/hf_bert_step.py, eager,
# --masked-head) in the same round: `kiln bench train` with the default rule,
# then with KILN_CPU_GEMM=openblas, then the peer, per shape, ROUNDS times;
# one line per round and shape, then the medians (docs/performance.md "oneDNN
# in kiln's matmul").
#
#   KILN_TORCH_PYTHON=/work/peer-venv/bin/python bench/gemm_library_step.sh [KILN] [ROUNDS] [TORCH_THREADS] [SHAPE...]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=${1:-$ROOT/build/bin/kiln}
ROUNDS=${2:-3}
TT=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(bert-mini bert-base)
PEER=${KILN_PEER:-$ROOT/../shared/peer/hf_bert_step.py}
PYTHON=${KILN_TORCH_PYTHON:?set KILN_TORCH_PYTHON to a Python with torch 2.15 and transformers 5 (../shared/peer/README.md)}
[ -x "$KILN" ] || { echo "gemm_library_step: no kiln binary at $KILN" >&2; exit 2; }
peer_args() {  # layers hidden heads batch
  case $1 in
    bert-tiny) echo "2 128 2 32" ;; bert-mini) echo "4 256 4 32" ;;
    bert-small) echo "4 512 8 16" ;; bert-base) echo "12 768 12 8" ;;
    *) echo "gemm_library_step: unknown shape $1" >&2; exit 2 ;;
  esac
}
tokens() { sed -n 's/^bench train shape.* tokens_per_s=\([0-9]*\).*/\1/p'; }
declare -A AUTO OPENBLAS TORCH
for round in $(seq 1 "$ROUNDS"); do
  for shape in "${SHAPES[@]}"; do
    read -r L H A B <<<"$(peer_args "$shape")"
    a=$("$KILN" bench train --shape "$shape" --steps 5 | tokens)
    o=$(KILN_CPU_GEMM=openblas "$KILN" bench train --shape "$shape" --steps 5 | tokens)
    t=$("$PYTHON" "$PEER" "$L" "$H" "$A" "$B" 128 5 --masked-head --threads "$TT" 2>/dev/null |
        sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p')
    AUTO[$shape]+=" $a" OPENBLAS[$shape]+=" $o" TORCH[$shape]+=" $t"
    echo "round $round $(date -u +%H:%M) $shape: kiln $a, kiln openblas-only $o, torch $t tokens/s"
  done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for shape in "${SHAPES[@]}"; do
  a=$(median "${AUTO[$shape]}") o=$(median "${OPENBLAS[$shape]}") t=$(median "${TORCH[$shape]}")
  awk -v s="$shape" -v a="$a" -v o="$o" -v t="$t" 'BEGIN {
    printf "median %s: kiln %d, openblas-only %d, torch %d tokens/s; kiln / openblas-only %.2fx, kiln / torch %.2fx\n",
           s, a, o, t, a / o, a / t }'
done
