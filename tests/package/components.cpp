// A program linked to the package's components, kiln::cuda and kiln::dist
// (tests/package/CMakeLists.txt, when the package has both): both libraries
// are loaded at start-up, before any kiln call could load them (the
// components keep them on the link despite --as-needed), and the CUDA
// backend and the mpi or nccl group are there. Runs on a machine without a
// GPU (device_count() may be 0).
#include <kiln/kiln.h>
#include <link.h>

#include <cstdio>
#include <cstring>

namespace {

// Whether a shared library named `name` (file name) is loaded.
bool loaded(const char* name) {
  struct Query {
    const char* name;
    bool found;
  } q{name, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* query = static_cast<Query*>(data);
        const char* slash = info->dlpi_name != nullptr ? std::strrchr(info->dlpi_name, '/') : nullptr;
        if (slash != nullptr && std::strcmp(slash + 1, query->name) == 0) query->found = true;
        return 0;
      },
      &q);
  return q.found;
}

}  // namespace

int main() {
  const bool at_start = loaded("libkiln_cuda.so") && loaded("libkiln_dist.so");
  const bool cuda = kiln::cuda_built();
  const bool mpi = kiln::dist::built_with_mpi(), nccl = kiln::dist::nccl_built();
  std::printf("components: loaded at start-up %d; cuda %d (%d devices), mpi %d, nccl %d%s%s\n", at_start, cuda,
              kiln::cuda::device_count(), mpi, nccl, nccl ? ", NCCL " : "",
              nccl ? kiln::dist::nccl_version().c_str() : "");
  if (!at_start) std::printf("components: FAIL: libkiln_cuda.so and libkiln_dist.so were not loaded at start-up\n");
  if (!cuda) std::printf("components: FAIL: %s\n", kiln::cuda_unavailable_reason().c_str());
  if (!mpi && !nccl) std::printf("components: FAIL: kiln::dist holds neither the mpi nor the nccl group\n");
  return at_start && cuda && (mpi || nccl) ? 0 : 1;
}
