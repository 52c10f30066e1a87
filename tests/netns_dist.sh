#!/usr/bin/env bash
# `kiln pretrain` across two hosts: network namespaces on this machine
# (tests/dist/netns_hosts.sh), mpirun on the first, its orted started on the
# second through `ip netns exec` instead of ssh, the ranks talking over
# OpenMPI's TCP transport on a veth/bridge network 10.213.0.0/24 and nothing
# else (no shared memory between the hosts). Checks
#  1. placement: rank r runs on host kiln-hr, in its own network namespace;
#  2. the same losses as one process with the same global batch (causal LM,
#     dropout off, 2 x 4 vs 1 x 8 examples per step: within 1e-5 relative);
#  3. bitwise the same run as 2 ranks on one host (masked LM: metrics,
#     weights, checkpoints), the gradients crossing the veth (its byte count);
#  4. checkpoints and metrics written once, by rank 0: the second host sees a
#     private, empty output directory, and nothing lands in it;
#  5. --stop-after-steps, then --resume across the hosts ends bitwise where
#     the straight run does;
#  6. SIGKILL of rank 1 mid-run: mpirun ends the job within the collective
#     timeout (KILN_DIST_TIMEOUT=20 s here; 300 s by default) naming the lost
#     rank and host, no process is left on either host, and the newest
#     checkpoint resumes (2 ranks) bitwise onto an uninterrupted run;
#  7. SIGSTOP of rank 1 (a hung rank): rank 0's collective times out after
#     KILN_DIST_TIMEOUT=10 s with kiln's error and the job ends.
# Exits 77 (a ctest skip) with a message where network namespaces are not
# permitted. Every mpirun is bounded by `timeout`; the namespaces are deleted
# on exit, whatever the outcome.
#
#   tests/netns_dist.sh KILN_BINARY WORK_DIR DATA_DIR MPIRUN [MPIRUN_ARGS...]
#   (KILN_DATA overrides DATA_DIR: the GPT-2 tokenizer and wikitext-2 for check 2)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/cli_util.sh"  # fail
source "$here/dist/netns_hosts.sh"
kiln=$(realpath "$1")
work=$2
data=${KILN_DATA:-$3}
shift 3
mpirun=("$@")
netns_skip_unless_permitted
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
work=$(pwd)
t_start=$(date +%s)
netns_up 2 || { echo "FAIL: could not build the namespace hosts"; exit 1; }

# What the ranks on the second host need comes through -x, as on real hosts
# (the launch agent starts orted in an empty environment).
fwd=()
for v in LD_LIBRARY_PATH ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do [[ -n ${!v:-} ]] && fwd+=(-x "$v"); done
# run_hosts LOG ARGS...: mpirun -np 2 across the hosts, at most 120 s.
netns_mpirun_argv "${mpirun[0]}"
across=("${NETNS_ARGV[@]}" "${mpirun[@]:1}" -np 2 "${fwd[@]}")
run_hosts() {
  local log=$1
  shift
  timeout -k 5 120 "${across[@]}" "$@" >"$log" 2>&1
}
# run_local LOG ARGS...: mpirun -np 2 on this machine (one host), at most 120 s.
run_local() {
  local log=$1
  shift
  timeout -k 5 120 "${mpirun[@]}" -np 2 "$@" >"$log" 2>&1
}
losses() { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    r.pop("tokens_per_s", None)
    print(json.dumps(r, sort_keys=True))' "$1"; }
rx_bytes() { netns_in 1 cat /sys/class/net/eth0/statistics/rx_bytes; }
last_step() { tail -n 1 "$1" 2>/dev/null | sed -n 's/^{"step":\([0-9]*\).*/\1/p'; }
ckpts() { (cd "$1" && ls -d checkpoint-* 2>/dev/null | sort -t- -k2 -n | tr '\n' ' '); }

# 1. placement
run_hosts where.log sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname) $(readlink /proc/self/ns/net)"' ||
  { cat where.log; fail "mpirun across the namespace hosts"; exit 1; }
