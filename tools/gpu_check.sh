#!/usr/bin/env bash
# tools/gpu_check.sh: checks kiln's CUDA half on an NVIDIA GPU from a bundle
# made on the CPU machine (`make gpu-bundle`, Note [GPU bundle] in
# tools/gpu_bundle.sh), on a machine with CUDA, CMake, ninja and Python but
# none of kiln's Debian packages. docs/gpu.md has the exact command lines.
#
# A lease runs one command for at most 10 minutes, so the check comes in two
# parts of under 9 minutes each (every step under its own timeout; a failing
# step never stops the rest):
#   part 1: what the emulated device in CI cannot see (Note [GPU check order])
#                   gpu       nvidia-smi: name, memory, driver
#                   bundle    unpack, checksums, CPU has the ISA baseline
#                   start     `kiln info --libs --require cuda,nccl`: which
#                             libcudart/cuBLAS/cuDNN/NCCL files were loaded,
#                             with versions (retried with lib/compat's
#                             libstdc++; else the kit's source build)
#                   cublaslt  cuBLASLt GEMMs, epilogues, mixed precision vs CPU
#                   sdpa      cuDNN fused attention against the CPU (CudaSdpa*)
#                   nccl      a one-rank NCCL group: every collective, DDP's
#                             model check, `kiln bench allreduce --backend nccl`
#                   bench     `kiln bench train --device cuda` BERT-base bf16
#                   torch     the same step in PyTorch + transformers
#                             (tools/gpu_torch_step.py) and the kiln/torch ratio
#   part 2: the emulated list again, on the device, and what needs its size
#                   cuda-ops  every test CI runs emulated (EMU_FILTER: registry
#                             ops and kernels vs CPU, tensors, streams, copies,
#                             optimizers, autocast, staging)
#                   allocator the caching allocator, simulated and on the device
#                   train     `kiln pretrain` 20 steps on the embedded corpus
#                             on the CPU, and on the GPU stopped at step 10 and
#                             resumed: final losses within 2%
#                   large     a tensor over 2^31 elements, launches over
#                             65,535 rows (CudaLarge*)
#                   memcheck  compute-sanitizer memcheck over the kernel, fused,
#                             optimizer and cuDNN attention tests
# The summary table comes last; it and the full log are written to $OUT (the
# device tool's output folder) when set, else to the work folder.
#
# Usage: tools/gpu_check.sh --bundle PATH [options]
#   --bundle PATH    gpu-bundle.tar.xz or its unpacked folder (required)
#   --part 1|2|all   which part (default 1; "all" needs about 18 minutes)
#   --from-source    skip the bundle's binaries: build from source with its kit
#   --work DIR       where to unpack and build (default /tmp/kiln-gpu)
#   --batch N        BERT-base batch for bench and torch (default 32)
# Exit status: 0 when no step failed, 1 otherwise, 2 for bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
BUNDLE=""
PART=1
FROM_SOURCE=0
WORK=/tmp/kiln-gpu
BATCH=32
SEQ=128
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=${2:-}; shift 2 ;;
    --part) PART=${2:-}; shift 2 ;;
    --from-source) FROM_SOURCE=1; shift ;;
    --work) WORK=${2:-}; shift 2 ;;
    --batch) BATCH=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
