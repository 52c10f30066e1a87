#!/usr/bin/env bash
# The profiler's overhead (docs/performance.md, "Profiler overhead"):
# `kiln bench train` alternated five times between a reference build without
# the profiler (BASE), this build with the profiler off, and on.
#
#   bench/profiler_overhead.sh BASE_KILN THIS_KILN [bench train flags...]
#   bench/profiler_overhead.sh /work/main/build/bin/kiln build/bin/kiln --batch 4 --seq 32 --steps 20
set -uo pipefail
base=$1
this=$2
shift 2
args=(bench train --shape bert-tiny --workers 1 "$@")
dir=$(mktemp -d)
for i in 1 2 3 4 5; do
  echo "$i base $("$base" "${args[@]}" 2>&1 | grep '^bench train shape')"
  echo "$i off  $("$this" "${args[@]}" 2>&1 | grep '^bench train shape')"
  echo "$i on   $("$this" "${args[@]}" --profile --profile-dir "$dir" 2>&1 | grep '^bench train shape')"
done
rm -rf "$dir"