grep -q "^rank 0 on kiln-h0 " where.log && grep -q "^rank 1 on kiln-h1 " where.log ||
  { cat where.log; fail "ranks not placed one per host"; exit 1; }
[[ $(awk '{print $5}' where.log | sort -u | wc -l) -eq 2 ]] || { cat where.log; fail "the ranks share a network namespace"; }
echo "ok: $(tr '\n' ';' <where.log)"

# 2. one process x 8 examples == two hosts x 4 examples. --batch-size is per
# process (the DistributedSampler gives rank r the entries r, r+2, ... of the
# same permutation that one process walks in order), so each step sees the
# same 8 blocks. A causal LM on full blocks has the same number of targets in
# every example, so the mean of the ranks' mean losses is the global mean;
# with dropout off nothing else differs. Only the summation order does: 1e-5.
# (A masked LM does not qualify: the ranks' masked-token counts differ, and
# the average of per-rank means weights them differently, ~1e-4 at step 1.)
tok=$data/tokenizers/gpt2/tokenizer.json
if [[ -f $tok && -f $data/wikitext-2/valid.txt ]]; then
  head -c 60000 "$data/wikitext-2/valid.txt" >text.txt
  cat >gpt2.json <<'JSON'
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 32, "n_embd": 32, "n_layer": 1, "n_head": 2,
 "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "bos_token_id": 50256, "eos_token_id": 50256}
JSON
  lm=(pretrain --task causal-lm --config "$work/gpt2.json" --tokenizer "$tok" --train-file "$work/text.txt"
    --max-seq-length 32 --workers 1 --max-steps 6 --save-steps 0 --logging-steps 1 --seed 3)
  timeout -k 5 120 "$kiln" "${lm[@]}" --batch-size 8 --output-dir lm1 >lm1.log 2>&1 ||
    { cat lm1.log; fail "pretrain --task causal-lm, one process"; }
  run_hosts lm2.log "$kiln" "${lm[@]}" --batch-size 4 --output-dir "$work/lm2" ||
    { cat lm2.log; fail "pretrain --task causal-lm across the hosts"; }
  python3 - lm1/metrics.jsonl lm2/metrics.jsonl <<'PY' || fail "causal-LM losses: one process x 8 != two hosts x 4"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
pairs = [(x, y) for x, y in zip(a, b) if "loss" in x]
assert len(a) == len(b) and len(pairs) >= 6, (len(a), len(b))
worst = 0.0
for x, y in pairs:
    assert x["step"] == y["step"]
    rel = abs(x["loss"] - y["loss"]) / abs(x["loss"])
    worst = max(worst, rel)
    assert rel <= 1e-5, f"step {x['step']}: loss {x['loss']} (1 x 8) vs {y['loss']} (2 hosts x 4), relative {rel:.2e}"
print(f"ok: causal-LM losses of 1 process x 8 and 2 hosts x 4 agree over {len(pairs)} entries (worst relative {worst:.1e})")
PY
else
  echo "SKIP (check 2 only): no $tok or $data/wikitext-2/valid.txt (set KILN_DATA)"
fi

# 3 and 4. masked LM, 2 hosts vs 2 ranks on one host: the same bits. The
# second host sees hosts.kiln-h1 in place of hosts (its own disk): rank 1
# must write nothing there.
small=(pretrain --synthetic-documents 200 --max-seq-length 32 --batch-size 4 --workers 1 --max-steps 6 --save-steps 3
  --logging-steps 1 --seed 3)
run_local local.log "$kiln" "${small[@]}" --output-dir local || { cat local.log; fail "mpirun -np 2 on one host"; }
mkdir hosts
rx0=$(rx_bytes)
KILN_NETNS_PRIVATE=$work/hosts run_hosts hosts.log "$kiln" "${small[@]}" --output-dir "$work/hosts" ||
  { cat hosts.log; fail "kiln pretrain across the hosts"; exit 1; }
