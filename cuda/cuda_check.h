// KILN_CUDA_CHECK(call): run a CUDA runtime call and turn any failure into a
// kiln::Error naming the call, the CUDA error (name and description), and the
// file and line. For calls whose "failure" is an expected answer
// (cudaErrorNotReady, cudaErrorMemoryAllocation), inspect the cudaError_t
// yourself and pass the others to kiln::cuda_fail().
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace kiln {

[[noreturn]] inline void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
  fail("CUDA error: ", call, " failed with ", cudaGetErrorName(err), " (",
       cudaGetErrorString(err), ") at ", file, ":", line);
}

}  // namespace kiln

#define KILN_CUDA_CHECK(call)                                                   \
  do {                                                                          \
    const cudaError_t kiln_cuda_err_ = (call);                                  \
    if (kiln_cuda_err_ != cudaSuccess)                                          \
      ::kiln::cuda_fail(kiln_cuda_err_, #call, __FILE__, __LINE__);             \
  } while (0)
