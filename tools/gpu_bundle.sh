#!/usr/bin/env bash
# tools/gpu_bundle.sh: packs what the GPU check (tools/gpu_check.sh) needs on a
# GPU machine that has CUDA, CMake, ninja and Python but none of the Debian
# packages kiln builds against. Run by `make gpu-bundle` on the CPU machine.
#
# Note [GPU bundle]: the GPU machine gets a copy of the working tree plus a
# few ignored paths (64 MiB in all), runs one command for at most 10 minutes,
# and cannot install anything. So the bundle carries two ways to run kiln:
#   (a) the fast path: bin/ holds kiln, kiln_tests and kiln_dist_tests from a
#       CUDA build for sm_90 compiled for a portable CPU baseline
#       (KILN_CPU_ARCH, x86-64-v3, never -march=native), and lib/ holds
#       libkiln.so, libkiln_cuda.so and libkiln_dist.so (Note [Package
#       layout] in core/components.h) with every shared library they load
#       (RUNPATH $ORIGIN) except glibc, libstdc++/libgcc and CUDA's own:
#       the CUDA runtime and cuBLAS
#       come from the GPU machine's toolkit, cuDNN and NCCL from its Python
#       wheels (tools/gpu_check.sh finds them). lib/compat/ keeps this
#       machine's libstdc++ and libgcc_s, used only if the GPU machine's are
#       older than the binaries need.
#   (b) the fallback, if (a)'s binaries do not start there: kit/ is a
#       sysroot with the headers, libraries and CMake files of the Debian
#       packages kiln builds against (copied from the installed packages, the
#       files `dpkg -L` lists) and the protoc output for
#       train/tensorboard.proto, so that
#         cmake -S . -B build-gpu -C <bundle>/kit/kit.cmake
#       configures kiln against the kit alone (CMAKE_FIND_ROOT_PATH, no
#       system paths, no pkg-config, no protoc, no MPI: KILN_MPI=OFF).
# The bundle is a folder and its xz archive (gpu-bundle.tar.xz, at most
# 48 MiB); SHA256SUMS lists every file. tools/gpu_bundle_check.sh proves it
# self-contained in CI (`make test-bundle`); docs/gpu.md says how to use it.
#
# Usage: tools/gpu_bundle.sh [--build DIR] [--out DIR]
#   --build DIR  a configured and built CUDA build (default build)
#   --out DIR    the bundle folder to (re)make (default gpu-bundle); the
#                archive is DIR.tar.xz. Only a folder this script made
#                (holding its BUNDLE_INFO) is ever replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=build
OUTDIR=gpu-bundle
MAX_MIB=48
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "gpu_bundle: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "gpu_bundle: $*" >&2; exit 1; }
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
case "$OUTDIR" in /*) ;; *) OUTDIR=$ROOT/$OUTDIR ;; esac

# ---- the build must be the one the GPU machine can run ------------------------
CACHE=$BUILD/CMakeCache.txt
[ -f "$CACHE" ] || die "no CMake build at $BUILD (run make build first)"
cache() { sed -n "s/^$1:[A-Z]*=//p" "$CACHE" | head -1; }
KILN_LIBS="libkiln.so libkiln_cuda.so libkiln_dist.so"
for f in bin/kiln tests/kiln_tests tests/kiln_dist_tests $KILN_LIBS generated/train/tensorboard.pb.cc; do
  [ -e "$BUILD/$f" ] || die "$BUILD/$f is missing (build the kiln_cli, kiln_tests and kiln_dist_tests targets)"
done
INFO=$("$BUILD/bin/kiln" info) || die "$BUILD/bin/kiln info failed"
grep -q '^  cuda: on' <<<"$INFO" || die "the build at $BUILD has no CUDA backend: $(grep '  cuda:' <<<"$INFO")"
grep -q '^  nccl: on' <<<"$INFO" || die "the build at $BUILD has no NCCL: $(grep '  nccl:' <<<"$INFO")"
grep -q 'architectures.*90' <<<"$INFO" || die "the build at $BUILD is not for sm_90: $(grep '  cuda:' <<<"$INFO")"
[ "$(cache KILN_NATIVE)" != ON ] || die "the build at $BUILD uses -march=native (KILN_NATIVE=ON): not portable"

# ---- a fresh folder ------------------------------------------------------------
if [ -e "$OUTDIR" ]; then
  [ -f "$OUTDIR/BUNDLE_INFO" ] || die "$OUTDIR exists and is not a bundle made by this script: not touching it"
  rm -rf "$OUTDIR"
fi
mkdir -p "$OUTDIR/bin" "$OUTDIR/lib/compat" "$OUTDIR/kit"
B=$OUTDIR

# ---- (a) binaries and the libraries they load ------------------------------------
# Left to the GPU machine: glibc, libstdc++/libgcc (lib/compat has ours) and CUDA's libraries.
SYSTEM_RE='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc[a-z-]*|libnvJitLink)\.so'
cp "$BUILD/bin/kiln" "$B/bin/kiln"
cp "$BUILD/tests/kiln_tests" "$BUILD/tests/kiln_dist_tests" "$B/bin/"
for lib in $KILN_LIBS; do cp "$BUILD/$lib" "$B/lib/"; done
for exe in "$B"/bin/* "$B"/lib/libkiln*.so; do
  ldd "$exe" | awk '/=> \// { print $1, $3 }'
done | sort -u | while read -r soname path; do
  grep -qE "$SYSTEM_RE" <<<"$soname" && continue
  case " $KILN_LIBS " in *" $soname "*) continue ;; esac
  cp -L "$path" "$B/lib/$soname"
done
cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$(g++ -print-file-name=libgcc_s.so.1)" "$B/lib/compat/"
chmod u+w "$B"/bin/* "$B"/lib/*.so*
for exe in "$B"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$exe"; done
for lib in "$B"/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$lib"; done

# ---- (b) the source-build kit -----------------------------------------------------
KIT_PACKAGES="libeigen3-dev nlohmann-json3-dev libcli11-dev libutf8proc-dev libonig-dev libpcre2-dev libopenblas-dev libopenblas-pthread-dev
  libdnnl-dev libprotobuf-dev libisal-dev libgtest-dev"
KIT=$B/kit
LIBDIR=usr/lib/x86_64-linux-gnu
for pkg in $KIT_PACKAGES; do
  dpkg -s "$pkg" >/dev/null 2>&1 || die "Debian package $pkg is not installed (make deps)"
  dpkg -L "$pkg" | while read -r f; do
    case "$f" in /usr/share/doc/*|/usr/share/man/*|/usr/src/*|*/pkgconfig/*) continue ;; esac
    case "$f" in *.a) case "$f" in */libgtest*.a|*/libgmock*.a) ;; *) continue ;; esac ;; esac
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in *.so|*.so.*) continue ;; esac  # shared libraries: below, from lib/
    mkdir -p "$KIT$(dirname "$f")"
    cp -P "$f" "$KIT$f"
  done
