// CUDA sort, cumsum and multinomial (core/backend.h states each contract).
// CPU twin: core/cpu/sort_scan.cpp; each kernel runs the twin's arithmetic in
// the twin's order, so results agree bit for bit:
//  - sort: the same 64-bit keys (Note [Sort keys], ops/sort_scan_ops.cpp),
//    sorted per row by cub's stable segmented sort with the column index as
//    value, so ties keep index order as std::sort of (key, index) does;
//  - cumsum: one thread per (outer, inner) line adds along the dim in order
//    in acc_t (the CPU's compute_t): deterministic, no parallel scan whose
//    tree would round differently;
//  - multinomial: one thread per row runs the CPU's float64 inverse-CDF
//    search (Note [Multinomial sampling], ops/multinomial.cpp); rows are few
//    when sampling from a model, and each row's adds are dependent anyway.
#include <cub/device/device_segmented_sort.cuh>

#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

// Note [Sort keys]: the CPU's sort_key (core/cpu/sort_scan.cpp).
template <typename T>
__device__ __forceinline__ uint64_t sort_key(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 1u : 0u;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v)) ^ (uint64_t{1} << 63);
  } else {
    double d = static_cast<double>(to_acc(v));
    if (d != d) return ~uint64_t{0};
    if (d == 0.0) d = 0.0;
    const auto b = static_cast<uint64_t>(__double_as_longlong(d));
    return (b >> 63) ? ~b : b | (uint64_t{1} << 63);
  }
}

template <typename T>
__global__ void sort_keys_kernel(uint64_t* keys, int64_t* cols, const T* in, int64_t n, int64_t C, bool descending) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint64_t k = sort_key(in[i]);
    keys[i] = descending ? ~k : k;
    cols[i] = i % C;
  }
}

// values[r, q] = in[r, indices[r, q]], moved as W-byte words.
template <typename W>
__global__ void take_rows_kernel(W* values, const W* in, const int64_t* indices, int64_t n, int64_t C) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    values[i] = in[(i / C) * C + indices[i]];
}

// Line l = (o, c) of (outer, n, inner): running sum along n in acc_t.
template <typename T>
__global__ void cumsum_kernel(T* out, const T* in, int64_t lines, int64_t n, int64_t inner, bool reverse) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += step) {
    const int64_t o = l / inner, c = l % inner;
    acc_t<T> acc = acc_t<T>(0);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t j = reverse ? n - 1 - s : s;
      const int64_t i = (o * n + j) * inner + c;
      acc = acc + to_acc(in[i]);
      out[i] = from_acc<T>(acc);
    }
  }
}

// Note [Multinomial sampling]: one thread per row; w (R, C) is its scratch
// (the CDF with replacement, the weights left without).
__global__ void multinomial_kernel(int64_t* out, const double* p, const double* u, double* w, int64_t R, int64_t C,
                                   int64_t n, bool replacement) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < R; r += step) {
    const double* pr = p + r * C;
    double* wr = w + r * C;
    if (replacement) {
      double acc = 0.0;
      for (int64_t j = 0; j < C; ++j) wr[j] = acc = __dadd_rn(acc, pr[j]);
      const double total = acc;
      for (int64_t s = 0; s < n; ++s) {
        const double t = __dmul_rn(u[r * n + s], total);
        int64_t lo = 0, hi = C;  // first j with cdf[j] > t (std::upper_bound)
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          if (wr[mid] > t) hi = mid; else lo = mid + 1;
        }
        if (lo == C) {  // first j with cdf[j] >= total (std::lower_bound)
          lo = 0, hi = C;
          while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (wr[mid] >= total) hi = mid; else lo = mid + 1;
          }
        }
        out[r * n + s] = lo;
      }
    } else {
      for (int64_t j = 0; j < C; ++j) wr[j] = pr[j];
      for (int64_t s = 0; s < n; ++s) {
        double total = 0.0;
        for (int64_t j = 0; j < C; ++j) total = __dadd_rn(total, wr[j]);
        const double t = __dmul_rn(u[r * n + s], total);
        double acc = 0.0;
        int64_t pick = -1, last = -1;
        for (int64_t j = 0; j < C; ++j) {
          const double wj = wr[j];
          if (wj <= 0.0) continue;
          last = j;
          acc = __dadd_rn(acc, wj);
          if (acc > t) { pick = j; break; }
        }
        if (pick < 0) pick = last < 0 ? 0 : last;
        out[r * n + s] = pick;
        wr[pick] = 0.0;
      }
    }
  }
}