rx=$(( $(rx_bytes) - rx0 ))
grep -q "data parallel: 2 processes (mpi)" hosts.log || { cat hosts.log; fail "not data parallel across the hosts"; }
n=$(grep -o "6/6 loss" hosts.log | wc -l)
[[ $n -eq 1 ]] || { cat hosts.log; fail "step 6 reported $n times (want once: rank 0 only)"; }
cmp -s <(losses local/metrics.jsonl) <(losses hosts/metrics.jsonl) ||
  fail "metrics.jsonl across the hosts differs from 2 ranks on one host"
for f in model.safetensors checkpoint-3/model.safetensors checkpoint-6/optimizer.safetensors; do
  cmp -s "local/$f" "hosts/$f" || fail "$f across the hosts differs from 2 ranks on one host"
done
# 6 all-reduces of every gradient (1.8 MB each) reach host 1 over the veth.
((rx > 6 * 1800000)) || fail "host 1 received $rx bytes on eth0: the gradients did not cross the veth"
echo "ok: masked LM across 2 hosts == 2 ranks on one host, bit for bit; host 1 received $rx bytes on eth0"
[[ $(ckpts hosts) == "checkpoint-3 checkpoint-6 " ]] || fail "checkpoints across the hosts: $(ckpts hosts)"
[[ -d hosts.kiln-h1 ]] || fail "the second host's private view was not made"
left=$(cd hosts.kiln-h1 2>/dev/null && find . -mindepth 1 | head -5 | tr '\n' ' ')
[[ -z $left ]] || fail "rank 1 wrote into the output directory on its host: $left"
[[ -z $(find hosts -name '.checkpoint-*' | head -1) ]] || fail "temporary checkpoint directories left in hosts/"
echo "ok: checkpoints $(ckpts hosts)written once, by rank 0 on kiln-h0 (kiln-h1's view of the output directory stays empty)"

# 5. --resume across the hosts (a shared output directory: every rank reads the checkpoint).
run_hosts resumed1.log "$kiln" "${small[@]}" --stop-after-steps 3 --output-dir "$work/resumed" ||
  { cat resumed1.log; fail "--stop-after-steps 3 across the hosts"; }
run_hosts resumed2.log "$kiln" "${small[@]}" --resume --output-dir "$work/resumed" ||
  { cat resumed2.log; fail "--resume across the hosts"; }
grep -q "resuming from .*resumed/checkpoint-3 at step 3/6" resumed2.log || { cat resumed2.log; fail "did not resume from checkpoint-3"; }
cmp -s hosts/model.safetensors resumed/model.safetensors && \
  cmp -s hosts/checkpoint-6/optimizer.safetensors resumed/checkpoint-6/optimizer.safetensors ||
  fail "weights or optimizer state after --resume across the hosts differ from the straight run"
echo "ok: --stop-after-steps 3, --resume across the hosts ends bit for bit where the straight run does"

# 5b. kiln finetune across the hosts (NER on the masked LM of step 3, with
# --shard-optimizer 2: reduce-scattered gradients, sharded state): the same
# bits as 2 ranks on one host, the optimizer shards in its checkpoint.
w=($(sed -n '30,42p' local/vocab.txt))  # words the vocabulary has whole
for i in 1 2 3 4 5 6 7 8; do
  printf '%s X B-PER\n%s X I-PER\n%s X O\n%s X B-LOC\n\n' "${w[0]}" "${w[1]}" "${w[2]}" "${w[3]}"
  printf '%s X O\n%s X B-LOC\n%s X O\n\n' "${w[4]}" "${w[5]}" "${w[6]}"
done >ner.txt
ner=(finetune --task token-classification --model "$work/local" --train-file "$work/ner.txt" --max-seq-length 16
  --batch-size 2 --max-steps 4 --save-steps 2 --lr 1e-3 --logging-steps 1 --seed 5 --shard-optimizer 2)
