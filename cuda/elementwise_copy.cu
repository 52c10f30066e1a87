// CUDA copy/cast, fill, arange and where. CPU twins: copy, fill, arange and
// where in core/cpu/elementwise.cpp (same conversion rules: bool is
// "nonzero", 16-bit floats go through float and round to nearest even).
#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

template <typename To, typename From>
struct ConvertF {
  __device__ __forceinline__ To operator()(From v) const { return convert<To, From>(v); }
};

template <typename T>
struct FillF {
  double value;
  __device__ __forceinline__ T operator()() const { return convert<T, double>(value); }
};

template <typename T>
struct WhereF {
  __device__ __forceinline__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

template <typename T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = convert<T, double>(start + static_cast<double>(i) * step);
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    if (dst.raw_data() == src.raw_data()) return;
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), static_cast<size_t>(dst.numel()) * dst.element_size(),
                                    cudaMemcpyDeviceToDevice, stream_of(dst)));
    return;
  }
  dispatch_device(dst.dtype(), "copy", [&](auto to) {
    using To = typename decltype(to)::type;
    dispatch_device(src.dtype(), "copy", [&](auto from) {
      using From = typename decltype(from)::type;
      map_kernel<To, From>({&dst, &src}, ConvertF<To, From>{});
    });
  });
}

void fill(const Tensor& dst, double value) {
  dispatch_device(dst.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_kernel<T>({&dst}, FillF<T>{value});
  });
}

void arange(const Tensor& out, double start, double step) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_device(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(n), kThreads, 0, stream_of(out), arange_kernel<T>)(static_cast<T*>(out.raw_data()), n, start, step);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_device(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_kernel<T, bool, T, T>({&out, &cond, &a, &b}, WhereF<T>{});
  });
}

}  // namespace kiln::cuda::kernels
