#!/usr/bin/env bash
# Runs the fuzz campaign of docs/fuzzing.md: every target (or the ones named)
# through tools/fuzz.sh until 10 million executions or SECONDS, JOBS at a time,
# and prints one docs/fuzzing.md table row per target.
#
#   tools/fuzz_campaign.sh [-L] [-j JOBS] [-t SECONDS] [-r RUNS] OUT_DIR [NAME ...]
#
# Without -L: the seed corpus, -max_len 1 MiB, -timeout 30. With -L (large
# inputs): the seed corpus plus make_seeds.py --large (inputs at and past the
# readers' size caps), a -max_len above the caps and -timeout 120, since one
# 16 MiB JSON input takes seconds under ASan + UBSan + coverage.
# JOBS defaults to 2, SECONDS to 1800, RUNS to 10000000. Each target's log,
# work folder (corpus, artifacts) and fuzz.sh output are kept in OUT_DIR/NAME/;
# OUT_DIR/rows.md collects the rows. The binaries are built once, first
# (build-fuzz/, or KILN_FUZZ_BUILD), so a checkout edited during the campaign
# does not change what is fuzzed. Exit status: non-zero if any target failed.
set -euo pipefail

jobs=2 seconds=1800 runs=10000000 large=0
while getopts "Lj:t:r:" opt; do
  case $opt in
    L) large=1 ;; j) jobs=$OPTARG ;; t) seconds=$OPTARG ;; r) runs=$OPTARG ;;
    *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$(realpath -m "$1"); shift
root=$(cd "$(dirname "$0")/.." && pwd)
names=("$@")
[[ ${#names[@]} -gt 0 ]] || mapfile -t names < <(ls "$root"/tests/fuzz/fuzz_*.cpp | sed 's|.*/fuzz_||; s|\.cpp$||')
mkdir -p "$out/bin"

# -max_len per target: 1 MiB, or with -L above the cap its reader enforces
# (Note [Bounded JSON]: 16 MiB; --args-file 1 MiB); the tokenizer reads text
# with no cap, vocab.txt has a cap (1 GiB) no run can reach.
max_len_of() {
  [[ $large == 1 ]] || { echo $((1 << 20)); return; }
  case $1 in
    args_file|vocab) echo $((2 << 20)) ;;
    tokenizer) echo $((1 << 20)) ;;
    *) echo $((17 << 20)) ;;
  esac
}

build=${KILN_FUZZ_BUILD:-$root/build-fuzz}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++-14}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON -DKILN_CUDA=OFF -DKILN_BUILD_TOOLS=OFF "${launcher[@]}" >/dev/null
nice ninja -C "$build" -j "${KILN_FUZZ_JOBS:-2}" "${names[@]/#/fuzz_}"
for n in "${names[@]}"; do cp "$build/bin/fuzz_$n" "$out/bin/"; done
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)

run_one() {
  local n=$1 dir=$out/$1 start end status
  set +e +o pipefail
  rm -rf "$dir"; mkdir -p "$dir"
  start=$(date +%s)
  set +e
  KILN_FUZZ_BIN=$out/bin KILN_FUZZ_LARGE=$large KILN_FUZZ_WORK=$dir/work \
    /usr/bin/time -o "$dir/cpu" -f "%U %S" "$root/tools/fuzz.sh" "$n" "$seconds" -runs="$runs" -max_len="$(max_len_of "$n")" -rss_limit_mb=3072 \
    -timeout=$((large == 1 ? 120 : 30)) \
    >"$dir/fuzz.out" 2>&1
  status=$?
  end=$(date +%s)
  local log=$dir/work/log
  statv() { grep -o "stat::$1: *[0-9]*" "$log" | grep -o '[0-9]*$' | tail -n 1; }
  local execs rss last cov ft corpus_n
  execs=$(statv number_of_executed_units) rss=$(statv peak_rss_mb)
  last=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*$') ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*$')
  corpus_n=$(ls "$dir/work/corpus" | wc -l)
  local secs=$((end - start)) verdict=none cpu
  cpu=$(awk '{printf "%d", $1 + $2}' "$dir/cpu" 2>/dev/null)
  [[ $status -eq 0 ]] || verdict="**exit $status, see $dir**"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s MB |\n' "$n" "$(max_len_of "$n")" "$secs" "${cpu:-?}" \
    "$(printf "%'d" "${execs:-0}")" "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" "${cov:-?}" "${ft:-?}" \
    "$corpus_n" "$verdict" "${rss:-?}" >"$dir/row.md"
  return $status
}

echo "fuzz_campaign: ${names[*]}, $jobs at a time, large inputs: $large, ${seconds}s or $runs runs each, commit $commit, in $out"
failed=0 pids=() running=0
for n in "${names[@]}"; do
  while (( running >= jobs )); do wait -n || failed=1; running=$((running - 1)); done
  run_one "$n" & running=$((running + 1))
done
while (( running > 0 )); do wait -n || failed=1; running=$((running - 1)); done
{
  echo "| target | -max_len | seconds | CPU seconds | executions | exec/s | cov | ft | corpus after | crashes | peak RSS |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for n in "${names[@]}"; do cat "$out/$n/row.md" 2>/dev/null || echo "| $n | (no result) |"; done
} >"$out/rows.md"
cat "$out/rows.md"
exit $failed
