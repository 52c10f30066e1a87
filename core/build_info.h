// How this kiln was built, as (name, value) pairs: version, compiler, the CPU
// instruction set it was compiled for, and which optional parts are in
// (CUDA with its architectures, cuDNN, NCCL, MPI). `kiln info` prints them
// with the runtime's own view (cuda::library_versions()); the GPU check
// (tools/gpu_check.sh) reads them to fail loudly when a part it needs is out.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kiln {

std::vector<std::pair<std::string, std::string>> build_info();

}  // namespace kiln
