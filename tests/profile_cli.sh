#!/usr/bin/env bash
# The profiler from the command line (Note [Profiler], core/profiler.h):
# `kiln pretrain --profile-steps 2:3 --profile-dir D` writes a Chrome trace
# holding exactly those two steps' "step" spans (and their ops, backward
# nodes and optimizer step) plus the key_averages table beside it, never over
# an existing file; bad --profile-steps values are one clear error and a
# non-zero exit; --memory-summary prints the allocators' state at the end;
# `kiln bench train --profile` writes its trace too.
#
#   tests/profile_cli.sh KILN_BINARY WORK_DIR    (the trace is read with $KILN_PYTHON, default python3)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/cli_util.sh"  # fail, expect_error
kiln=$1
work=$2
python=${KILN_PYTHON:-python3}  # the standard library's json is all it needs
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

small=(--synthetic-documents 200 --max-seq-length 32 --batch-size 8 --workers 1 --save-steps 0 --eval-steps 0)

for bad in 3:2 0:2 2 x:y; do
  expect_error "--profile-steps $bad" "--profile-steps '$bad'" \
    "$kiln" pretrain "${small[@]}" --max-steps 4 --profile-steps "$bad" --output-dir bad
done

"$kiln" pretrain "${small[@]}" --max-steps 4 --profile-steps 2:3 --profile-dir prof --memory-summary \
  --output-dir run >log.txt 2>&1 || { cat log.txt; fail "profiled pretrain"; }
trace=prof/trace-steps2-3-rank0.json
[[ -f $trace ]] || fail "no $trace"
[[ -f prof/trace-steps2-3-rank0.txt ]] || fail "no key_averages table beside the trace"
grep -q "Self ms" prof/trace-steps2-3-rank0.txt || fail "the table file lacks its header"
grep -q "written to $trace" log.txt || fail "the run does not say where the trace went"
grep -q "CPU host allocator" log.txt || fail "--memory-summary printed no summary"
grep -q "OOM retries" log.txt || fail "--memory-summary lacks the OOM retries"
"$python" - "$trace" <<'PY' || fail "trace content"
import json, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in t if e["ph"] == "X"]
steps = [e for e in x if e["name"] == "step" and e["cat"] == "step"]
assert sorted(e["args"]["step"] for e in steps) == [2, 3], f"step spans {[e['args'] for e in steps]}, expected steps 2 and 3"
cats = {e["cat"] for e in x}
for c in ("backward", "optimizer", "loader"):
    assert c in cats, f"no {c} span; categories {sorted(cats)}"
assert any(e["ph"] == "C" and e["name"] == "memory cpu" for e in t), "no memory counter track"
open_spans = {}  # tid -> stack of end times: every span nests in the innermost open one
for e in x:
    stack = open_spans.setdefault(e["tid"], [])
    while stack and e["ts"] >= stack[-1]:
        stack.pop()
    assert not stack or e["ts"] + e["dur"] <= stack[-1] + 1e-3, f"{e['name']} overlaps its enclosing span"
    stack.append(e["ts"] + e["dur"])
assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in t), "no thread names"
print("ok: trace of steps 2..3:", len(x), "spans")
PY

# The same window again into the same directory: a fresh name, the first kept.
sum_before=$(md5sum <"$trace")
"$kiln" pretrain "${small[@]}" --max-steps 3 --profile-steps 2:3 --profile-dir prof --output-dir run2 \
  >log2.txt 2>&1 || { cat log2.txt; fail "second profiled pretrain"; }
[[ -f prof/trace-steps2-3-rank0-2.json ]] || fail "the second trace did not get a fresh name"
[[ $(md5sum <"$trace") == "$sum_before" ]] || fail "the first trace was overwritten"

"$kiln" bench train --shape bert-tiny --batch 4 --seq 32 --steps 2 --workers 1 --profile --profile-dir bprof \
  >bench.txt 2>&1 || { cat bench.txt; fail "bench train --profile"; }
[[ -f bprof/bench-train-bert-tiny.json ]] || fail "bench train --profile wrote no trace"
grep -q "bench train shape=bert-tiny" bench.txt || fail "bench train printed no result line"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "profile_cli: all passed"