[ -n "$BUNDLE" ] || { echo "gpu_check: --bundle PATH is required (make gpu-bundle; see docs/gpu.md)"; exit 2; }
case "$PART" in 1|2|all) ;; *) echo "gpu_check: --part must be 1, 2 or all, not '$PART'"; exit 2 ;; esac
case "$BUNDLE" in /*) ;; *) BUNDLE=$ROOT/$BUNDLE ;; esac
[ -e "$BUNDLE" ] || { echo "gpu_check: no bundle at $BUNDLE"; exit 2; }

LOGDIR=${OUT:-$WORK}
mkdir -p "$LOGDIR" "$WORK"
LOG=$LOGDIR/gpu_check-part$PART.log
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1

T0=$(date +%s)
NAMES=(); RESULTS=(); SECS=(); NOTES=()
record() { NAMES+=("$1"); RESULTS+=("$2"); SECS+=("$3"); NOTES+=("$4"); }
banner() { printf '\n==== %s  (t+%ss)\n' "$1" "$(( $(date +%s) - T0 ))"; }
# run_step NAME TIMEOUT_S NOTE CMD...: CMD under a timeout; records pass or FAIL.
run_step() {
  local name=$1 limit=$2 note=$3; shift 3
  banner "$name: $*"
  local start; start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  local secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then record "$name" pass "$secs" "$note"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" FAIL "$secs" "timed out after ${limit}s"
  else record "$name" FAIL "$secs" "exit status $rc"
  fi
  return $rc
}
# train_check KILN WORK: the embedded-corpus pretraining for 20 steps on the
# CPU, and on the GPU stopped after 10 steps and resumed from its checkpoint
# (save and load on the device). Both draw the same Philox dropout stream and
# run float32 (TF32 off), so the final losses agree within 2%.
train_check() {
  local kiln=$1 work=$2 args=(pretrain --max-steps 20 --logging-steps 5 --save-steps 10)
  "$kiln" "${args[@]}" --device cpu --output-dir "$work/train-cpu" > "$work/train-cpu.txt" 2>&1 || {
    tail -5 "$work/train-cpu.txt"; return 1; }
  "$kiln" "${args[@]}" --device cuda --output-dir "$work/train-cuda" --stop-after-steps 10 2>&1 |
    tee "$work/train-cuda.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
  "$kiln" "${args[@]}" --device cuda --output-dir "$work/train-cuda" --resume 2>&1 | tee -a "$work/train-cuda.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
  local cpu gpu
  cpu=$(sed -n 's/^final evaluation: loss \([0-9.eE+-]*\).*/\1/p' "$work/train-cpu.txt")
  gpu=$(sed -n 's/^final evaluation: loss \([0-9.eE+-]*\).*/\1/p' "$work/train-cuda.txt")
  echo "final evaluation loss after 20 steps: cpu ${cpu:-?}, cuda (stopped at 10, resumed) ${gpu:-?}"
  awk -v a="$cpu" -v b="$gpu" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 0.02 * a) }' || {
    echo "the GPU run's loss is not within 2% of the CPU run's"; return 1; }
}
part1() { [ "$PART" = 1 ] || [ "$PART" = all ]; }
part2() { [ "$PART" = 2 ] || [ "$PART" = all ]; }

# ---- gpu ------------------------------------------------------------------------
banner gpu
GPU_NAME=none
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  record gpu pass 0 "$GPU_NAME"
else
  echo "no NVIDIA GPU visible (nvidia-smi missing or found none)"
  record gpu FAIL 0 "no GPU: every GPU test would skip, so the check cannot pass here"
fi

# ---- bundle: unpack, checksums, ISA ----------------------------------------------
banner bundle
start=$(date +%s)
B=""
if [ -d "$BUNDLE" ]; then
  B=$BUNDLE
else
  rm -rf "$WORK/bundle"; mkdir -p "$WORK/bundle"
  if timeout 120 tar -C "$WORK/bundle" -xJf "$BUNDLE"; then
    B=$(find "$WORK/bundle" -mindepth 1 -maxdepth 1 -type d | head -1)
  fi
fi
if [ -n "$B" ] && [ -f "$B/SHA256SUMS" ] && (cd "$B" && sha256sum --quiet -c SHA256SUMS); then
  head -3 "$B/BUNDLE_INFO"
  note="$(sed -n 's/^commit: //p' "$B/BUNDLE_INFO")"
  # x86-64-v3: AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT (abm), XSAVE.
  missing=""
  for f in avx2 fma bmi1 bmi2 f16c movbe abm xsave; do grep -qw "$f" /proc/cpuinfo || missing="$missing $f"; done
  if [ -n "$missing" ]; then
    echo "this CPU lacks$missing: the bundle's x86-64-v3 binaries would die; using the source build"
    FROM_SOURCE=1; note="$note; CPU lacks$missing"
  fi
  record bundle pass $(( $(date +%s) - start )) "commit $note"
