#!/usr/bin/env bash
# tools/gpu_check.sh: build kiln with the CUDA backend and check it on this
# machine's NVIDIA GPU, in one run of under 8 minutes on one H200:
#
#   1. gpu        what nvidia-smi reports (name, memory, driver)
#   2. build      cmake + ninja with -DKILN_CUDA=ON (kiln, kiln_tests, kiln_cli)
#   3. cuda-ops   the Cuda* tests: every registry op and every kernel on CUDA
#                 against the CPU, normalised-error thresholds per dtype
#                 (tests/test_cuda_ops.cpp, test_cuda_kernels.cpp), tensors,
#                 streams, events, copies (test_cuda_device.cpp),
#                 fused kernels and optimizers (test_cuda_fused.cpp), cuDNN
#                 attention (test_cuda_sdpa.cpp), autocast and mixed-precision
#                 training on the GPU (test_amp.cpp), batch staging
#                 (test_device_staging.cpp)
#   4. allocator  the caching-allocator tests (CPU-side simulated device) and
#                 the allocator tests on the real device
#   4b. nccl      a one-rank NCCL group runs every collective on the GPU
#                 (tests/dist/test_collectives.cpp, CudaNccl*) and `kiln bench
#                 allreduce --backend nccl`
#   5. memcheck   compute-sanitizer --tool memcheck over the CUDA kernel tests
#   6. bench      `kiln bench train --device cuda` for BERT-base at sequence
#                 length 128, when the kiln command has that subcommand
#   7. torch      the same training step in PyTorch + Hugging Face (SDPA
#                 attention, bf16 autocast), when both are installed, and the
#                 kiln / torch ratio of sequences per second
# and prints a summary table last. The whole log goes to $OUT/gpu_check.log
# when OUT is set (the device tool's output folder), else to the build folder.
#
# Usage: tools/gpu_check.sh [options]
#   --build-dir DIR   build folder (default build-gpu)
#   --arch ARCHS      CMAKE_CUDA_ARCHITECTURES: native (default), "80;90", 90, ...
#   --no-build        use an existing build in --build-dir (for example one
#                     built elsewhere and carried to this machine)
#   --jobs N          build jobs (default: all cores)
#   --quick           skip memcheck and the PyTorch comparison
#   --batch N         BERT batch size for bench/torch (default 32)
# Exit status: 0 when every step that ran passed (steps that cannot run here
# are "skipped", not failures), 1 otherwise.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=build-gpu
ARCH=native
DO_BUILD=1
JOBS=$(nproc 2>/dev/null || echo 4)
QUICK=0
BATCH=32
SEQ=128
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --no-build) DO_BUILD=0; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --batch) BATCH=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac

LOGDIR=${OUT:-$BUILD}
mkdir -p "$LOGDIR" "$BUILD"
LOG=$LOGDIR/gpu_check.log
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1

T0=$(date +%s)
NAMES=(); RESULTS=(); SECONDS_USED=(); NOTES=()
record() {  # name result seconds note
  NAMES+=("$1"); RESULTS+=("$2"); SECONDS_USED+=("$3"); NOTES+=("$4")
}
banner() { printf '\n==== %s  (t+%ss)\n' "$1" "$(( $(date +%s) - T0 ))"; }

# run_step NAME TIMEOUT_S NOTE_ON_PASS CMD...: runs CMD under a timeout and records the result.
run_step() {
  local name=$1 limit=$2 note=$3; shift 3
  banner "$name: $*"
  local start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  local secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then record "$name" pass "$secs" "$note"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" FAIL "$secs" "timed out after ${limit}s"
  else record "$name" FAIL "$secs" "exit status $rc"
  fi
  return $rc
}

# ---- 1. the GPU ------------------------------------------------------------------
banner gpu
GPU_NAME=none
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  record gpu pass 0 "$GPU_NAME"
else
  echo "no NVIDIA GPU visible (nvidia-smi missing or found none): the CUDA tests will skip"
  record gpu skipped 0 "no GPU"
fi

