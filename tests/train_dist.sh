#!/usr/bin/env bash
# `mpirun -np 2 kiln pretrain`: data-parallel training from the command line.
# Checks one progress stream (rank 0), checkpoints from rank 0, exact
# resume under data parallel (2N steps straight == N steps, stop, --resume),
# and preemption: SIGTERM on one rank stops every rank after the same step
# with one checkpoint, and --resume ends bitwise where the straight run does.
#
#   tests/train_dist.sh KILN_BINARY WORK_DIR MPIRUN [MPIRUN_ARGS...]
set -uo pipefail
kiln=$1
work=$2
shift 2
mpirun=("$@" -np 2)
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
small=(--synthetic-documents 200 --max-seq-length 32 --batch-size 4 --workers 1 --max-steps 6 --save-steps 3
  --logging-steps 1 --seed 3)

"${mpirun[@]}" "$kiln" pretrain "${small[@]}" --output-dir straight >straight.log 2>&1 ||
  { cat straight.log; echo "FAIL: mpirun -np 2 kiln pretrain"; exit 1; }
grep -q "data parallel: 2 processes" straight.log || { cat straight.log; echo "FAIL: not data parallel"; exit 1; }
# one progress stream (a terminal bar or plain lines, as mpirun presents stdout), one banner
n=$(grep -o "6/6 loss" straight.log | wc -l)
[[ $n -eq 1 ]] || { cat straight.log; echo "FAIL: step 6 reported $n times (want once: rank 0 only)"; exit 1; }
n=$(grep -c "^pretraining:" straight.log)
[[ $n -eq 1 ]] || { cat straight.log; echo "FAIL: $n banners (want 1)"; exit 1; }
for f in model.safetensors metrics.jsonl checkpoint-3 checkpoint-6 training.svg; do
  [[ -e straight/$f ]] || { echo "FAIL: straight/$f missing"; exit 1; }
done

"${mpirun[@]}" "$kiln" pretrain "${small[@]}" --stop-after-steps 3 --output-dir resumed >resumed1.log 2>&1 ||
  { cat resumed1.log; echo "FAIL: first half"; exit 1; }
"${mpirun[@]}" "$kiln" pretrain "${small[@]}" --resume --output-dir resumed >resumed2.log 2>&1 ||
  { cat resumed2.log; echo "FAIL: --resume under mpirun"; exit 1; }
cmp straight/model.safetensors resumed/model.safetensors ||
  { echo "FAIL: resumed data-parallel weights differ from the straight run"; exit 1; }
cmp straight/checkpoint-6/optimizer.safetensors resumed/checkpoint-6/optimizer.safetensors ||
  { echo "FAIL: optimizer state differs"; exit 1; }
# Note [Preemption]: the test hook raises SIGTERM in rank 1's process alone
# after step 2; both ranks stop there, rank 0 writes checkpoint-2, the job
# exits non-zero, and --resume finishes the run bitwise.
t0=$(date +%s)
if "${mpirun[@]}" -x KILN_TEST_SIGNAL_AT=2:1 "$kiln" pretrain "${small[@]}" --output-dir preempted >preempted1.log 2>&1
then
  cat preempted1.log; echo "FAIL: a preempted job exited 0"; exit 1
fi
(( $(date +%s) - t0 < 60 )) || { echo "FAIL: the preempted job took $(( $(date +%s) - t0 )) s to end"; exit 1; }
grep -q "stopped by SIGTERM after step 2/6: saved .*preempted/checkpoint-2; continue with --resume" preempted1.log ||
  { cat preempted1.log; echo "FAIL: no stop message naming checkpoint-2"; exit 1; }
ckpts=$(cd preempted && ls -d checkpoint-* | tr '\n' ' ')
[[ $ckpts == "checkpoint-2 " ]] || { echo "FAIL: checkpoints after the stop: $ckpts (want checkpoint-2)"; exit 1; }
"${mpirun[@]}" "$kiln" pretrain "${small[@]}" --resume --output-dir preempted >preempted2.log 2>&1 ||
  { cat preempted2.log; echo "FAIL: --resume after preemption"; exit 1; }
grep -q "resuming from .*preempted/checkpoint-2 at step 2/6" preempted2.log ||
  { cat preempted2.log; echo "FAIL: did not resume from checkpoint-2"; exit 1; }
