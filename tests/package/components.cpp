// A program linked to the package's components, kiln::cuda and kiln::dist
// (tests/package/CMakeLists.txt, when the package has both): the CUDA
// backend and the mpi/nccl process groups are there without a request
// loading them. Runs on a machine without a GPU (device_count() may be 0).
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  const bool cuda = kiln::cuda_built();
  const bool mpi = kiln::dist::built_with_mpi(), nccl = kiln::dist::nccl_built();
  std::printf("components: cuda %d (%d devices), mpi %d, nccl %d%s%s\n", cuda, kiln::cuda::device_count(), mpi, nccl,
              nccl ? ", NCCL " : "", nccl ? kiln::dist::nccl_version().c_str() : "");
  if (!cuda) std::printf("components: FAIL: %s\n", kiln::cuda_unavailable_reason().c_str());
  if (!mpi && !nccl) std::printf("components: FAIL: kiln::dist holds neither the mpi nor the nccl group\n");
  return cuda && (mpi || nccl) ? 0 : 1;
}
