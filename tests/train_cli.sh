#!/usr/bin/env bash
# The kiln training tools from the outside: flags, --args-file, bad input
# (one clear message and a non-zero exit, nothing written is lost), an
# output directory at the input model, SIGKILL at random moments of a run
# followed by --resume, and SIGTERM / SIGINT (Note [Preemption]): a
# checkpoint, exit status 75, and a --resume that ends bitwise where an
# uninterrupted run does.
#
#   tests/train_cli.sh KILN_BINARY WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

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
expect_error "max-seq-length beyond positions" "exceeds the 128 tokens the model's max_position_embeddings (128) allow" \
  "$kiln" finetune --model base --train-file train.tsv --max-seq-length 4096 --output-dir ft3
expect_error "bad value" "--batch-size must be >= 1" \
  "$kiln" pretrain "${small[@]}" --batch-size 0 --output-dir p0
# cuda:99: an error in every build (without CUDA, or no such device)
expect_error "cuda" "CUDA" "$kiln" pretrain "${small[@]}" --device cuda:99 --output-dir p1
expect_error "model directory missing" "nomodel" \
  "$kiln" finetune --model nomodel --train-file train.tsv --output-dir ft4
# A vocabulary larger than the model's embedding matrix: refused before training.
{ cat base/vocab.txt; printf 'extra%d\n' 1 2 3; } >big_vocab.txt
expect_error "vocabulary larger than the model" "have no row in the word embeddings" \
  "$kiln" finetune --model base --vocab big_vocab.txt --train-file train.tsv --output-dir ft5

# A run already in the output directory is neither mixed into nor lost.
sum_before=$(cat base/model.safetensors base/metrics.jsonl | md5sum)
expect_error "existing run without --resume" "already holds a training run" \
  "$kiln" pretrain "${small[@]}" --max-steps 3 --output-dir base
[[ $(cat base/model.safetensors base/metrics.jsonl | md5sum) == "$sum_before" ]] || fail "the previous run's files changed"

# The output directory is, lies inside or contains the --model directory:
# refused before anything is written or removed (the pretrained weights survive).
sum_before=$(cat base/model.safetensors base/config.json base/checkpoint-3/model.safetensors | md5sum)
expect_error "--output-dir is --model (--overwrite-output-dir)" "are the same directory" \
  "$kiln" finetune --model base --train-file train.tsv --max-steps 1 --output-dir ./base/ --overwrite-output-dir
expect_error "--output-dir inside --model" "lies inside the input model directory" \
  "$kiln" finetune --model base --train-file train.tsv --max-steps 1 --output-dir base/ft
expect_error "--output-dir contains --model" "contains the input model directory" \
  "$kiln" pretrain "${small[@]}" --model base/checkpoint-3 --max-steps 1 --output-dir base --overwrite-output-dir
ln -sfn base base_link
expect_error "--output-dir a symlink to --model" "are the same directory" \
  "$kiln" finetune --model base --train-file train.tsv --max-steps 1 --output-dir base_link --overwrite-output-dir
[[ $(cat base/model.safetensors base/config.json base/checkpoint-3/model.safetensors | md5sum) == "$sum_before" ]] ||
  fail "the input model's files changed"
[[ ! -e base/ft ]] || fail "base/ft was created"

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
# (to a file: grep -q in a pipe would end it early, SIGPIPE for help text over one 4 KiB write)
"$kiln" pretrain --help >help_pretrain.txt || fail "pretrain --help"
grep -q -- "--config" help_pretrain.txt || fail "pretrain --help lacks --config"

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

# ---- SIGTERM / SIGINT (Note [Preemption]) ----------------------------------
# An uninterrupted reference run; every interrupted run below must end with
# the same weights and the same logged losses after --resume.
long=("${small[@]}" --max-steps 40 --save-steps 0 --logging-steps 1 --eval-steps 20)
"$kiln" pretrain "${long[@]}" --output-dir ref >log.txt 2>&1 || { cat log.txt; fail "reference run"; }
# "STEP LOSS" lines, the last value of each step (a run resumed from an
# earlier checkpoint logs the steps after it again, as read_metrics_jsonl reads it).
losses() {
  sed -nE 's/^\{"step":([0-9]+),.*"loss":([^,}]*).*/\1 \2/p' "$1/metrics.jsonl" |
    awk '{v[$1] = $2} END {for (s in v) print s, v[s]}' | sort -n
}

