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
// groups equal targets and keeps each group in index order. A group of at
// most kChunk entries is added by one thread per (group, column) in that
// order, rounding to the element type after each add exactly as the CPU twin
// does: the result is the CPU's, bit for bit, and the same on every run.
//
// A longer group would leave a few hundred threads adding thousands of rows
// each in series (BERT's token_type_ids are all 0: one group of B*T entries).
// So it is cut, from its first entry, into chunks of kChunk entries: one
// thread per (chunk, column) sums its chunk in order, in the accumulation
// type, into a scratch slot, and a second kernel adds the slots to the output
// row in chunk order and rounds once. Every sum still has one fixed order, so
// the bits are the same on every run, independent of timing; they differ from
// the CPU's serial order by rounding only (integers not at all).
// tests/test_cuda_index.cpp replays this order on the CPU and expects the
// device's bits. The scratch slot of a chunk starting at sorted position p is
// 2 * (p / kChunk) + (p starts its group): a kChunk-aligned window of
// positions holds at most one chunk that starts a long group (the group is
// longer than the window) and at most one that continues one (the chunks of a
// group lie kChunk apart, and a second group would have to start and run
// kChunk entries inside the window).
//
// Entries outside [0, rows) sort last under one sentinel key and are dropped.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/device_utils.cuh"

namespace kiln::cuda::kernels {
namespace {

constexpr int64_t kChunk = 128;  // index_add: entries one thread adds in series

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

// keys[i] = idx[i], or n_out (the sentinel, sorted last) outside [0, n_out); pos[i] = i.
__global__ void index_keys_kernel(uint64_t* keys, int64_t* pos, const int64_t* idx, int64_t n, int64_t n_out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t k = idx[i];
    keys[i] = static_cast<uint64_t>(k >= 0 && k < n_out ? k : n_out);
    pos[i] = i;
  }
}

// starts[p] = the first sorted position holding keys[p] (keys ascending).
__global__ void group_starts_kernel(int64_t* starts, const uint64_t* keys, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const uint64_t key = keys[p];
    int64_t lo = 0, hi = p;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < key) lo = mid + 1;
      else hi = mid;
    }
    starts[p] = lo;
  }
}

// Does the group of sorted position p run past the chunk that starts at p?
__device__ __forceinline__ bool runs_past_chunk(const uint64_t* keys, int64_t p, int64_t n_idx) {
  return p + kChunk < n_idx && keys[p + kChunk] == keys[p];
}

// Thread (o, p, c) with p the start of a chunk (Note [Deterministic index_add]):
// a group of at most kChunk entries is added to out[o, key, c] in order with
// the CPU's rounding; a chunk of a longer group is summed into its slot of
// partials (outer, slots, inner).
template <typename T>
__global__ void index_add_chunks_kernel(T* out, acc_t<T>* partials, const T* src, const uint64_t* keys,
                                        const int64_t* pos, const int64_t* starts, int64_t n_idx, int64_t n_out,
                                        int64_t inner, int64_t slots, int64_t total) {
  using A = acc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % inner, t = i / inner;
    const int64_t p = t % n_idx, o = t / n_idx;
    const uint64_t key = keys[p];
    const int64_t off = p - starts[p];
    if (key == static_cast<uint64_t>(n_out) || off % kChunk != 0) continue;
    const T* s = src + o * n_idx * inner + c;
    if (off == 0 && !runs_past_chunk(keys, p, n_idx)) {
      T* dst = out + (o * n_out + static_cast<int64_t>(key)) * inner + c;
      T v = *dst;
      for (int64_t q = p; q < n_idx && keys[q] == key; ++q) v = from_acc<T>(to_acc(v) + to_acc(s[pos[q] * inner]));
      *dst = v;
      continue;
    }
    A a = A(0);
    const int64_t end = p + kChunk < n_idx ? p + kChunk : n_idx;
    for (int64_t q = p; q < end && keys[q] == key; ++q) a = a + to_acc(s[pos[q] * inner]);
    partials[(o * slots + 2 * (p / kChunk) + (off == 0 ? 1 : 0)) * inner + c] = a;
  }
}