# ---- 2. build ------------------------------------------------------------------------
if [ $DO_BUILD -eq 1 ]; then
  banner "build (CUDA architectures: $ARCH, $JOBS jobs)"
  start=$(date +%s)
  if cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON \
        "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" >"$BUILD/configure.log" 2>&1 &&
     timeout 300 ninja -C "$BUILD" -j"$JOBS" kiln kiln_tests kiln_cli kiln_dist_tests; then
    record build pass $(( $(date +%s) - start )) "arch $ARCH"
  else
    tail -30 "$BUILD/configure.log"
    record build FAIL $(( $(date +%s) - start )) "see $BUILD/configure.log"
  fi
else
  record build skipped 0 "--no-build: using $BUILD"
fi
TESTS=$BUILD/tests/kiln_tests
KILN=$BUILD/bin/kiln

# ---- 3. CUDA ops against the CPU ---------------------------------------------------------------
if [ -x "$TESTS" ]; then
  run_step cuda-ops 240 "registry ops + kernels vs CPU" \
    "$TESTS" --gtest_filter='Cuda*:DeviceStaging*' --gtest_brief=1
  # ---- 4. allocator: CPU-side simulated device, then on the device -------------------------------
  run_step allocator 120 "simulated + on device" \
    "$TESTS" --gtest_filter='CachingAllocator*:PinnedHostAllocator*:HostHeapMemory*:CudaMemory*:CudaAllocator*' \
    --gtest_brief=1
  # ---- 4b. the one-rank NCCL group: every collective on the GPU, then its bandwidth ----------
  if [ -x "$BUILD/tests/kiln_dist_tests" ]; then
    run_step nccl 90 "one-rank group, all collectives" \
      "$BUILD/tests/kiln_dist_tests" --gtest_filter='CudaNccl*' --gtest_brief=1
    [ -x "$KILN" ] && run_step nccl-bench 60 "bench allreduce, one rank" "$KILN" bench allreduce --backend nccl
  else
    record nccl FAIL 0 "no test binary at $BUILD/tests/kiln_dist_tests"
  fi
  # ---- 5. compute-sanitizer memcheck ------------------------------------------------------------
  if [ $QUICK -eq 1 ]; then
    record memcheck skipped 0 "--quick"
  elif ! command -v compute-sanitizer >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/compute-sanitizer ]; then
    record memcheck skipped 0 "compute-sanitizer not installed"
  elif [ "$GPU_NAME" = none ]; then
    record memcheck skipped 0 "no GPU"
  else
    CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    run_step memcheck 200 "no errors" \
      "$CS" --tool memcheck --error-exitcode 99 --leak-check no \
      "$TESTS" --gtest_filter='CudaKernels.*:CudaTensor.*:CudaCopy.*:CudaOpsEndToEnd.*:CudaFused.*' --gtest_brief=1
  fi
else
  for s in cuda-ops allocator memcheck; do record $s FAIL 0 "no test binary at $TESTS"; done
fi

# ---- 6. kiln bench train --------------------------------------------------------------------
KILN_SEQS=""
if [ -x "$KILN" ] && "$KILN" bench train --help >/dev/null 2>&1; then
  banner "bench: kiln bench train --device cuda (BERT-base, seq $SEQ)"
  start=$(date +%s)
  # pass only the options this version of the subcommand knows
  HELP=$("$KILN" bench train --help 2>&1)
  ARGS=(--device cuda)
  grep -q -- '--shape' <<<"$HELP" && ARGS+=(--shape bert-base)
  grep -q -- '--seq' <<<"$HELP" && ARGS+=(--seq "$SEQ")
  grep -q -- '--batch' <<<"$HELP" && ARGS+=(--batch "$BATCH")
  grep -q -- '--amp' <<<"$HELP" && ARGS+=(--amp bf16)  # as the PyTorch side below
  echo "kiln bench train ${ARGS[*]}"
  timeout 150 "$KILN" bench train "${ARGS[@]}" 2>&1 | tee "$LOGDIR/bench_train.txt"
  rc=${PIPESTATUS[0]}
  # sequences/s = tokens_per_s / seq from the `bench train shape=... tokens_per_s=N` line
  KILN_SEQS=$(sed -n 's/^bench train shape=.* seq=\([0-9]*\) .*tokens_per_s=\([0-9.]*\).*/\2 \1/p' \
                "$LOGDIR/bench_train.txt" | tail -1 | awk '{ if ($2 > 0) printf "%.1f", $1 / $2 }')
  if [ "$rc" -eq 0 ]; then record bench pass $(( $(date +%s) - start )) "${KILN_SEQS:-?} seq/s"
  else record bench FAIL $(( $(date +%s) - start )) "exit status $rc"; fi
