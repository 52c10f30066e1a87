// Integer batched matmul on CUDA: a plain kernel, one thread per output
// element (cuBLASLt has no int64 GEMM; integer matmul is rare in kiln).
// CPU twin: eigen_batched() in core/cpu/gemm.cpp.
#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

struct Strides3 {
  int64_t b, r, c;  // elements
};

template <typename T>
__global__ void matmul_int_kernel(T* out, const T* a, const T* b, int64_t Bt, int64_t M, int64_t N, int64_t K,
                                  Strides3 sa, Strides3 sb) {
  const int64_t total = Bt * M * N, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t n = i % N, m = (i / N) % M, bt = i / (M * N);
    const T* ar = a + bt * sa.b + m * sa.r;
    const T* bc = b + bt * sb.b + n * sb.c;
    T acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += ar[k * sa.c] * bc[k * sb.r];
    out[i] = acc;
  }
}

}  // namespace

void matmul_integer(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t Bt = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  if (out.numel() == 0) return;
  KILN_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "internal: integer matmul operands must be ",
             dtype_name(out.dtype()));
  const Strides3 sa{a.stride(0), a.stride(1), a.stride(2)}, sb{b.stride(0), b.stride(1), b.stride(2)};
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(out.numel()), kThreads, 0, stream_of(out), matmul_int_kernel<T>)(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()), Bt,
        M, N, K, sa, sb);
    KILN_CUDA_CHECK_LAUNCH();
  };
  if (out.dtype() == DType::Int32) run(TypeTag<int32_t>{});
  else if (out.dtype() == DType::Int64) run(TypeTag<int64_t>{});
  else fail("matmul_integer: not defined for ", dtype_name(out.dtype()));
}

}  // namespace kiln::cuda::kernels