# check_resume_matches NAME: --resume NAME to the end, then compare with ref.
check_resume_matches() {
  "$kiln" pretrain "${long[@]}" --resume --output-dir "$1" >"$1.resume.log" 2>&1 ||
    { cat "$1.resume.log"; fail "$1: --resume"; return; }
  cmp -s ref/model.safetensors "$1/model.safetensors" || fail "$1: the resumed weights differ from the straight run's"
  [[ "$(losses ref)" == "$(losses "$1")" ]] || fail "$1: the logged losses differ from the straight run's"
}

# wait_for_steps DIR N: until DIR/metrics.jsonl holds N lines (at most 60 s).
wait_for_steps() {
  for _ in $(seq 600); do
    [[ -f $1/metrics.jsonl && $(wc -l <"$1/metrics.jsonl") -ge $2 ]] && return 0
    sleep 0.1
  done
  return 1
}

# Deterministic: the test hook raises SIGTERM right after step 7.
KILN_TEST_SIGNAL_AT=7 "$kiln" pretrain "${long[@]}" --output-dir hooked >hooked.log 2>&1
rc=$?
[[ $rc -eq 75 ]] || { cat hooked.log; fail "hooked SIGTERM: exit status $rc, want 75"; }
grep -q "stopped by SIGTERM after step 7/40: saved .*hooked/checkpoint-7; continue with --resume" hooked.log ||
  { cat hooked.log; fail "hooked SIGTERM: no message naming the checkpoint"; }
[[ -d hooked/checkpoint-7 && ! -e hooked/model.safetensors ]] || fail "hooked SIGTERM: not checkpoint-7 alone"
check_resume_matches hooked
echo "ok: SIGTERM after step 7 -> checkpoint-7, exit 75, bitwise resume"

# Real signals at a random step, from outside. set -m: a background job of a
# non-interactive shell would otherwise start with SIGINT ignored.
set -m
for sig in TERM INT; do
  rm -rf "sig$sig"
  "$kiln" pretrain "${long[@]}" --output-dir "sig$sig" >"sig$sig.log" 2>&1 &
  pid=$!
  wait_for_steps "sig$sig" "$((RANDOM % 10 + 2))" || fail "SIG$sig: the run made no progress"
  t0=$(date +%s)
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q "saved the model" "sig$sig.log"; then
    echo "ok: SIG$sig came after the last step (the run finished)"
    continue
  fi
  [[ $rc -eq 75 ]] || { cat "sig$sig.log"; fail "SIG$sig: exit status $rc, want 75"; continue; }
  (($(date +%s) - t0 <= 30)) || fail "SIG$sig: took $(($(date +%s) - t0)) s to stop"
  step=$(grep -o "stopped by SIG$sig after step [0-9]*" "sig$sig.log" | grep -o '[0-9]*$')
  [[ -n $step && -d sig$sig/checkpoint-$step ]] || { cat "sig$sig.log"; fail "SIG$sig: no checkpoint named"; continue; }
  check_resume_matches "sig$sig"
  echo "ok: SIG$sig at step $step -> exit 75, bitwise resume"
done

# A second signal ends the process at once (killed by it, or 75 when the
# first was already handled); whatever is on disk still resumes exactly.
rm -rf twice
"$kiln" pretrain "${long[@]}" --save-steps 1 --output-dir twice >twice.log 2>&1 &
pid=$!
wait_for_steps twice 5 || fail "second signal: the run made no progress"
kill -TERM "$pid"
sleep 0.01
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rc=$?
[[ $rc -eq 75 || $rc -eq 143 ]] || { cat twice.log; fail "second signal: exit status $rc, want 143 or 75"; }
ls -d twice/.checkpoint-* >/dev/null 2>&1 && echo "(an interrupted save was left behind, as expected)"
check_resume_matches twice
echo "ok: two SIGTERMs -> exit $rc, bitwise resume"
set +m

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all training CLI checks passed"