else
  record bundle FAIL $(( $(date +%s) - start )) "cannot unpack or checksum $BUNDLE"
fi

# ---- the CUDA libraries of this machine --------------------------------------------
# cuBLAS and the runtime from the toolkit; cuDNN and NCCL from Python's wheels
# (nvidia-cudnn-cu13, nvidia-nccl-cu13), which keep versioned names only.
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}
PY=${KILN_PYTHON:-python3}
wheel_dir() {  # LIBGLOB: the folder of the first match under Python's site-packages/nvidia
  "$PY" - "$1" <<'PYEOF' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
try:
    import nvidia
    roots = list(nvidia.__path__) + roots
except Exception:
    pass
for r in roots:
    hits = sorted(glob.glob(os.path.join(r, "**", sys.argv[1]), recursive=True))
    if hits:
        print(os.path.dirname(os.path.realpath(hits[0])))
        break
PYEOF
}
CUDNN_LIB=$(wheel_dir 'libcudnn.so.9*')
NCCL_LIB=$(wheel_dir 'libnccl.so.2*')
echo "CUDA toolkit: $CUDA_HOME; cuDNN libraries: ${CUDNN_LIB:-not found in Python's packages}; NCCL: ${NCCL_LIB:-not found in Python's packages}"
LIBPATH=""
for d in "$CUDNN_LIB" "$NCCL_LIB" "$CUDA_HOME/lib64" "$CUDA_HOME/lib"; do
  [ -n "$d" ] && [ -d "$d" ] && LIBPATH="$LIBPATH${LIBPATH:+:}$d"
done
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUDNN_ROOT=${CUDNN_LIB:+$(dirname "$CUDNN_LIB")}
export NCCL_ROOT=${NCCL_LIB:+$(dirname "$NCCL_LIB")}

