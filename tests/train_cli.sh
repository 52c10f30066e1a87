#!/usr/bin/env bash
# The kiln training tools from the outside: flags, --args-file, bad input
# (one clear message and a non-zero exit, nothing written is lost), and
# SIGKILL at random moments of a run followed by --resume.
#
#   tests/train_cli.sh KILN_BINARY WORK_DIR
set -uo pipefail
kiln=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_error "what" "message substring" command...: non-zero exit, one
# "kiln: error:" line (or CLI11's message) containing the substring, no crash.
expect_error() {
  local what=$1 want=$2
  shift 2
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    fail "$what: exit status 0"
  elif [[ $rc -ge 128 ]]; then
    fail "$what: killed by a signal (status $rc)"
  elif ! grep -qF -- "$want" err.txt; then
    fail "$what: stderr lacks '$want':"
    cat err.txt
  else
    echo "ok: $what -> $(head -n 1 err.txt)"
  fi
}

small=(--synthetic-documents 200 --max-seq-length 32 --batch-size 8 --workers 1)

# A tiny pretrained model to fine-tune from (an HF directory).
"$kiln" pretrain "${small[@]}" --max-steps 3 --save-steps 0 --output-dir base >log.txt 2>&1 ||
  { cat log.txt; fail "pretrain of the base model"; }
for f in config.json model.safetensors vocab.txt tokenizer_config.json training.svg metrics.jsonl checkpoint-3; do
  [[ -e base/$f ]] || fail "base/$f missing after kiln pretrain"
done
ls base/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file"

printf 'sentence\tlabel\nkobe\t1\nlapi\t0\nmuta kobe\t1\n' >train.tsv
printf 'sentence\tlabel\nkobe\t1\nlapi\t2\n' >dev_badlabel.tsv
printf 'sentence\tlabel\nkobe\t1\tx\n' >train_badrow.tsv

expect_error "unknown flag" "--no-such-flag" "$kiln" pretrain --no-such-flag
expect_error "missing train file" "missing.tsv" \
  "$kiln" finetune --model base --train-file missing.tsv --output-dir ft0
expect_error "malformed TSV row" "train_badrow.tsv:2" \
  "$kiln" finetune --model base --train-file train_badrow.tsv --output-dir ft1
expect_error "label outside the label set" "dev_badlabel.tsv:3" \
  "$kiln" finetune --model base --train-file train.tsv --validation-file dev_badlabel.tsv --output-dir ft2
expect_error "max-seq-length beyond positions" "exceeds the model's max_position_embeddings (128)" \
  "$kiln" finetune --model base --train-file train.tsv --max-seq-length 4096 --output-dir ft3
expect_error "bad value" "--batch-size must be >= 1" \
  "$kiln" pretrain "${small[@]}" --batch-size 0 --output-dir p0
# cuda:99: an error in every build (without CUDA, or no such device)
expect_error "cuda" "CUDA" "$kiln" pretrain "${small[@]}" --device cuda:99 --output-dir p1
expect_error "model directory missing" "nomodel" \
  "$kiln" finetune --model nomodel --train-file train.tsv --output-dir ft4

# A run already in the output directory is neither mixed into nor lost.
sum_before=$(cat base/model.safetensors base/metrics.jsonl | md5sum)
expect_error "existing run without --resume" "already holds a training run" \
  "$kiln" pretrain "${small[@]}" --max-steps 3 --output-dir base
[[ $(cat base/model.safetensors base/metrics.jsonl | md5sum) == "$sum_before" ]] || fail "the previous run's files changed"

# A checkpoint from another model config.
sed -e 's/"hidden_size": 128/"hidden_size": 64/' -e 's/"intermediate_size": 512/"intermediate_size": 256/' \
  base/config.json >other_config.json
expect_error "checkpoint from another config" "another model config" \
  "$kiln" pretrain "${small[@]}" --max-steps 3 --config other_config.json --resume --output-dir base

# --args-file: values from JSON; the command line wins; unknown keys are named.
printf '{"lr": 0.0005, "max-steps": 2, "save_steps": 0, "workers": 0, "whole-word-mask": true}\n' >args.json
"$kiln" pretrain "${small[@]}" --args-file args.json --lr 0.002 --output-dir argsrun >log.txt 2>&1 ||
  { cat log.txt; fail "--args-file run"; }
grep -q '"lr": 0.002' argsrun/checkpoint-2/trainer_state.json || fail "--lr on the command line did not win"
grep -q '"whole_word_mask": true' argsrun/checkpoint-2/trainer_state.json || fail "--args-file value not applied"
printf '{"learning_rate": 1}\n' >bad_args.json
expect_error "unknown --args-file key" "'learning_rate' is not a flag of kiln pretrain" \
  "$kiln" pretrain --args-file bad_args.json --output-dir p2
printf '[1, 2]\n' >not_object.json
expect_error "--args-file not an object" "not a JSON object" "$kiln" pretrain --args-file not_object.json

# --help explains the flags the issue names.
"$kiln" finetune --help >help.txt || fail "finetune --help"
for flag in --model --vocab --train-file --validation-file --max-seq-length --batch-size --grad-accum --lr \
  --warmup-ratio --warmup-steps --epochs --max-steps --weight-decay --optimizer --seed --output-dir --save-steps \
  --eval-steps --logging-steps --resume --workers --device --args-file; do
  grep -q -- "$flag" help.txt || fail "finetune --help lacks $flag"
done
"$kiln" pretrain --help | grep -q -- "--config" || fail "pretrain --help lacks --config"

# SIGKILL at random moments (often during a save: one every step), then
# --resume finishes the run; repeated trials.
for trial in 1 2 3; do
  rm -rf killed
  "$kiln" pretrain "${small[@]}" --max-steps 100 --save-steps 1 --logging-steps 1 --output-dir killed >/dev/null 2>&1 &
  pid=$!
  sleep "$((trial - 1)).$((RANDOM % 9 + 1))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if ls -d killed/checkpoint-* >/dev/null 2>&1; then
    "$kiln" pretrain "${small[@]}" --max-steps 100 --save-steps 1 --logging-steps 1 --resume --output-dir killed \
      >log.txt 2>&1 || { cat log.txt; fail "trial $trial: --resume after SIGKILL"; }
    [[ -e killed/checkpoint-100 && -e killed/model.safetensors ]] || fail "trial $trial: the resumed run did not finish"
    echo "ok: SIGKILL trial $trial resumed from $(grep -o 'checkpoint-[0-9]*' log.txt | head -n 1)"
  else
    echo "ok: SIGKILL trial $trial came before the first checkpoint"
  fi
done

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all training CLI checks passed"
