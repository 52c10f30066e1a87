// CUDA gather and scatter along one dim (core/backend.h states the contract).
// CPU twin: core/cpu/gather_scatter.cpp. scatter (and scatter_add) use no
// atomics: (target, position) pairs are sorted by target with cub's stable
// radix sort and one thread per target folds its entries in row-major order
// of the index, so the result is the CPU's bit for bit (Note [Deterministic
// scatter_add], ops/gather_scatter.cpp).
//
// ops/ validates every index value on the host before these run; the kernels
// still treat a value outside [0, size(dim)) as absent (gather writes 0,
// scatter skips it), so no input can make them touch memory out of bounds.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

// index's sizes and the indexed tensor's strides (elements), by value.
struct Geom {
  int nd = 0, dim = 0;
  int64_t dim_size = 0;
  int64_t sizes[cpu::kMaxLoopDims];
  int64_t strides[cpu::kMaxLoopDims];
};

Geom geom_of(const Tensor& index, const Tensor& t, int64_t dim) {
  KILN_CHECK(index.dim() <= cpu::kMaxLoopDims, "gather/scatter: tensors with more than ", cpu::kMaxLoopDims,
             " dims are not supported");
  Geom g;
  g.nd = static_cast<int>(index.dim());
  g.dim = static_cast<int>(dim);
  g.dim_size = t.size(dim);
  for (int d = 0; d < g.nd; ++d) {
    g.sizes[d] = index.size(d);
    g.strides[d] = t.stride(d);
  }
  return g;
}

// Offset in the indexed tensor of index position p (row-major) holding idx.
__device__ __forceinline__ int64_t target_offset(const Geom& g, int64_t p, int64_t idx) {
  int64_t off = 0;
  for (int d = g.nd - 1; d >= 0; --d) {
    const int64_t c = p % g.sizes[d];
    p /= g.sizes[d];
    off += (d == g.dim ? idx : c) * g.strides[d];
  }
  return off;
}

// out[p] = in[target(p)], elements moved as W-byte words; 0 for an index out of range.
template <typename W>
__global__ void gather_kernel(W* out, const W* in, const int64_t* index, int64_t n, Geom g) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const int64_t idx = index[p];
    out[p] = idx >= 0 && idx < g.dim_size ? in[target_offset(g, p, idx)] : W(0);
  }
}

// keys[p] = target(p) in out (contiguous), or `absent` for an index out of range; pos[p] = p.
__global__ void scatter_keys_kernel(uint64_t* keys, int64_t* pos, const int64_t* index, int64_t n, Geom g,
                                    uint64_t absent) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const int64_t idx = index[p];
    keys[p] = idx >= 0 && idx < g.dim_size ? static_cast<uint64_t>(target_offset(g, p, idx)) : absent;
    pos[p] = p;
  }
}

// Thread q: if sorted position q starts a group of one target, fold the
// group's sources (in position order) into out[target].
template <typename T, bool kAdd>
__global__ void scatter_fold_kernel(T* out, const T* src, const uint64_t* keys, const int64_t* pos, int64_t n,
                                    uint64_t absent) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < n; q += step) {
    const uint64_t key = keys[q];
    if (key == absent || (q > 0 && keys[q - 1] == key)) continue;
    T v = out[key];
    for (int64_t r = q; r < n && keys[r] == key; ++r) {
      if constexpr (kAdd) v = from_acc<T>(to_acc(v) + to_acc(src[pos[r]]));
      else v = src[pos[r]];
    }
    out[key] = v;
  }
}

int bits_for(uint64_t n) {
  int b = 1;
  while (b < 64 && (uint64_t{1} << b) < n) ++b;
  return b;
}

}  // namespace

void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Geom g = geom_of(index, in, dim);
  const cudaStream_t stream = stream_of(out);
  const auto* idx = static_cast<const int64_t*>(index.raw_data());
  auto launch = [&](auto word) {
    using W = decltype(word);
    KILN_LAUNCH(grid_for(n), kThreads, 0, stream, gather_kernel<W>)(static_cast<W*>(out.raw_data()),
                                                           static_cast<const W*>(in.raw_data()), idx, n, g);
    KILN_CUDA_CHECK_LAUNCH();
  };
  switch (in.element_size()) {
    case 1: return launch(uint8_t{});
    case 2: return launch(uint16_t{});
    case 4: return launch(uint32_t{});
    case 8: return launch(uint64_t{});
    default: fail("gather: unsupported element size ", in.element_size());
  }
}

void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const char* op = add ? "scatter_add" : "scatter";
  KILN_CHECK(!(add && out.dtype() == DType::Bool), op, ": not defined for bool tensors");
  KILN_CHECK(n < (int64_t{1} << 31), op, ": index of ", n, " entries is too long for one sort");
  const Device dev = out.device();
  const cudaStream_t stream = stream_of(out);
  const Geom g = geom_of(index, out, dim);
  const auto absent = static_cast<uint64_t>(out.numel());
  // (target, position) pairs sorted by target, stably (Note [Deterministic scatter_add]).
  Tensor keys = empty_tensor({n}, DType::Int64, dev), pos = empty_tensor({n}, DType::Int64, dev);
  Tensor keys_sorted = empty_tensor({n}, DType::Int64, dev), pos_sorted = empty_tensor({n}, DType::Int64, dev);
  auto* k_in = static_cast<uint64_t*>(keys.raw_data());
  auto* k_out = static_cast<uint64_t*>(keys_sorted.raw_data());
  auto* p_in = static_cast<int64_t*>(pos.raw_data());
  auto* p_out = static_cast<int64_t*>(pos_sorted.raw_data());
  KILN_LAUNCH(grid_for(n), kThreads, 0, stream, scatter_keys_kernel)(k_in, p_in, static_cast<const int64_t*>(index.raw_data()),
                                                            n, g, absent);
  KILN_CUDA_CHECK_LAUNCH();
  const int end_bit = bits_for(absent + 1);
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, p_in, p_out, static_cast<int>(n),
                                                  0, end_bit, stream));
  Tensor temp = empty_tensor({static_cast<int64_t>((temp_bytes + 7) / 8)}, DType::Int64, dev);
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, k_in, k_out, p_in, p_out,
                                                  static_cast<int>(n), 0, end_bit, stream));
  dispatch_device(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.raw_data());
    const T* s = static_cast<const T*>(src.raw_data());
    if constexpr (std::is_same_v<T, bool>) {
      KILN_LAUNCH(grid_for(n), kThreads, 0, stream, scatter_fold_kernel<T, false>)(o, s, k_out, p_out, n, absent);
    } else if (add) {
      KILN_LAUNCH(grid_for(n), kThreads, 0, stream, scatter_fold_kernel<T, true>)(o, s, k_out, p_out, n, absent);
    } else {
      KILN_LAUNCH(grid_for(n), kThreads, 0, stream, scatter_fold_kernel<T, false>)(o, s, k_out, p_out, n, absent);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda::kernels
