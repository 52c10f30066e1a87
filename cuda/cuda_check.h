// KILN_CUDA_CHECK(call): run a CUDA runtime call and turn any failure into a
// kiln::Error naming the call, the CUDA error (name and description), and the
// file and line. For calls whose "failure" is an expected answer
// (cudaErrorNotReady, cudaErrorMemoryAllocation), inspect the cudaError_t
// yourself and pass the others to kiln::cuda_fail().
// KILN_CUBLAS_CHECK(call): the same for cuBLAS / cuBLASLt (cublasStatus_t).
// KILN_CUDNN_CHECK(call): the same for cuDNN (cudnnStatus_t), with cuDNN's
// own last-error text; the file using it includes <cudnn.h> first.
// KILN_CUDA_CHECK_LAUNCH(): after a kernel launch, turns a launch failure
// (bad configuration, no kernel image for the device) into a kiln::Error.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace kiln {

[[noreturn]] inline void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
  // Reset the runtime's "last error" so a later launch check does not report
  // this failure again (sticky errors stay whatever is done).
  (void)cudaGetLastError();
  fail("CUDA error: ", call, " failed with ", cudaGetErrorName(err), " (",
       cudaGetErrorString(err), ") at ", file, ":", line);
}

[[noreturn]] inline void cublas_fail(cublasStatus_t status, const char* call, const char* file, int line) {
  fail("cuBLAS error: ", call, " failed with ", cublasGetStatusName(status), " (", cublasGetStatusString(status),
       ") at ", file, ":", line);
}

}  // namespace kiln

#define KILN_CUDA_CHECK(call)                                                   \
  do {                                                                          \
    const cudaError_t kiln_cuda_err_ = (call);                                  \
    if (kiln_cuda_err_ != cudaSuccess)                                          \
      ::kiln::cuda_fail(kiln_cuda_err_, #call, __FILE__, __LINE__);             \
  } while (0)

#define KILN_CUBLAS_CHECK(call)                                                 \
  do {                                                                          \
    const cublasStatus_t kiln_cublas_status_ = (call);                          \
    if (kiln_cublas_status_ != CUBLAS_STATUS_SUCCESS)                           \
      ::kiln::cublas_fail(kiln_cublas_status_, #call, __FILE__, __LINE__);      \
  } while (0)

#define KILN_CUDNN_CHECK(call)                                                  \
  do {                                                                          \
    const cudnnStatus_t kiln_cudnn_status_ = (call);                            \
    if (kiln_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                           \
      char kiln_cudnn_msg_[512] = {0};                                          \
      cudnnGetLastErrorString(kiln_cudnn_msg_, sizeof kiln_cudnn_msg_);         \
      ::kiln::fail("cuDNN error: ", #call, " failed with ",                     \
                   cudnnGetErrorString(kiln_cudnn_status_), " (",               \
                   kiln_cudnn_msg_, ") at ", __FILE__, ":", __LINE__);          \
    }                                                                           \
  } while (0)

#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())
