// libkiln_cuda's registration with libkiln (Note [Package layout] in
// core/components.h): the one CudaRuntime (cuda/runtime.h) is handed to
// libkiln as this library loads, so the public CUDA API and backend(cuda)
// land here from then on. Also the versions of the CUDA libraries this
// process loaded, and each device's Backend.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#if !defined(KILN_CUDA_EMU)
#include <cudnn.h>
#endif

#include <string>
#include <utility>
#include <vector>

#include "cuda/runtime.h"

namespace kiln::cuda {
namespace {
// CUDA encodes 13000 for 13.0; cuBLASLt and cuDNN 9 encode major * 10000 + minor * 100 + patch.
std::string cuda_style(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
[[maybe_unused]] std::string lib_style(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// Never destroyed: tensors freed at exit still reach the allocators through it.
struct Registrar {
  Registrar() { detail::register_cuda_hooks(new CudaRuntime); }
};
const Registrar registrar;

}  // namespace

Backend& CudaRuntime::backend(int device) { return detail::cuda_backend(device); }

std::vector<std::pair<std::string, std::string>> CudaRuntime::library_versions() {
  std::vector<std::pair<std::string, std::string>> out;
  int driver = 0, runtime = 0;
  out.emplace_back("CUDA driver", cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0
                                      ? cuda_style(driver)
                                      : std::string("none (no NVIDIA driver)"));
  out.emplace_back("CUDA runtime", cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cuda_style(runtime) : "unknown");
#if defined(KILN_CUDA_EMU)
  // Note [Emulated CUDA device]: stand-ins, not NVIDIA's libraries.
  out.emplace_back("cuBLASLt", "emulated (reference GEMM, cuda/emu/include/cublasLt.h)");
  out.emplace_back("cuDNN", "none (emulated device: fused attention declines)");
#else
  out.emplace_back("cuBLASLt", lib_style(cublasLtGetVersion()));
  out.emplace_back("cuDNN", lib_style(cudnnGetVersion()) + " (compiled against " +
                                lib_style(static_cast<size_t>(CUDNN_VERSION)) + ", built for CUDA " +
                                cuda_style(static_cast<int>(cudnnGetCudartVersion())) + ")");
#endif
  return out;
}

}  // namespace kiln::cuda
