#!/usr/bin/env bash
# The fine-tuning tasks beyond sentence classification from the outside:
# kiln finetune --task token-classification / regression / --multi-label,
# kiln evaluate and kiln predict on their files, and bad input (one clear
# message naming file and line, a non-zero exit, nothing already written
# lost).
#
#   tests/finetune_cli.sh KILN_BINARY WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

pretrain_tiny_base "$kiln" base
w=($(sed -n '30,42p' base/vocab.txt))  # words the vocabulary has whole

# CoNLL: word, a POS-like column, the tag; -DOCSTART- and blank lines.
{
  printf -- '-DOCSTART- -X- O\n\n'
  for i in 1 2 3 4 5 6; do
    printf '%s X B-PER\n%s X I-PER\n%s X O\n%s X B-LOC\n\n' "${w[0]}" "${w[1]}" "${w[2]}" "${w[3]}"
    printf '%s X O\n%s X B-LOC\n%s X O\n\n' "${w[4]}" "${w[5]}" "${w[6]}"
  done
} >train.txt
printf '%s X B-PER\n%s X O\n\n%s X O\n%s X B-LOC\n' "${w[0]}" "${w[2]}" "${w[4]}" "${w[5]}" >dev.txt
printf '%s X B-PER\n%s X B-ORG\n' "${w[0]}" "${w[2]}" >dev_unknown.txt
printf '%s X B-PER\n%s O\n' "${w[0]}" "${w[2]}" >dev_columns.txt
printf '%s\n%s X\n%s\n\n%s\n' "${w[0]}" "${w[1]}" "${w[2]}" "${w[3]}" >words.txt

"$kiln" finetune --task token-classification --model base --train-file train.txt --validation-file dev.txt \
  --output-dir ner --max-seq-length 32 --batch-size 4 --max-steps 6 --lr 1e-3 --save-steps 0 >ner.log 2>&1 ||
  { cat ner.log; fail "finetune --task token-classification"; }
grep -q '"BertForTokenClassification"' ner/config.json || fail "ner/config.json does not name BertForTokenClassification"
grep -q '"B-LOC"' ner/config.json || fail "ner/config.json lacks the labels"
grep -q 'final evaluation:.*f1' ner.log || fail "finetune printed no entity F1: $(tail -2 ner.log)"

"$kiln" evaluate --model ner --validation-file dev.txt >eval.txt 2>eval.err || { cat eval.err; fail "evaluate (NER)"; }
for k in precision recall f1 accuracy loss; do grep -q "\"$k\"" eval.txt || fail "evaluate lacks $k: $(cat eval.txt)"; done

"$kiln" predict --model ner --input dev.txt >pred.txt 2>pred.err || { cat pred.err; fail "predict (NER)"; }
[[ $(wc -l <pred.txt) -eq 5 ]] || fail "predict: expected 4 token lines and 1 blank, got: $(cat pred.txt)"
[[ $(head -1 pred.txt | cut -f1) == "${w[0]}" ]] || fail "predict: first line is not the first word: $(head -1 pred.txt)"
"$kiln" predict --model ner --input words.txt --format jsonl >pred.jsonl 2>pred.err ||
  { cat pred.err; fail "predict --format jsonl on a words-only file"; }
[[ $(wc -l <pred.jsonl) -eq 2 ]] || fail "predict jsonl: expected 2 sentences: $(cat pred.jsonl)"
grep -q "\"tokens\":\[\"${w[0]}\",\"${w[1]}\",\"${w[2]}\"\]" pred.jsonl || fail "predict jsonl tokens: $(cat pred.jsonl)"

# predict never writes over a file without --overwrite, nor over its input.
echo keep >mine.txt
expect_error "predict over an existing file" "give --overwrite" "$kiln" predict --model ner --input dev.txt --output mine.txt
[[ $(cat mine.txt) == keep ]] || fail "predict changed an existing file"
expect_error "predict over its input" "is the --input file" \
  "$kiln" predict --model ner --input dev.txt --output dev.txt --overwrite
"$kiln" predict --model ner --input dev.txt --output mine.txt --overwrite 2>/dev/null || fail "predict --overwrite"
cmp -s mine.txt pred.txt || fail "predict --output differs from stdout"
expect_error "predict with a base model" "is not a fine-tuned classifier" "$kiln" predict --model base --input dev.txt

# Token-budgeted batches (Note [Token-budgeted batches]): NER trains with
# them, resumes bit for bit, and a budget below the longest sentence, another
# budget on resume, or a fixed-length task is one clear error each.
tb=(finetune --task token-classification --model base --train-file train.txt --validation-file dev.txt
    --max-seq-length 32 --batch-size 4 --max-tokens-per-batch 16 --max-steps 6 --lr 1e-3)
"$kiln" "${tb[@]}" --output-dir tb --save-steps 0 >tb.log 2>&1 || { cat tb.log; fail "finetune --max-tokens-per-batch"; }
grep -q 'final evaluation:.*f1' tb.log || fail "--max-tokens-per-batch: no final evaluation: $(tail -2 tb.log)"
"$kiln" "${tb[@]}" --output-dir tb_resumed --save-steps 3 --stop-after-steps 3 >tb1.log 2>&1 ||
  { cat tb1.log; fail "finetune --max-tokens-per-batch --stop-after-steps"; }
"$kiln" "${tb[@]}" --output-dir tb_resumed --save-steps 3 --resume >tb2.log 2>&1 ||
  { cat tb2.log; fail "finetune --max-tokens-per-batch --resume"; }
