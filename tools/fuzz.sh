#!/usr/bin/env bash
# Runs one libFuzzer target under ASan + UBSan for a while.
#
#   tools/fuzz.sh NAME [SECONDS] [LIBFUZZER_ARGS...]
#
# NAME is a tests/fuzz/fuzz_NAME.cpp target (safetensors, bert_config, tokenizer, ...).
# Builds it with clang++-14 in build-fuzz/ (-DKILN_FUZZ=ON: the kiln library
# with -fsanitize=fuzzer-no-link,address,undefined, the target with libFuzzer),
# copies the seed corpus tests/fuzz/corpus/NAME/ into a scratch directory, fuzzes
# for SECONDS (default 60) and prints libFuzzer's last status line (cov, ft,
# corpus, rss), the execution count and the peak RSS. Crash inputs are
# left in the scratch directory's artifacts/ and the exit status is non-zero.
#
# Environment: KILN_FUZZ_BUILD (build directory, default <repo>/build-fuzz),
# KILN_FUZZ_JOBS (ninja -j, default 2), KILN_FUZZ_WORK (scratch directory,
# default a fresh mktemp -d), CXX_FUZZ (compiler, default clang++-14),
# KILN_FUZZ_BIN (a folder of fuzz_NAME binaries built earlier: no build),
# KILN_FUZZ_LARGE=1 (add inputs at and past the reader's size caps to the
# corpus: make_seeds.py --large; give a -max_len above the cap).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
name=$1
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))

root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_FUZZ_BUILD:-$root/build-fuzz}
jobs=${KILN_FUZZ_JOBS:-2}
cxx=${CXX_FUZZ:-clang++-14}
src=$root/tests/fuzz/fuzz_$name.cpp
if [[ ! -f $src ]]; then
  echo "fuzz.sh: no target $src; available:" >&2
  ls "$root"/tests/fuzz/fuzz_*.cpp | sed 's|.*/fuzz_||; s|\.cpp$||; s|^|  |' >&2
  exit 2
fi
corpus=$root/tests/fuzz/corpus/$name
[[ -d $corpus ]] || { echo "fuzz.sh: no seed corpus $corpus" >&2; exit 2; }

if [[ -n ${KILN_FUZZ_BIN:-} ]]; then
  bin=$KILN_FUZZ_BIN/fuzz_$name
  [[ -x $bin ]] || { echo "fuzz.sh: no prebuilt $bin" >&2; exit 2; }
else
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKILN_FUZZ=ON -DKILN_CUDA=OFF -DKILN_BUILD_TOOLS=OFF "${launcher[@]}" >/dev/null
  nice ninja -C "$build" -j "$jobs" "fuzz_$name"
  bin=$build/bin/fuzz_$name
fi

work=${KILN_FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz-$name.XXXXXX")}
mkdir -p "$work/corpus" "$work/artifacts"
cp -r "$corpus/." "$work/corpus/"
[[ ${KILN_FUZZ_LARGE:-0} == 1 ]] && python3 "$root/tests/fuzz/make_seeds.py" --large "$name" "$work/corpus"
args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
      -artifact_prefix="$work/artifacts/")
[[ -f $root/tests/fuzz/$name.dict ]] && args+=(-dict="$root/tests/fuzz/$name.dict")

# Targets whose reader takes a path write each input into a scratch folder
# (tests/fuzz/scratch.h). libFuzzer ends with _Exit, so the target cannot remove
# it: give it one here (in /dev/shm when writable) and remove it afterwards.
shm=/dev/shm; [[ -d $shm && -w $shm ]] || shm=${TMPDIR:-/tmp}
scratch=$(mktemp -d "$shm/kiln-fuzz-$name.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

echo "fuzz.sh: fuzzing $name for ${seconds}s in $work"
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  KILN_FUZZ_SCRATCH=$scratch nice "$bin" "${args[@]}" "$@" "$work/corpus" >"$work/log" 2>&1
status=$?
set -e

execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || true)
rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || true)
grep -E '^#[0-9]+[[:space:]]' "$work/log" | tail -n 1 || true
grep -E '^Done [0-9]+ runs' "$work/log" || true
echo "fuzz.sh: $name: ${execs:-?} executions in ${seconds}s, peak RSS ${rss:-?} MB, exit status $status," \
  "corpus $(ls "$work/corpus" | wc -l) inputs"
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: crash inputs in $work/artifacts:" >&2
  ls -l "$work/artifacts" >&2
  grep -m1 -A30 -E 'ERROR: (AddressSanitizer|libFuzzer)|runtime error|property violated' "$work/log" >&2 || true
fi
exit $status
