// CUDA gather/scatter along one dim: index_select and a deterministic
// index_add (the embedding lookup and its backward). CPU twin:
// core/cpu/index.cpp. Tensors are viewed as (outer, dim, inner) blocks of
// contiguous memory (ops/ passes contiguous operands).
//
// Note [Deterministic index_add]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Several index entries may name the same output row (a token that occurs
// twice in a batch). Float atomics would add their rows in whatever order the
// hardware runs them, so the result would change from run to run. Instead the
// index is sorted with its positions by a stable radix sort (cub), which
// groups equal targets and keeps each group in index order. One thread per
// (group, column) then adds the group's source rows in that order, rounding
// to the element type after each add exactly as the CPU twin does: the result
// is the CPU's, bit for bit, and the same on every run.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

struct Blocks {
  int64_t outer = 1, inner = 1;
};

Blocks blocks_of(const Tensor& t, int64_t dim) {
  Blocks b;
  for (int64_t d = 0; d < dim; ++d) b.outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); ++d) b.inner *= t.size(d);
  return b;
}

// out[o, j, c] = in[o, idx[j], c] with elements moved as W-byte words.
template <typename W>
__global__ void index_select_kernel(W* out, const W* in, const int64_t* idx, int64_t n_idx, int64_t n_in,
                                    int64_t inner, int64_t total) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % inner, t = i / inner;
    const int64_t j = t % n_idx, o = t / n_idx;
    out[i] = in[(o * n_in + idx[j]) * inner + c];
  }
}

// Thread (o, p, c): if sorted position p starts a group of equal targets,
// out[o, key, c] += src[o, pos[q], c] for q over the group, in order.
template <typename T>
__global__ void index_add_sorted_kernel(T* out, const T* src, const uint64_t* keys, const int64_t* pos,
                                        int64_t n_idx, int64_t n_out, int64_t inner, int64_t total) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % inner, t = i / inner;
    const int64_t p = t % n_idx, o = t / n_idx;
    const uint64_t key = keys[p];
    if (p > 0 && keys[p - 1] == key) continue;
    T* dst = out + (o * n_out + static_cast<int64_t>(key)) * inner + c;
    T v = *dst;
    for (int64_t q = p; q < n_idx && keys[q] == key; ++q)
      v = from_acc<T>(to_acc(v) + to_acc(src[(o * n_idx + pos[q]) * inner + c]));
    *dst = v;
  }
}

int bits_for(int64_t n) {
  int b = 1;
  while (b < 63 && (int64_t{1} << b) < n) ++b;
  return b;
}

}  // namespace

void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  const Blocks b = blocks_of(in, dim);
  const int64_t n_in = in.size(dim), n_idx = index.numel();
  const int64_t total = b.outer * n_idx * b.inner;
  if (total == 0) return;
  const cudaStream_t stream = stream_of(out);
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  auto launch = [&](auto word) {
    using W = decltype(word);
    index_select_kernel<W><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<W*>(out.raw_data()), static_cast<const W*>(in.raw_data()), idx, n_idx, n_in, b.inner, total);
    KILN_CUDA_CHECK_LAUNCH();
  };
  switch (in.element_size()) {
    case 1: return launch(uint8_t{});
    case 2: return launch(uint16_t{});
    case 4: return launch(uint32_t{});
    case 8: return launch(uint64_t{});
    default: fail("index_select: unsupported element size ", in.element_size());
  }
}

void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const Blocks b = blocks_of(out, dim);
  const int64_t n_out = out.size(dim), n_idx = index.numel();
  const int64_t total = b.outer * n_idx * b.inner;
  if (total == 0) return;
  KILN_CHECK(out.dtype() != DType::Bool, "index_add: not defined for bool tensors");
  KILN_CHECK(n_idx < (int64_t{1} << 31), "index_add: index of ", n_idx, " entries is too long for one sort");
  const Device dev = out.device();
  const cudaStream_t stream = stream_of(out);
  // Sort (target, position) pairs by target, stably (Note [Deterministic index_add]).
  Tensor positions = empty_tensor({n_idx}, DType::Int64, dev);
  arange(positions, 0.0, 1.0);
  Tensor keys_sorted = empty_tensor({n_idx}, DType::Int64, dev);
  Tensor pos_sorted = empty_tensor({n_idx}, DType::Int64, dev);
  const auto* keys_in = static_cast<const uint64_t*>(index.raw_data());  // validated >= 0 by ops/
  auto* keys_out = static_cast<uint64_t*>(keys_sorted.raw_data());
  const auto* pos_in = static_cast<const int64_t*>(positions.raw_data());
  auto* pos_out = static_cast<int64_t*>(pos_sorted.raw_data());
  const int end_bit = bits_for(n_out);
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                  static_cast<int>(n_idx), 0, end_bit, stream));
  Tensor temp = empty_tensor({static_cast<int64_t>((temp_bytes + 7) / 8)}, DType::Int64, dev);
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                  static_cast<int>(n_idx), 0, end_bit, stream));
  dispatch_device(out.dtype(), "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      index_add_sorted_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(src.raw_data()), keys_out, pos_out, n_idx, n_out,
          b.inner, total);
      KILN_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace kiln::cuda::kernels