template <typename F>
void by_word_size(size_t size, const char* op, F&& f) {
  switch (size) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: fail(op, ": unsupported element size ", size);
  }
}

}  // namespace

void sort(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending) {
  const int64_t C = in.dim() == 0 ? 1 : in.size(-1);
  const int64_t n = in.numel();
  if (n == 0) return;
  const int64_t R = n / C;
  const Device dev = in.device();
  const cudaStream_t stream = stream_of(in);
  Tensor keys = empty_tensor({n}, DType::Int64, dev), keys_sorted = empty_tensor({n}, DType::Int64, dev);
  Tensor cols = empty_tensor({n}, DType::Int64, dev);
  Tensor offsets = empty_tensor({R + 1}, DType::Int64, dev);  // row r: [r * C, (r + 1) * C)
  arange(offsets, 0.0, static_cast<double>(C));
  auto* k_in = static_cast<uint64_t*>(keys.raw_data());
  auto* k_out = static_cast<uint64_t*>(keys_sorted.raw_data());
  auto* c_in = static_cast<int64_t*>(cols.raw_data());
  auto* c_out = static_cast<int64_t*>(indices.raw_data());
  const auto* off = static_cast<const int64_t*>(offsets.raw_data());
  dispatch_device(in.dtype(), "sort", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(n), kThreads, 0, stream, sort_keys_kernel<T>)(k_in, c_in, static_cast<const T*>(in.raw_data()), n, C,
                                                              descending);
    KILN_CUDA_CHECK_LAUNCH();
  });
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, temp_bytes, k_in, k_out, c_in, c_out, n, R, off,
                                                            off + 1, stream));
  Tensor temp = empty_tensor({static_cast<int64_t>((temp_bytes + 7) / 8)}, DType::Int64, dev);
  KILN_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(temp.raw_data(), temp_bytes, k_in, k_out, c_in, c_out, n,
                                                            R, off, off + 1, stream));
  by_word_size(in.element_size(), "sort", [&](auto word) {
    using W = decltype(word);
    KILN_LAUNCH(grid_for(n), kThreads, 0, stream, take_rows_kernel<W>)(static_cast<W*>(values.raw_data()),
                                                              static_cast<const W*>(in.raw_data()), c_out, n, C);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void cumsum(const Tensor& out, const Tensor& in, int64_t dim, bool reverse) {
  if (out.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  const int64_t n = in.dim() == 0 ? 1 : in.size(dim), lines = outer * inner;
  const cudaStream_t stream = stream_of(out);
  dispatch_device(in.dtype(), "cumsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      fail("cumsum: internal: bool input reached the kernel (ops/ casts it to int64)");
    } else {
      KILN_LAUNCH(grid_for(lines), kThreads, 0, stream, cumsum_kernel<T>)(static_cast<T*>(out.raw_data()),
                                                                 static_cast<const T*>(in.raw_data()), lines, n,
                                                                 inner, reverse);
      KILN_CUDA_CHECK_LAUNCH();
    }
  });
}

void multinomial(const Tensor& out, const Tensor& probs, const Tensor& u, bool replacement) {
  const int64_t R = probs.size(0), C = probs.size(1), n = out.size(1);
  if (R == 0 || n == 0) return;
  Tensor scratch = empty_tensor({R, C}, DType::Float64, probs.device());
  KILN_LAUNCH(grid_for(R, 64), 64, 0, stream_of(out), multinomial_kernel)(
      static_cast<int64_t*>(out.raw_data()), static_cast<const double*>(probs.raw_data()),
      static_cast<const double*>(u.raw_data()), static_cast<double*>(scratch.raw_data()), R, C, n, replacement);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda::kernels
