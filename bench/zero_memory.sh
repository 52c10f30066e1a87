#!/usr/bin/env bash
# Memory per rank with and without the sharded optimizer (ZeRO stages 1 and
# 2; Note [Sharded optimizer state] in dist/ddp.h): `mpirun -np 2 kiln
# pretrain --config bert-base` for a few steps at each --shard-optimizer,
# printing kiln's per-rank line (optimizer state, peak RSS), the wall time
# and the logged losses, which must be equal across the stages.
#
#   bench/zero_memory.sh [KILN_BINARY] [STEPS]
set -euo pipefail
kiln=${1:-build/bin/kiln}
steps=${2:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for stage in 0 1 2; do
  t0=$(date +%s.%N)
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x KILN_NUM_THREADS=1 "$kiln" pretrain \
    --config bert-base --synthetic-documents 64 --max-seq-length 128 --batch-size 4 --workers 1 \
    --max-steps "$steps" --logging-steps 1 --seed 1 --shard-optimizer "$stage" --output-dir "$work/s$stage" \
    >"$work/s$stage.log" 2>&1 || { cat "$work/s$stage.log"; exit 1; }
  echo "--shard-optimizer $stage: $(python3 -c "import sys,time; print(round(time.time()-float(sys.argv[1]),1))" "$t0") s"
  grep -E "^rank [0-9]+:" "$work/s$stage.log"
  python3 -c '
import json, sys
print("  losses", [round(json.loads(l)["loss"], 6) for l in open(sys.argv[1]) if "loss" in json.loads(l)])' \
    "$work/s$stage/metrics.jsonl"
done