else
  record bench skipped 0 "kiln has no 'bench train' subcommand yet"
fi

# ---- 7. PyTorch + Hugging Face, same step ------------------------------------------------------------
TORCH_SEQS=""
PY=${KILN_PYTHON:-python3}
if [ $QUICK -eq 1 ]; then
  record torch skipped 0 "--quick"
elif [ "$GPU_NAME" != none ] && "$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
  banner "torch: BERT-base MLM training step, bf16 autocast, SDPA (batch $BATCH, seq $SEQ)"
  start=$(date +%s)
  BATCH=$BATCH SEQ=$SEQ timeout 180 "$PY" - <<'PYEOF' 2>&1 | tee "$LOGDIR/torch_step.txt"
import os, time, torch, transformers
from transformers import BertConfig, BertForMaskedLM
B, S = int(os.environ["BATCH"]), int(os.environ["SEQ"])
torch.manual_seed(0)
cfg = BertConfig(attn_implementation="sdpa")  # bert-base-uncased shape
model = BertForMaskedLM(cfg).cuda().train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
ids = torch.randint(0, cfg.vocab_size, (B, S), device="cuda")
labels = torch.full((B, S), -100, device="cuda")
mask = torch.rand(B, S, device="cuda") < 0.15
labels[mask] = ids[mask]
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    return loss
for _ in range(5): step()
torch.cuda.synchronize()
n = 30
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(n): loss = step()
end.record(); torch.cuda.synchronize()
sec = start.elapsed_time(end) / 1e3 / n
L, H, V = cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
nonemb = sum(p.numel() for n_, p in model.named_parameters() if "embeddings" not in n_)
flops = 6 * nonemb * B * S + 12 * L * B * S * S * H + 6 * B * S * H * V  # matmuls, attention, MLM decoder
peak = 989e12  # dense bf16, H100/H200 SXM datasheet
print(f"torch {torch.__version__} transformers {transformers.__version__}: step {sec*1e3:.2f} ms  "
      f"{B/sec:.1f} seq/s  MFU {flops/sec/peak*100:.1f}% (of {peak/1e12:.0f} TFLOP/s)  loss {loss.item():.3f}")
print(f"peak allocated {torch.cuda.max_memory_allocated()/2**30:.2f} GiB, reserved {torch.cuda.max_memory_reserved()/2**30:.2f} GiB")
PYEOF
  rc=${PIPESTATUS[0]}
  TORCH_SEQS=$(grep -oE '[0-9.]+ seq/s' "$LOGDIR/torch_step.txt" | tail -1 | grep -oE '^[0-9.]+')
  if [ "$rc" -eq 0 ]; then record torch pass $(( $(date +%s) - start )) "${TORCH_SEQS:-?} seq/s"
  else record torch FAIL $(( $(date +%s) - start )) "exit status $rc"; fi
else
  record torch skipped 0 "no GPU, or PyTorch/transformers not installed"
fi
if [ -n "$KILN_SEQS" ] && [ -n "$TORCH_SEQS" ]; then
  RATIO=$(awk -v a="$KILN_SEQS" -v b="$TORCH_SEQS" 'BEGIN { printf "%.2f", a / b }')
  record ratio info 0 "kiln/torch seq/s = $RATIO (target >= 1.2)"
fi

# ---- summary ---------------------------------------------------------------------------------
FAILED=0
printf '\n==== gpu_check summary (%s, %s, %ss total; log %s)\n' "$GPU_NAME" "$(date -u +%Y-%m-%dT%H:%MZ)" \
  "$(( $(date +%s) - T0 ))" "$LOG"
printf '%-10s %-8s %6s  %s\n' step result secs note
for i in "${!NAMES[@]}"; do
  printf '%-10s %-8s %6s  %s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${SECONDS_USED[$i]}" "${NOTES[$i]}"
  [ "${RESULTS[$i]}" = FAIL ] && FAILED=1
done
exit $FAILED