# ---- start: the bundle's binaries, else the kit's source build ---------------------
# First whether the binaries start at all (the loader finds every library, the
# CPU runs the code), then whether CUDA and NCCL are in and a device is seen.
BIN=""
if [ -n "$B" ]; then
  banner "start: kiln info --libs"
  start=$(date +%s)
  how=""
  if [ $FROM_SOURCE -eq 0 ] && timeout 60 "$B/bin/kiln" info --libs > "$LOGDIR/kiln_info.txt" 2>&1; then
    BIN=$B/bin; how="bundle binaries"
  elif [ $FROM_SOURCE -eq 0 ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$B/lib/compat" \
         timeout 60 "$B/bin/kiln" info --libs > "$LOGDIR/kiln_info.txt" 2>&1; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$B/lib/compat"
    BIN=$B/bin; how="bundle binaries with lib/compat's libstdc++"
  else
    [ $FROM_SOURCE -eq 0 ] && { echo "the bundle's kiln did not start:"; cat "$LOGDIR/kiln_info.txt"; }
    banner "source build against the kit (cmake -C kit/kit.cmake: KILN_MPI=OFF, KILN_NCCL=ON)"
    SRC_BUILD=$WORK/build-src
    if timeout 420 bash -c 'cmake -S "$1" -B "$2" -G Ninja -C "$3/kit/kit.cmake" > "$2.configure.log" 2>&1 &&
                             ninja -C "$2" kiln_cli kiln_tests kiln_dist_tests' _ "$ROOT" "$SRC_BUILD" "$B" &&
       timeout 60 "$SRC_BUILD/bin/kiln" info --libs > "$LOGDIR/kiln_info.txt" 2>&1; then
      mkdir -p "$WORK/src-bin"
      ln -sf "$SRC_BUILD/bin/kiln" "$SRC_BUILD/tests/kiln_tests" "$SRC_BUILD/tests/kiln_dist_tests" "$WORK/src-bin/"
      BIN=$WORK/src-bin; how="source build against the kit"
    else
      tail -30 "$SRC_BUILD.configure.log" 2>/dev/null; cat "$LOGDIR/kiln_info.txt" 2>/dev/null
    fi
  fi
  cat "$LOGDIR/kiln_info.txt" 2>/dev/null
  if [ -z "$BIN" ]; then
    record start FAIL $(( $(date +%s) - start )) "neither the bundle's binaries nor the kit's source build start"
  elif ! req=$(timeout 60 "$BIN/kiln" info --require cuda,nccl 2>&1 >/dev/null); then
    record start FAIL $(( $(date +%s) - start )) "$how start, but: ${req#kiln: error: }"
  else
    record start pass $(( $(date +%s) - start )) "$how"
  fi
else
  record start FAIL 0 "no bundle"
fi

# ---- the steps ------------------------------------------------------------------
TESTS=$BIN/kiln_tests
DIST=$BIN/kiln_dist_tests
KILN=$BIN/kiln
# Note [GPU check order]: every kernel and runtime call already runs on the
# emulated device in CI (KILN_CUDA=EMU, Note [Emulated CUDA device] in
# cuda/emu/emu.h; docs/gpu.md lists the emulated tests). A lease is short, so
# part 1 spends it on what the emulator cannot see: NVIDIA's libraries
# (cuBLASLt's GEMMs and epilogues, cuDNN's attention, NCCL) and timings (the
# bench and the PyTorch peer). Part 2 then reruns the emulated list on the
# device (EMU_FILTER below: the same tests CI runs emulated), the allocator
# on a real device, training with stop and resume, sizes the emulator has no
# memory for, and compute-sanitizer.
EMU_FILTER='Cuda*:DeviceStaging*:-CudaSdpa*:CudaLarge*:CudaEmu*'
STEPS1="cublaslt sdpa nccl bench torch"
STEPS2="cuda-ops allocator train large memcheck"
if [ -z "$BIN" ]; then
  part1 && for s in $STEPS1; do record "$s" FAIL 0 "kiln did not start"; done
  part2 && for s in $STEPS2; do record "$s" FAIL 0 "kiln did not start"; done
fi
export KILN_REQUIRE_CUDA=1  # the Cuda* tests fail instead of skipping when no device is usable

if [ -n "$BIN" ] && part1; then
  run_step cublaslt 60 "cuBLASLt GEMMs and epilogues vs CPU" \
    "$TESTS" --gtest_filter='CudaGemm*:CudaFused*:CudaMixedPrecision*:CudaOpsEndToEnd*' --gtest_brief=1
  run_step sdpa 60 "cuDNN attention vs CPU" "$TESTS" --gtest_filter='CudaSdpa*' --gtest_brief=1
  if grep -q '^  nccl: on' "$LOGDIR/kiln_info.txt"; then
    run_step nccl 60 "one-rank group: collectives, DDP" "$DIST" --gtest_filter='CudaNccl*' --gtest_brief=1
    run_step nccl-bench 30 "bench allreduce, one rank" "$KILN" bench allreduce --backend nccl
  else
    record nccl FAIL 0 "this kiln was built without NCCL"
  fi
  banner "bench: kiln bench train --device cuda --shape bert-base --amp bf16 (batch $BATCH, seq $SEQ)"
  start=$(date +%s)
  timeout 120 "$KILN" bench train --device cuda --shape bert-base --seq "$SEQ" --batch "$BATCH" --amp bf16 \
    2>&1 | tee "$LOGDIR/bench_train.txt"
  rc=${PIPESTATUS[0]}
  # sequences/s = tokens_per_s / seq from the `bench train shape=... tokens_per_s=N` line
  KILN_SEQS=$(sed -n 's/^bench train shape=.* seq=\([0-9]*\) .*tokens_per_s=\([0-9.]*\).*/\2 \1/p' \
                "$LOGDIR/bench_train.txt" | tail -1 | awk '{ if ($2 > 0) printf "%.1f", $1 / $2 }')
  if [ "$rc" -eq 0 ] && [ -n "$KILN_SEQS" ]; then record bench pass $(( $(date +%s) - start )) "$KILN_SEQS seq/s"
  else record bench FAIL $(( $(date +%s) - start )) "exit status $rc${KILN_SEQS:+, $KILN_SEQS seq/s}"; fi
  TORCH_SEQS=""
  if "$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
    banner "torch: BERT-base MLM training step, bf16 autocast, SDPA (batch $BATCH, seq $SEQ)"
    start=$(date +%s)
    BATCH=$BATCH SEQ=$SEQ PYTHONUNBUFFERED=1 timeout 120 "$PY" "$ROOT/tools/gpu_torch_step.py" 2>&1 |
      tee "$LOGDIR/torch_step.txt"
    rc=${PIPESTATUS[0]}
    TORCH_SEQS=$(grep -oE '[0-9.]+ seq/s' "$LOGDIR/torch_step.txt" | tail -1 | grep -oE '^[0-9.]+')
    if [ "$rc" -eq 0 ]; then record torch pass $(( $(date +%s) - start )) "${TORCH_SEQS:-?} seq/s"
    else record torch FAIL $(( $(date +%s) - start )) "exit status $rc"; fi
  else
    record torch FAIL 0 "PyTorch with CUDA and transformers not importable by $PY"
  fi
  if [ -n "$KILN_SEQS" ] && [ -n "$TORCH_SEQS" ]; then
    RATIO=$(awk -v a="$KILN_SEQS" -v b="$TORCH_SEQS" 'BEGIN { printf "%.2f", a / b }')
    record ratio info 0 "kiln/torch seq/s = $RATIO (target >= 1.2)"
  fi
fi

if [ -n "$BIN" ] && part2; then
  run_step cuda-ops 150 "the emulated list on the device: registry ops + kernels vs CPU" \
    "$TESTS" --gtest_filter="$EMU_FILTER" --gtest_brief=1
  run_step allocator 45 "simulated + on device" \
    "$TESTS" --gtest_filter='CachingAllocator*:PinnedHostAllocator*:HostHeapMemory*:CudaMemory*:CudaAllocator*:MemorySummary*' \
    --gtest_brief=1
  rm -rf "$WORK/train-cpu" "$WORK/train-cuda"
  run_step train 120 "pretrain cpu vs cuda (stop + resume): losses within 2%" train_check "$KILN" "$WORK"
  run_step large 90 "2^31 elements, > 65,535 rows" "$TESTS" --gtest_filter='CudaLarge*' --gtest_brief=1
  CS=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
  if [ -x "$CS" ]; then
    run_step memcheck 200 "no errors" "$CS" --tool memcheck --error-exitcode 99 --leak-check no \
      "$TESTS" --gtest_filter='CudaKernels.*:CudaTensor.*:CudaCopy.*:CudaOpsEndToEnd.*:CudaFused.*:CudaDecoderOps.*:CudaSdpa.*' \
      --gtest_brief=1
  else
    record memcheck FAIL 0 "compute-sanitizer not found at $CS"
  fi
fi

# ---- summary ------------------------------------------------------------------------
FAILED=0
{
  printf '\n==== gpu_check part %s summary (%s, %s, %ss total)\n' "$PART" "$GPU_NAME" "$(date -u +%Y-%m-%dT%H:%MZ)" \
    "$(( $(date +%s) - T0 ))"
  printf '%-10s %-6s %5s  %s\n' step result secs note
  for i in "${!NAMES[@]}"; do
    printf '%-10s %-6s %5s  %s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${SECS[$i]}" "${NOTES[$i]}"
  done
} > "$LOGDIR/summary-part$PART.txt"
for r in "${RESULTS[@]}"; do [ "$r" = FAIL ] && FAILED=1; done
cat "$LOGDIR/summary-part$PART.txt"
exit $FAILED