cmp -s tb/model.safetensors tb_resumed/model.safetensors ||
  fail "--max-tokens-per-batch: the resumed model differs from the uninterrupted run's"
expect_error "--max-tokens-per-batch below the longest sentence" "is below the longest example's 6 tokens" \
  "$kiln" "${tb[@]}" --max-tokens-per-batch 5 --output-dir tb_small
expect_error "resume with another --max-tokens-per-batch" "was written with --max-tokens-per-batch 16" \
  "$kiln" "${tb[@]}" --max-tokens-per-batch 20 --output-dir tb_resumed --resume
expect_error "--max-tokens-per-batch on a fixed-length task" "--max-tokens-per-batch is for sequence-classification" \
  "$kiln" finetune --task causal-lm --model base --train-file train.txt --max-tokens-per-batch 64 --output-dir tb_lm

# Bad CoNLL input: file and line.
expect_error "NER dev label not in train" "dev_unknown.txt:2" \
  "$kiln" finetune --task token-classification --model base --train-file train.txt --validation-file dev_unknown.txt \
  --output-dir ner2 --max-steps 1
expect_error "NER wrong number of columns" "dev_columns.txt:2" \
  "$kiln" evaluate --model ner --validation-file dev_columns.txt
expect_error "NER label column out of range" "out of range" \
  "$kiln" finetune --task token-classification --model base --train-file train.txt --label-column 7 --output-dir ner3
expect_error "NER label column not an index" "1-based column index" \
  "$kiln" finetune --task token-classification --model base --train-file train.txt --label-column tag --output-dir ner4
expect_error "unknown task" "--task must be" "$kiln" finetune --task ner --model base --train-file train.txt --output-dir x
expect_error "multi-label with token task" "--multi-label applies" \
  "$kiln" finetune --task token-classification --multi-label --model base --train-file train.txt --output-dir x

# Regression from headerless TSV (STS-B's layout: texts in 8 and 9, the score in 10).
row() { printf 'a\tb\tc\td\te\tf\tg\t%s\t%s\t%s\n' "$1" "$2" "$3"; }
{ row "${w[0]} ${w[1]}" "${w[0]} ${w[1]}" 5.000; row "${w[2]}" "${w[3]} ${w[4]}" 0.500
  row "${w[5]} ${w[6]}" "${w[5]}" 3.200; row "${w[7]}" "${w[8]}" 1.000; } >sts.tsv
{ row "${w[0]}" "${w[1]}" 2.0; row "${w[2]}" "${w[3]}" high; } >sts_bad.tsv
{ row "${w[0]}" "" 2.0; } >sts_empty.tsv
sts=(--no-header --text-column 8 --pair-column 9 --label-column 10)
"$kiln" finetune --model base --train-file sts.tsv --validation-file sts.tsv "${sts[@]}" --output-dir sts \
  --max-seq-length 32 --batch-size 2 --max-steps 4 --lr 1e-3 --save-steps 0 >sts.log 2>&1 ||
  { cat sts.log; fail "finetune regression"; }
grep -q '"problem_type": "regression"' sts/config.json || fail "sts/config.json lacks problem_type regression"
grep -q 'final evaluation:.*pearson' sts.log || fail "regression printed no Pearson: $(tail -2 sts.log)"
"$kiln" predict --model sts --input sts.tsv --no-header --text-column 8 --pair-column 9 >sts_pred.txt 2>err.txt ||
  { cat err.txt; fail "predict (regression)"; }
[[ $(wc -l <sts_pred.txt) -eq 4 ]] || fail "regression predict: expected 4 scores: $(cat sts_pred.txt)"
expect_error "score that is not a number" "sts_bad.tsv:2" \
  "$kiln" finetune --model base --task regression --train-file sts_bad.tsv "${sts[@]}" --output-dir sts2 --max-steps 1
expect_error "empty text" "sts_empty.tsv:1" \
  "$kiln" finetune --model base --task regression --train-file sts_empty.tsv "${sts[@]}" --output-dir sts3 --max-steps 1
expect_error "column index out of range" "out of range" \
  "$kiln" finetune --model base --task regression --train-file sts.tsv --no-header --text-column 8 --pair-column 9 \
  --label-column 11 --output-dir sts4 --max-steps 1
expect_error "headerless without a text column" "--text-column" \
  "$kiln" finetune --model base --task regression --train-file sts.tsv --no-header --label-column 10 --output-dir sts5

# Multi-label: comma-separated labels, an empty field for none.
printf 'text\tlabels\n%s\tx,y\n%s\tx\n%s\t\n%s\ty\n' "${w[0]}" "${w[1]}" "${w[2]}" "${w[3]}" >ml.tsv
"$kiln" finetune --model base --multi-label --label-column labels --train-file ml.tsv --validation-file ml.tsv \
  --output-dir ml --max-seq-length 32 --batch-size 2 --max-steps 4 --lr 1e-3 --save-steps 0 >ml.log 2>&1 ||
  { cat ml.log; fail "finetune --multi-label"; }
grep -q '"problem_type": "multi_label_classification"' ml/config.json || fail "ml/config.json problem_type"
grep -q 'final evaluation:.*f1_micro' ml.log || fail "multi-label printed no micro-F1: $(tail -2 ml.log)"
"$kiln" predict --model ml --input ml.tsv --format jsonl >ml_pred.jsonl 2>err.txt || { cat err.txt; fail "predict (multi-label)"; }
[[ $(grep -c '"labels"' ml_pred.jsonl) -eq 4 ]] || fail "multi-label predict: $(cat ml_pred.jsonl)"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all fine-tuning CLI checks passed"