// Thread (o, p, c) with p the start of a group longer than kChunk:
// out[o, key, c] += its chunks' partials in chunk order, rounded once.
template <typename T>
__global__ void index_add_long_kernel(T* out, const acc_t<T>* partials, const uint64_t* keys, const int64_t* starts,
                                      int64_t n_idx, int64_t n_out, int64_t inner, int64_t slots, int64_t total) {
  using A = acc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % inner, t = i / inner;
    const int64_t p = t % n_idx, o = t / n_idx;
    const uint64_t key = keys[p];
    if (key == static_cast<uint64_t>(n_out) || starts[p] != p || !runs_past_chunk(keys, p, n_idx)) continue;
    T* dst = out + (o * n_out + static_cast<int64_t>(key)) * inner + c;
    A a = to_acc(*dst);
    for (int64_t q = p; q < n_idx && keys[q] == key; q += kChunk)
      a = a + partials[(o * slots + 2 * (q / kChunk) + (q == p ? 1 : 0)) * inner + c];
    *dst = from_acc<T>(a);
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
  Tensor keys = empty_tensor({n_idx}, DType::Int64, dev), positions = empty_tensor({n_idx}, DType::Int64, dev);
  Tensor keys_sorted = empty_tensor({n_idx}, DType::Int64, dev), pos_sorted = empty_tensor({n_idx}, DType::Int64, dev);
  auto* keys_in = static_cast<uint64_t*>(keys.raw_data());
  auto* keys_out = static_cast<uint64_t*>(keys_sorted.raw_data());
  auto* pos_in = static_cast<int64_t*>(positions.raw_data());
  auto* pos_out = static_cast<int64_t*>(pos_sorted.raw_data());
  index_keys_kernel<<<grid_for(n_idx), kThreads, 0, stream>>>(keys_in, pos_in,
                                                              static_cast<const int64_t*>(index.raw_data()), n_idx,
                                                              n_out);
  KILN_CUDA_CHECK_LAUNCH();
  const int end_bit = bits_for(n_out + 1);  // the sentinel n_out included
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                  static_cast<int>(n_idx), 0, end_bit, stream));
  Tensor temp = empty_tensor({static_cast<int64_t>((temp_bytes + 7) / 8)}, DType::Int64, dev);
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                  static_cast<int>(n_idx), 0, end_bit, stream));
  Tensor starts = empty_tensor({n_idx}, DType::Int64, dev);
  auto* st = static_cast<int64_t*>(starts.raw_data());
  group_starts_kernel<<<grid_for(n_idx), kThreads, 0, stream>>>(st, keys_out, n_idx);
  KILN_CUDA_CHECK_LAUNCH();
  // Long groups (more than kChunk entries) exist only when n_idx > kChunk.
  const bool long_groups = n_idx > kChunk;
  const int64_t slots = 2 * ((n_idx + kChunk - 1) / kChunk);
  dispatch_device(out.dtype(), "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using A = acc_t<T>;
      Tensor scratch;
      A* partials = nullptr;
      if (long_groups) {
        const int64_t bytes = b.outer * slots * b.inner * static_cast<int64_t>(sizeof(A));
        scratch = empty_tensor({(bytes + 7) / 8}, DType::Int64, dev);
        partials = static_cast<A*>(scratch.raw_data());
      }
      T* o = static_cast<T*>(out.raw_data());
      index_add_chunks_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
          o, partials, static_cast<const T*>(src.raw_data()), keys_out, pos_out, st, n_idx, n_out, b.inner, slots,
          total);
      KILN_CUDA_CHECK_LAUNCH();
      if (long_groups) {
        index_add_long_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(o, partials, keys_out, st, n_idx, n_out,
                                                                           b.inner, slots, total);
        KILN_CUDA_CHECK_LAUNCH();
      }
    }
  });
}

}  // namespace kiln::cuda::kernels
