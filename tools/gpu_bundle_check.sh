#!/usr/bin/env bash
# tools/gpu_bundle_check.sh: proves a GPU bundle (tools/gpu_bundle.sh, Note
# [GPU bundle]) self-contained, on the CPU machine; `make test-bundle` runs it
# in CI. From the archive unpacked into a fresh folder:
#   1. every file matches SHA256SUMS and the archive is within 48 MiB;
#   2. (a) lib/ holds libkiln.so, libkiln_cuda.so and libkiln_dist.so (Note
#      [Package layout] in core/components.h), libkiln.so needing no CUDA or
#      MPI library; every ELF file's libraries resolve inside the bundle or to
#      glibc, libstdc++/libgcc or CUDA's libraries (ldd), and so does every library
#      that `kiln info --libs` and a CPU subset of kiln_tests actually load
#      (LD_DEBUG=libs), with the Debian libraries kiln uses hidden (bind-
#      mounted over by an empty file, in a mount namespace of its own) where
#      the machine allows unshare -m;
#   3. (b) a configure against the kit alone (kit/kit.cmake: CMAKE_FIND_ROOT_PATH
#      set to it, system paths excluded) finds every dependency inside the
#      kit, CUDA's own beside it;
#   4. the build option the kit needs is real: kiln built against the kit
#      with KILN_MPI=OFF (and no CUDA, to keep CI's single CUDA compile)
#      builds, reports "mpi: off", and passes its one-process data-parallel
#      tests, where asking for MPI is the error "built without MPI". That
#      build is unoptimised (-O0, no debug information): it proves the kit
#      and the option, not speed, and compiles in 56% of a Release build's time
#      (433 s against 768 s of CPU time on 2 cores, 2026-12-07).
# Usage: tools/gpu_bundle_check.sh ARCHIVE WORKDIR [JOBS]
# Exit status 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ARCHIVE=${1:?usage: gpu_bundle_check.sh ARCHIVE WORKDIR [JOBS]}
WORK=${2:?usage: gpu_bundle_check.sh ARCHIVE WORKDIR [JOBS]}
JOBS=${3:-$(nproc)}
case "$ARCHIVE" in /*) ;; *) ARCHIVE=$ROOT/$ARCHIVE ;; esac
case "$WORK" in /*) ;; *) WORK=$ROOT/$WORK ;; esac
FAILED=0
pass() { echo "gpu_bundle_check: ok: $*"; }
bad() { echo "gpu_bundle_check: FAIL: $*"; FAILED=1; }

# Outside the bundle, only these may be loaded (the GPU machine provides them):
# glibc, libstdc++ and libgcc from the system's folders, and CUDA's libraries
# (driver, runtime, cuBLAS, cuDNN, NCCL) wherever the machine keeps them.
ALLOWED_RE='^/(usr/)?lib(64)?/x86_64-linux-gnu/(ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s)\.so|^/lib64/ld-linux-x86-64\.so'
CUDA_RE='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc[a-z-]*|libnvJitLink)\.so'

rm -rf "$WORK"; mkdir -p "$WORK/unpacked"
tar -C "$WORK/unpacked" -xJf "$ARCHIVE" || { bad "cannot unpack $ARCHIVE"; exit 1; }
B=$(find "$WORK/unpacked" -mindepth 1 -maxdepth 1 -type d | head -1)

# ---- 1. checksums and size ----------------------------------------------------------
if (cd "$B" && sha256sum --quiet -c SHA256SUMS); then pass "checksums of $(wc -l < "$B/SHA256SUMS") files"
else bad "checksum mismatch"; fi
size=$(stat -c %s "$ARCHIVE")
[ "$size" -le $((48 * 1024 * 1024)) ] && pass "archive $((size / 1024 / 1024)) MiB <= 48 MiB" ||
  bad "archive is $((size / 1024 / 1024)) MiB, over 48 MiB"

# ---- 2. (a) what the binaries load --------------------------------------------------
outside() {  # paths on stdin -> those neither in the bundle nor allowed
  while read -r p; do
    [ -z "$p" ] && continue
    case "$p" in "$B"/*) continue ;; esac
    grep -qE "$ALLOWED_RE" <<<"$p" && continue
    grep -qE "$CUDA_RE" <<<"$(basename "$p")" && continue
    echo "$p"
  done
}
for lib in libkiln.so libkiln_cuda.so libkiln_dist.so; do
  [ -f "$B/lib/$lib" ] || bad "the bundle lacks lib/$lib"
done
heavy=$(readelf -d "$B/lib/libkiln.so" | grep NEEDED | grep -E '\[lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|mpi[a-z_+]*)\.so')
[ -z "$heavy" ] && pass "lib/ holds libkiln, libkiln_cuda and libkiln_dist; libkiln.so needs no CUDA or MPI library" ||
  bad "lib/libkiln.so needs CUDA or MPI libraries: $(echo $heavy)"
n_elf=0
for f in "$B"/bin/* "$B"/lib/*.so*; do
  n_elf=$((n_elf + 1))
  if ldd "$f" | grep -q 'not found'; then bad "$f: $(ldd "$f" | grep 'not found' | tr -s ' \t' ' ')"; fi
  out=$(ldd "$f" | awk '/=> \// { print $3 }' | outside)
  [ -z "$out" ] || bad "$f resolves libraries outside the bundle: $(echo $out)"
done
pass "ldd of $n_elf ELF files"

# The Debian libraries the bundle carries, hidden in a private mount namespace
# when the machine allows it (root in CI), so a copy missing from the bundle
# fails to load instead of being found on the system.
HIDE=()
for lib in "$B"/lib/*.so*; do
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-pthread; do
    [ -e "$dir/$(basename "$lib")" ] && HIDE+=("$(readlink -f "$dir/$(basename "$lib")")")
  done
done
# mount(8) itself may need a hidden library (libpcre2-8, through libselinux):
# the later binds load copies of those from $WORK/mount-libs.
MOUNT_LIBS=$WORK/mount-libs
mkdir -p "$MOUNT_LIBS"
for dep in $(ldd "$(command -v mount)" 2>/dev/null | awk '/=> \// {print $3}'); do
  real=$(readlink -f "$dep")
  for h in "${HIDE[@]}"; do [ "$h" = "$real" ] && cp -L "$dep" "$MOUNT_LIBS/"; done
done
run_hidden() {  # CMD...: runs CMD with HIDE bind-mounted over, else as it is
  if [ ${#HIDE[@]} -gt 0 ] && unshare -m true 2>/dev/null; then
    : > "$WORK/empty"
    unshare -m bash -c 'set -e; e=$1; shift; ml=$1; shift; n=$1; shift
      for ((i = 0; i < n; i++)); do LD_LIBRARY_PATH=$ml mount --bind "$e" "$1"; shift; done
      exec "$@"' hide "$WORK/empty" "$MOUNT_LIBS" ${#HIDE[@]} "${HIDE[@]}" "$@"
  else
    "$@"
  fi
}
if unshare -m true 2>/dev/null; then pass "hiding ${#HIDE[@]} Debian library files while running"
else echo "gpu_bundle_check: note: unshare -m not allowed here; checking loaded paths only"; fi

check_loaded() {  # NAME LOG: every "calling init:" path in LD_DEBUG LOG inside the bundle or allowed
  local name=$1 log=$2
  local loaded; loaded=$(sed -n 's/.*calling init: //p' "$log".* 2>/dev/null | sort -u)
  [ -n "$loaded" ] || { bad "$name: LD_DEBUG recorded no libraries"; return; }
  local out; out=$(outside <<<"$loaded")
  if [ -z "$out" ]; then pass "$name loads $(wc -l <<<"$loaded") libraries, all from the bundle, glibc, libstdc++/libgcc or CUDA"
  else bad "$name loaded libraries outside the bundle: $(echo $out)"; fi
}
if run_hidden env LD_DEBUG=libs LD_DEBUG_OUTPUT="$WORK/ld.kiln" "$B/bin/kiln" info --libs > "$WORK/kiln_info.txt" 2>&1; then
  pass "bundle's kiln info ran"; cat "$WORK/kiln_info.txt"
else bad "bundle's kiln info failed: $(tail -5 "$WORK/kiln_info.txt")"; fi
check_loaded "kiln info" "$WORK/ld.kiln"
# A CPU subset of the tests: tensors, autograd, a gradient check, the
# allocator, the tokenizer, the no-GPU side of the CUDA tests.
FILTER='Tensor*:Autograd*:Gradcheck*:CachingAllocator*:Tokenizer.*:Cuda*:DeviceStaging*:NnOps*:Optim*'
if run_hidden env LD_DEBUG=libs LD_DEBUG_OUTPUT="$WORK/ld.tests" "$B/bin/kiln_tests" --gtest_filter="$FILTER" \
     --gtest_brief=1 > "$WORK/kiln_tests.txt" 2>&1; then
  pass "bundle's kiln_tests ($(grep -oE '[0-9]+ tests? from [0-9]+ test suites? ran' "$WORK/kiln_tests.txt" | head -1))"
else bad "bundle's kiln_tests failed: $(tail -20 "$WORK/kiln_tests.txt")"; fi
check_loaded "kiln_tests" "$WORK/ld.tests"
if run_hidden env LD_DEBUG=libs LD_DEBUG_OUTPUT="$WORK/ld.dist" "$B/bin/kiln_dist_tests" --gtest_brief=1 \
     > "$WORK/kiln_dist_tests.txt" 2>&1; then pass "bundle's kiln_dist_tests (one process)"
else bad "bundle's kiln_dist_tests failed: $(tail -20 "$WORK/kiln_dist_tests.txt")"; fi
check_loaded "kiln_dist_tests" "$WORK/ld.dist"

# ---- 3. (b) configure against the kit alone -----------------------------------------
KIT=$B/kit
cuda_root=/usr/local/cuda
kit_configure() {  # DIR EXTRA-ARGS...
  local dir=$1; shift
  CUDNN_ROOT=$cuda_root NCCL_ROOT=$cuda_root PKG_CONFIG=/nonexistent \
    cmake -S "$ROOT" -B "$dir" -G Ninja -C "$KIT/kit.cmake" "$@" > "$dir.configure.log" 2>&1
}
found_outside_kit() {  # DIR: cached dependency paths neither in the kit nor CUDA's
  sed -n 's/^\(KILN_[A-Za-z0-9_]*_\(LIBRARY\|INCLUDE_DIR\)\|Protobuf_INCLUDE_DIR\|Eigen3_DIR\|nlohmann_json_DIR\|CLI11_DIR\|GTest_DIR\):[A-Z]*=//p' \
    "$1/CMakeCache.txt" | while read -r p; do
      # An optional dependency not found (bench/'s oneDNN and libxsmm) is no leak.
      case "$p" in ""|*-NOTFOUND) continue ;; esac
      case "$p" in "$KIT"/*|"$cuda_root"/*) ;; *) echo "$p" ;; esac
    done
}
if kit_configure "$WORK/kit-cuda"; then
  out=$(found_outside_kit "$WORK/kit-cuda")
  n=$(grep -cE '^(KILN_[A-Za-z0-9_]*_(LIBRARY|INCLUDE_DIR)|Protobuf_INCLUDE_DIR|Eigen3_DIR|nlohmann_json_DIR|CLI11_DIR|GTest_DIR):' "$WORK/kit-cuda/CMakeCache.txt")
  if [ -z "$out" ]; then pass "CUDA configure against the kit: $n dependency paths, all in the kit or CUDA's"
  else bad "configure against the kit found dependencies outside it: $(echo $out)"; fi
  grep -E 'kiln: (cuDNN|NCCL|CUDA|MPI)' "$WORK/kit-cuda.configure.log"
else
  bad "configure against the kit failed: $(tail -20 "$WORK/kit-cuda.configure.log")"
fi

# ---- 4. KILN_MPI=OFF, built against the kit and tested ---------------------------------
if kit_configure "$WORK/kit-nompi" -DKILN_CUDA=OFF -DKILN_NCCL=OFF -DKILN_MPI=OFF \
     -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0; then
  if ninja -C "$WORK/kit-nompi" -j "$JOBS" kiln_cli kiln_dist_tests > "$WORK/kit-nompi.build.log" 2>&1; then
    pass "KILN_MPI=OFF build against the kit"
    info=$("$WORK/kit-nompi/bin/kiln" info 2>&1)
    grep -q '^  mpi: off' <<<"$info" && pass "its kiln info says mpi: off" || bad "kiln info of the MPI-less build: $info"
    if "$WORK/kit-nompi/tests/kiln_dist_tests" --gtest_brief=1 > "$WORK/kit-nompi.tests.txt" 2>&1; then
      pass "its kiln_dist_tests pass (one process)"
    else
      bad "kiln_dist_tests of the MPI-less build: $(tail -20 "$WORK/kit-nompi.tests.txt")"
    fi
    if "$WORK/kit-nompi/tests/kiln_dist_tests" --gtest_filter=Collectives.MpiNeedsAnMpiBuild 2>&1 |
       grep -q '^\[       OK \] Collectives.MpiNeedsAnMpiBuild'; then
      pass "Collectives.MpiNeedsAnMpiBuild ran and passed (not skipped)"
    else
      bad "Collectives.MpiNeedsAnMpiBuild did not pass in the MPI-less build"
    fi
    if OMPI_COMM_WORLD_SIZE=2 "$WORK/kit-nompi/bin/kiln" pretrain --output-dir "$WORK/nompi-run" --max-steps 1 \
         > "$WORK/nompi-run.txt" 2>&1; then
      bad "the MPI-less kiln started a run under a (faked) mpirun"
    elif grep -q 'built without MPI' "$WORK/nompi-run.txt"; then
      pass "under mpirun the MPI-less kiln says: $(grep -o 'built without MPI[^;]*' "$WORK/nompi-run.txt" | head -1)"
    else
      bad "the MPI-less kiln under mpirun: $(tail -3 "$WORK/nompi-run.txt")"
    fi
  else
    bad "KILN_MPI=OFF build against the kit failed: $(grep -m5 -B2 -A5 'error' "$WORK/kit-nompi.build.log")"
  fi
else
  bad "KILN_MPI=OFF configure against the kit failed: $(tail -20 "$WORK/kit-nompi.configure.log")"
fi

[ $FAILED -eq 0 ] && echo "gpu_bundle_check: all checks passed" || echo "gpu_bundle_check: some checks FAILED"
exit $FAILED