run_local ner_local.log "$kiln" "${ner[@]}" --output-dir ner_local || { cat ner_local.log; fail "finetune on one host"; }
run_hosts ner_hosts.log "$kiln" "${ner[@]}" --output-dir "$work/ner_hosts" ||
  { cat ner_hosts.log; fail "finetune across the hosts"; }
cmp -s ner_local/model.safetensors ner_hosts/model.safetensors &&
  cmp -s ner_local/checkpoint-4/optimizer-shard-1-of-2.safetensors ner_hosts/checkpoint-4/optimizer-shard-1-of-2.safetensors ||
  fail "finetune across the hosts differs from 2 ranks on one host"
[[ "$(losses ner_local/metrics.jsonl)" == "$(losses ner_hosts/metrics.jsonl)" ]] || fail "finetune losses differ"
echo "ok: kiln finetune (NER, --shard-optimizer 2) across 2 hosts == 2 ranks on one host, bit for bit"

# kill_rank1 SIGNAL LOG TIMEOUT: a long run across the hosts; once checkpoint-8
# exists and a later step is logged, SIGNAL to rank 1's kiln (found among
# host 1's processes). Sets killed_at (the step logged before) and took
# (seconds from the signal to mpirun's exit); returns mpirun's status.
long=(pretrain --synthetic-documents 200 --max-seq-length 32 --batch-size 4 --workers 1 --max-steps 400 --save-steps 4
  --logging-steps 1 --seed 3 --shard-optimizer 1)  # ZeRO-1: bitwise the unsharded run, shards in every checkpoint