cmp straight/model.safetensors preempted/model.safetensors ||
  { echo "FAIL: weights after preemption and --resume differ from the straight run"; exit 1; }
cmp straight/checkpoint-6/optimizer.safetensors preempted/checkpoint-6/optimizer.safetensors ||
  { echo "FAIL: optimizer state after preemption differs"; exit 1; }
# Note [Sharded optimizer state]: --shard-optimizer 1 trains bitwise as the
# straight run; its checkpoints hold one optimizer shard per rank, resume as
# unsharded (shards merged at load), and `kiln checkpoint consolidate` merges them.
"${mpirun[@]}" "$kiln" pretrain "${small[@]}" --shard-optimizer 1 --output-dir zero1 >zero1.log 2>&1 ||
  { cat zero1.log; echo "FAIL: --shard-optimizer 1"; exit 1; }
grep -q "sharded optimizer (ZeRO stage 1)" zero1.log || { cat zero1.log; echo "FAIL: no sharding banner"; exit 1; }
cmp straight/model.safetensors zero1/model.safetensors || { echo "FAIL: ZeRO-1 weights differ from the straight run"; exit 1; }
for r in 0 1; do
  [[ -f zero1/checkpoint-6/optimizer-shard-$r-of-2.safetensors ]] || { echo "FAIL: no optimizer shard $r"; exit 1; }
done
"${mpirun[@]}" "$kiln" pretrain "${small[@]}" --shard-optimizer 2 --output-dir zero2 >zero2.log 2>&1 ||
  { cat zero2.log; echo "FAIL: --shard-optimizer 2"; exit 1; }
"$kiln" checkpoint consolidate zero1/checkpoint-3 >consolidate.log 2>&1 ||
  { cat consolidate.log; echo "FAIL: kiln checkpoint consolidate"; exit 1; }
grep -q "merged 2 optimizer shards" consolidate.log || { cat consolidate.log; echo "FAIL: consolidate said"; exit 1; }
[[ ! -e zero1/checkpoint-3/optimizer-shard-0-of-2.safetensors ]] || { echo "FAIL: shards left after consolidate"; exit 1; }
# Note [Elastic resume]: 2 ranks of 4 stop at step 3; 1 rank of 8 (the same 8 examples per step) continues.
"${mpirun[@]}" "$kiln" pretrain "${small[@]}" --shard-optimizer 1 --stop-after-steps 3 --output-dir elastic \
  >elastic1.log 2>&1 || { cat elastic1.log; echo "FAIL: elastic first half"; exit 1; }
one_rank=("${small[@]}")
one_rank[5]=8  # --batch-size 8
"$kiln" pretrain "${one_rank[@]}" --resume --output-dir elastic >elastic2.log 2>&1 ||
  { cat elastic2.log; echo "FAIL: resume on 1 rank of a 2-rank checkpoint"; exit 1; }
grep -q "elastic resume: .* written by 2 ranks .* continue epoch 0 after its first 24 examples" elastic2.log ||
  { cat elastic2.log; echo "FAIL: no elastic resume line"; exit 1; }
grep -q "resuming from .*elastic/checkpoint-3 at step 3/6" elastic2.log || { cat elastic2.log; echo "FAIL: step"; exit 1; }
one_rank[5]=3
if "${mpirun[@]}" "$kiln" pretrain "${one_rank[@]}" --resume --output-dir elastic >elastic3.log 2>&1; then
  echo "FAIL: a resume with another global batch succeeded"; exit 1
fi
grep -q "batch size x ranks x accumulation is 8" elastic3.log || { cat elastic3.log; echo "FAIL: no clear message"; exit 1; }
# An error on the ranks ends the job at once (not at a collective timeout).
t0=$(date +%s)
if "${mpirun[@]}" "$kiln" pretrain "${small[@]}" --output-dir straight >again.log 2>&1; then
  echo "FAIL: a second run into the same --output-dir succeeded"; exit 1
fi
grep -q "already holds a training run" again.log || { cat again.log; echo "FAIL: no clear message"; exit 1; }
(( $(date +%s) - t0 < 60 )) || { echo "FAIL: the failing job took $(( $(date +%s) - t0 )) s to end"; exit 1; }
echo "ok: mpirun -np 2 kiln pretrain, one progress stream, bitwise resume, preemption on one rank, ZeRO-1/2, consolidate, elastic resume 2 -> 1, prompt failure"
