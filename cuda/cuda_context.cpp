// Compiled only in CUDA builds: reports that the backend is built in, and the
// versions of the CUDA libraries this process loaded. Device kernels register
// themselves through register_cuda_backend() (core/backend.h).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "cuda/cuda.h"

namespace kiln {
bool cuda_built() { return true; }
}  // namespace kiln

namespace kiln::cuda {
namespace {
// CUDA encodes 13000 for 13.0; cuBLASLt and cuDNN 9 encode major * 10000 + minor * 100 + patch.
std::string cuda_style(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
std::string lib_style(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}
}  // namespace

std::vector<std::pair<std::string, std::string>> library_versions() {
  std::vector<std::pair<std::string, std::string>> out;
  int driver = 0, runtime = 0;
  out.emplace_back("CUDA driver", cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0
                                      ? cuda_style(driver)
                                      : std::string("none (no NVIDIA driver)"));
  out.emplace_back("CUDA runtime", cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cuda_style(runtime) : "unknown");
  out.emplace_back("cuBLASLt", lib_style(cublasLtGetVersion()));
  out.emplace_back("cuDNN", lib_style(cudnnGetVersion()) + " (compiled against " +
                                lib_style(static_cast<size_t>(CUDNN_VERSION)) + ", built for CUDA " +
                                cuda_style(static_cast<int>(cudnnGetCudartVersion())) + ")");
  return out;
}

}  // namespace kiln::cuda