kill_rank1() {
  local sig=$1 log=$2 timeout=$3 dir=$work/$4 job i p s victim= rc t0
  run_hosts "$log" -x KILN_DIST_TIMEOUT="$timeout" "$kiln" "${long[@]}" --output-dir "$dir" &
  job=$!
  for ((i = 0; i < 600; i++)); do  # 60 s at most
    s=$(last_step "$dir/metrics.jsonl")
    [[ -d $dir/checkpoint-8 ]] && ((${s:-0} > 8)) && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  for p in $(netns_pids 1); do [[ $(cat /proc/"$p"/comm 2>/dev/null) == kiln ]] && victim=$p; done
  killed_at=$(last_step "$dir/metrics.jsonl")
  [[ -n $victim ]] || { wait $job; cat "$log"; fail "no kiln process on kiln-h1 to stop"; return 255; }
  t0=$(date +%s.%N)
  kill -"$sig" "$victim"
  wait $job
  rc=$?
  took=$(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$t0")
  return $rc
}
# no_processes_left: both hosts empty (orted may take a moment after mpirun).
no_processes_left() {
  local i
  for ((i = 0; i < 50; i++)); do
    [[ -z $(netns_pids 0) && -z $(netns_pids 1) ]] && return 0
    sleep 0.1
  done
  fail "processes left on the hosts after the job: kiln-h0: $(netns_pids 0) kiln-h1: $(netns_pids 1)"
}

# 6. SIGKILL of rank 1 (its host's kiln process, mid-run).
kill_rank1 KILL killed.log 20 killed
rc=$?
((rc != 0 && rc != 124)) || { cat killed.log; fail "after SIGKILL of rank 1: exit status $rc"; }
(($(printf '%.0f' "$took") <= 20)) || fail "the job took $took s after SIGKILL of rank 1 (bound: KILN_DIST_TIMEOUT=20 s)"
grep -Eq "(mpirun|mpiexec) noticed that process rank 1 with PID [0-9]* on node kiln-h1 exited on signal 9 \(Killed\)" killed.log ||
  { cat killed.log; fail "no message naming the lost rank"; }
no_processes_left
echo "ok: SIGKILL of rank 1 after step $killed_at: mpirun exited $rc after $took s: $(grep -Eo "(mpirun|mpiexec) noticed.*" killed.log)"
# The newest checkpoint resumes on 2 ranks and ends bitwise where an uninterrupted run does.
last=$(ckpts killed | awk '{print $NF}')
c=${last#checkpoint-}
[[ -n $c ]] || fail "no checkpoint left after the kill"
if [[ -n $c ]]; then
  run_hosts killed2.log "$kiln" "${long[@]}" --resume --stop-after-steps 2 --output-dir "$work/killed" ||
    { cat killed2.log; fail "--resume after SIGKILL of rank 1"; }
  grep -q "resuming from .*killed/$last at step $c/400" killed2.log || { cat killed2.log; fail "did not resume from $last"; }
  run_local straight.log "$kiln" "${long[@]}" --stop-after-steps $((c + 2)) --output-dir straight ||
    { cat straight.log; fail "the uninterrupted reference run"; }
  cmp -s straight/checkpoint-$((c + 2))/model.safetensors killed/checkpoint-$((c + 2))/model.safetensors &&
    cmp -s straight/checkpoint-$((c + 2))/optimizer.safetensors killed/checkpoint-$((c + 2))/optimizer.safetensors &&
    cmp -s straight/checkpoint-$((c + 2))/optimizer-shard-1-of-2.safetensors \
      killed/checkpoint-$((c + 2))/optimizer-shard-1-of-2.safetensors ||
    fail "resumed from $last after the kill, step $((c + 2)) differs from an uninterrupted run"
  echo "ok: $last (the newest after the kill) resumes on 2 hosts and reaches step $((c + 2)) bit for bit"
  # Note [Elastic resume]: the survivors' count (1 rank, --batch-size 8: the
  # same 8 examples per step) continues the killed run.
  cp -r killed killed_np1 && rm -rf killed_np1/checkpoint-$((c + 2))
  one_rank=("${long[@]}")
  one_rank[6]=8  # --batch-size 8
  timeout -k 5 120 "${mpirun[@]}" -np 1 "$kiln" "${one_rank[@]}" --resume --stop-after-steps 2 --output-dir killed_np1 \
    >killed_np1.log 2>&1 || { cat killed_np1.log; fail "--resume from $last with -np 1"; }
  grep -q "resuming from .*killed_np1/$last at step $c/400" killed_np1.log ||
    { cat killed_np1.log; fail "-np 1 did not resume from $last"; }
  grep -q "elastic resume: .* written by 2 ranks" killed_np1.log || { cat killed_np1.log; fail "no elastic resume line"; }
  [[ -d killed_np1/checkpoint-$((c + 2)) ]] || fail "the 1-rank resume saved no checkpoint-$((c + 2))"
  echo "ok: $last resumes on the survivors' count (1 rank of 8 examples) and saves checkpoint-$((c + 2))"
fi

# 7. SIGSTOP of rank 1 (hung, not dead: mpirun sees nothing): rank 0's
# all-reduce times out after KILN_DIST_TIMEOUT and kiln ends the job.
kill_rank1 STOP stopped.log 10 stopped
rc=$?
((rc != 0 && rc != 124)) || { cat stopped.log; fail "after SIGSTOP of rank 1: mpirun exit status $rc"; }
(($(printf '%.0f' "$took") <= 30)) || fail "the job took $took s after SIGSTOP of rank 1 (KILN_DIST_TIMEOUT=10 s)"
grep -q "kiln: error (rank 0): .*timed out after 10 s: rank 1 did not answer a liveness probe" stopped.log ||
  { cat stopped.log; fail "no timeout error from rank 0 naming rank 1"; }
no_processes_left
echo "ok: SIGSTOP of rank 1 after step $killed_at: mpirun exited $rc after $took s: $(grep -o 'kiln: error (rank 0).*' stopped.log)"

echo "netns_dist: $(( $(date +%s) - t_start )) s"
if ((failures > 0)); then
  echo "FAIL: $failures check(s) failed"
  exit 1
fi
echo "ok: kiln pretrain across two network-namespace hosts: same losses as one process, bitwise equal to one host, checkpoints once, --resume, a killed and a hung rank"
