#include "core/build_info.h"
#include "kiln/version.h"

// Set for this file by the top CMakeLists.txt (and cmake/KilnCuda.cmake).
#ifndef KILN_BUILD_VERSION
#define KILN_BUILD_VERSION "unknown"
#endif
#ifndef KILN_BUILD_CPU_ARCH
#define KILN_BUILD_CPU_ARCH "unknown"
#endif
#ifndef KILN_BUILD_CUDA
#define KILN_BUILD_CUDA "off"
#endif
#ifndef KILN_BUILD_NCCL
#define KILN_BUILD_NCCL "off"
#endif
#ifndef KILN_BUILD_MPI
#define KILN_BUILD_MPI "off"
#endif

namespace kiln {

const char* version() { return KILN_BUILD_VERSION; }

std::vector<std::pair<std::string, std::string>> build_info() {
  return {
      {"version", KILN_BUILD_VERSION},
      {"compiler", __VERSION__},
      {"cpu arch", KILN_BUILD_CPU_ARCH},
      {"cuda", KILN_BUILD_CUDA},
      {"nccl", KILN_BUILD_NCCL},
      {"mpi", KILN_BUILD_MPI},
  };
}

}  // namespace kiln
