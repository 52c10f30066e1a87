#!/usr/bin/env bash
# One BERT masked-LM training step, kiln beside PyTorch, shape by shape in the
# same run (docs/performance.md "Training step on CPU"): for each shape,
# `kiln bench train` then ../shared/peer/bert_step_torch.py (Debian's PyTorch
# at its fastest thread setting, THREADS=1), ROUNDS times, then one line per
# round and shape with the tokens/s ratio and a median per shape.
#
#   bench/train_vs_torch.sh [KILN_BINARY] [ROUNDS] [SHAPE...]
#   bench/train_vs_torch.sh build/bin/kiln 3 bert-tiny bert-base
#
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for both, as the peer's README asks.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=${1:-$ROOT/build/bin/kiln}
ROUNDS=${2:-1}
shift $(( $# < 2 ? $# : 2 ))
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(bert-tiny bert-mini bert-small bert-base)
PEER=${KILN_PEER:-$ROOT/../shared/peer/bert_step_torch.py}
PYTHON=${KILN_TORCH_PYTHON:-/usr/bin/python3}
[ -x "$KILN" ] || { echo "train_vs_torch: no kiln binary at $KILN" >&2; exit 2; }
[ -f "$PEER" ] || { echo "train_vs_torch: no peer script at $PEER" >&2; exit 2; }
E=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)

peer_args() {  # layers hidden heads batch, as the peer's README
  case $1 in
    bert-tiny) echo "2 128 2 32" ;;
    bert-mini) echo "4 256 4 32" ;;
    bert-small) echo "4 512 8 16" ;;
    bert-base) echo "12 768 12 8" ;;
    *) echo "train_vs_torch: unknown shape $1" >&2; exit 2 ;;
  esac
}

declare -A RATIOS
echo "| round | shape | time | kiln step s | kiln tokens/s | kiln MFU | torch step s | torch tokens/s | kiln / torch |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
  for shape in "${SHAPES[@]}"; do
    read -r L H A B <<<"$(peer_args "$shape")"
    when=$(date +%H:%M)
    k=$("${E[@]}" "$KILN" bench train --shape "$shape")
    t=$("${E[@]}" THREADS=1 "$PYTHON" "$PEER" "$L" "$H" "$A" "$B" 128 5)
    ks=$(sed -n 's/^bench train shape.* step_s=\([0-9.]*\).*/\1/p' <<<"$k")
    kt=$(sed -n 's/^bench train shape.* tokens_per_s=\([0-9]*\).*/\1/p' <<<"$k")
    km=$(sed -n 's/.* mfu=\([0-9.]*\).*/\1/p' <<<"$k")
    ts=$(sed -n 's/.* step \([0-9.]*\)s .*/\1/p' <<<"$t")
    tt=$(sed -n 's/.*s  \([0-9]*\) tok\/s.*/\1/p' <<<"$t")
    r=$(awk -v a="$kt" -v b="$tt" 'BEGIN { printf "%.2f", a / b }')
    RATIOS[$shape]="${RATIOS[$shape]:-} $r"
    echo "| $round | $shape | $when | $ks | $kt | $km | $ts | $tt | ${r}x |"
  done
done
echo
for shape in "${SHAPES[@]}"; do
  med=$(tr ' ' '\n' <<<"${RATIOS[$shape]}" | grep . | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  echo "median kiln / torch tokens/s, $shape: ${med}x"
done
