#!/usr/bin/env bash
# Every family kiln loads, beside transformers on the same config.json in the
# same run (docs/performance.md "Per family"): for each config in
# bench/families/ (or those named), `kiln bench family` then
# bench/family_torch.py in the torch 2.15 + transformers 5 peer venv
# (../shared/peer/README.md), alternating, ROUNDS times; then the median per
# family of each side's training tokens/s and (decoders) cached generation
# tokens/s, and kiln / transformers.
#
#   bench/family_vs_transformers.sh [KILN_BINARY] [ROUNDS] [FAMILY...]
#   KILN_TORCH_PYTHON=/work/peer-venv/bin/python bench/family_vs_transformers.sh build/bin/kiln 3 gpt2 llama
#
# THREADS (default 2) is the peer's torch.set_num_threads; kiln uses all cores.
# KILN_OPENBLAS_CORETYPE sets OPENBLAS_CORETYPE for kiln's side only (a CPU
# that Debian's OpenBLAS 0.3.21 does not know runs its generic "Prescott"
# kernels: docs/performance.md, "Per family"); otherwise both sides run with
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset.
# BENCH_ARGS (default "--batch 8 --seq 128 --steps 5 --new 32") go to both sides.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=${1:-$ROOT/build/bin/kiln}
ROUNDS=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
FAMILIES=("$@")
[ ${#FAMILIES[@]} -gt 0 ] || FAMILIES=(bert roberta distilbert modernbert gpt2 llama qwen2)
PYTHON=${KILN_TORCH_PYTHON:-$ROOT/../peer-venv/bin/python}
THREADS=${THREADS:-2}
read -r -a ARGS <<<"${BENCH_ARGS:---batch 8 --seq 128 --steps 5 --new 32}"
[ -x "$KILN" ] || { echo "family_vs_transformers: no kiln binary at $KILN" >&2; exit 2; }
[ -x "$PYTHON" ] || { echo "family_vs_transformers: no peer python at $PYTHON (KILN_TORCH_PYTHON)" >&2; exit 2; }
E=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
K=("${E[@]}")
[ -z "${KILN_OPENBLAS_CORETYPE:-}" ] || K+=(OPENBLAS_CORETYPE="$KILN_OPENBLAS_CORETYPE")
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}'; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for f in "${FAMILIES[@]}"; do
    config=$ROOT/bench/families/$f.json
    [ -f "$config" ] || { echo "family_vs_transformers: no $config" >&2; exit 2; }
    "${K[@]}" "$KILN" bench family --config "$config" "${ARGS[@]}" >"$TMP/kiln" 2>&1 || { cat "$TMP/kiln" >&2; exit 1; }
    "${E[@]}" "$PYTHON" "$ROOT/bench/family_torch.py" --config "$config" --threads "$THREADS" "${ARGS[@]}" \
      2>/dev/null >"$TMP/torch" || { echo "family_vs_transformers: the peer failed on $f" >&2; exit 1; }
    grep "^bench family " "$TMP/kiln" | field train_tokens_per_s >>"$TMP/$f.kiln_train"
    grep "^torch family " "$TMP/torch" | field train_tokens_per_s >>"$TMP/$f.torch_train"
    grep "^bench family-generate" "$TMP/kiln" | field generate_tokens_per_s >>"$TMP/$f.kiln_gen" || true
    grep "^torch family-generate" "$TMP/torch" | field generate_tokens_per_s >>"$TMP/$f.torch_gen" || true
    echo "round $round $f: kiln $(tr '\n' ' ' <"$TMP/kiln" | cut -c1-200)" >&2
  done
done
echo "| family | kiln train tokens/s | transformers train tokens/s | kiln / transformers | kiln generate tokens/s | transformers generate tokens/s | kiln / transformers |"
echo "|---|---|---|---|---|---|---|"
for f in "${FAMILIES[@]}"; do
  kt=$(median <"$TMP/$f.kiln_train"); tt=$(median <"$TMP/$f.torch_train")
  row="| $f | $kt | $tt | $(awk -v a="$kt" -v b="$tt" 'BEGIN {printf "%.2f", a / b}')"
  if [ -s "$TMP/$f.kiln_gen" ]; then
    kg=$(median <"$TMP/$f.kiln_gen"); tg=$(median <"$TMP/$f.torch_gen")
    row="$row | $kg | $tg | $(awk -v a="$kg" -v b="$tg" 'BEGIN {printf "%.2f", a / b}') |"
  else
    row="$row | - | - | - |"
  fi
  echo "$row"
done