done
# The shared libraries: hard links to lib/ (one copy in the archive), with the
# unversioned names the linker looks for.
mkdir -p "$KIT/$LIBDIR"
for lib in "$B"/lib/*.so*; do ln "$lib" "$KIT/$LIBDIR/$(basename "$lib")"; done
for lib in "$KIT/$LIBDIR"/*.so.*; do
  base=$(basename "$lib"); ln -sf "$base" "$KIT/$LIBDIR/${base%%.so.*}.so"
done
mkdir -p "$KIT/generated/train"
cp "$BUILD"/generated/train/tensorboard.pb.{h,cc} "$KIT/generated/train/"
mkdir -p "$KIT/generated/data/tokenizer"
cp "$BUILD"/generated/data/tokenizer/sentencepiece_model.pb.{h,cc} "$KIT/generated/data/tokenizer/"
cat > "$KIT/kit.cmake" <<'EOF'
# Initial cache for a kiln build against this kit alone (Note [GPU bundle] in
# tools/gpu_bundle.sh):  cmake -S <kiln> -B <build> -G Ninja -C <kit>/kit.cmake
# Libraries, headers and CMake packages come from the kit only; CUDA from
# CUDA_HOME (default /usr/local/cuda); cuDNN and NCCL from CUDNN_ROOT and
# NCCL_ROOT in the environment (e.g. the nvidia-cudnn-cu13 and
# nvidia-nccl-cu13 wheels' site-packages/nvidia/cudnn and .../nccl).
get_filename_component(_kit "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
set(_cuda "$ENV{CUDA_HOME}")
if(NOT _cuda)
  set(_cuda /usr/local/cuda)
endif()
set(CMAKE_FIND_ROOT_PATH "${_kit};${_cuda};$ENV{CUDNN_ROOT};$ENV{NCCL_ROOT}" CACHE STRING "kiln kit")
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY CACHE STRING "")
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY CACHE STRING "")
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY CACHE STRING "")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER CACHE STRING "")
set(CMAKE_FIND_USE_PACKAGE_REGISTRY OFF CACHE BOOL "")
set(CMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY OFF CACHE BOOL "")
set(KILN_PROTO_GENERATED_DIR "${_kit}/generated" CACHE PATH "")
set(KILN_MPI OFF CACHE BOOL "")
set(KILN_NCCL ON CACHE STRING "")
set(KILN_CUDA ON CACHE STRING "")
set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "")
set(CMAKE_BUILD_TYPE Release CACHE STRING "")
EOF

# ---- what it is, checksums, archive ---------------------------------------------
{
  echo "kiln GPU bundle (Note [GPU bundle] in tools/gpu_bundle.sh)"
  echo "made: $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "$INFO"
} > "$B/BUNDLE_INFO"
(cd "$B" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum > SHA256SUMS)
ARCHIVE=$OUTDIR.tar.xz
tar -C "$(dirname "$B")" -cf - "$(basename "$B")" | xz -T0 -9 > "$ARCHIVE.tmp"
mv "$ARCHIVE.tmp" "$ARCHIVE"
size=$(stat -c %s "$ARCHIVE")
echo "gpu_bundle: $ARCHIVE: $((size / 1024 / 1024)) MiB ($(du -sh "$B" | cut -f1) unpacked, $(wc -l < "$B/SHA256SUMS") files)"
[ "$size" -le $((MAX_MIB * 1024 * 1024)) ] || die "$ARCHIVE is $((size / 1024 / 1024)) MiB, over the ${MAX_MIB} MiB limit"
