// CPU gather/scatter along one dim: index_select and a deterministic
// index_add (embedding lookup and its backward). Tensors are viewed as
// (outer, dim, inner) blocks; contiguous operands are required (ops/ ensures).
#include <cstring>

#include "core/cpu/cpu_kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
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

}  // namespace

void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  const Blocks b = blocks_of(in, dim);
  const int64_t n_in = in.size(dim), n_idx = index.numel();
  const int64_t* idx = index.data_ptr<int64_t>();
  const size_t row_bytes = static_cast<size_t>(b.inner) * in.element_size();
  const char* src = static_cast<const char*>(in.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  parallel_for(b.outer * n_idx, std::max<int64_t>(1, 65536 / std::max<size_t>(row_bytes, 1)),
               [&](int64_t s, int64_t e) {
                 for (int64_t k = s; k < e; ++k) {
                   const int64_t o = k / n_idx, j = k % n_idx;
                   std::memcpy(dst + static_cast<size_t>(k) * row_bytes,
                               src + static_cast<size_t>(o * n_in + idx[j]) * row_bytes, row_bytes);
                 }
               });
}

// Parallel over (outer, inner-column blocks); each block adds the source rows in
// index order, so the sum order is fixed whatever the thread count.
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const Blocks b = blocks_of(out, dim);
  const int64_t n_out = out.size(dim), n_idx = index.numel();
  const int64_t* idx = index.data_ptr<int64_t>();
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = num_chunks(b.inner, kCols);
  dispatch_all(out.dtype(), "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      fail("index_add: not defined for bool tensors");
    } else {
      using A = compute_t<T>;
      T* o = out.data_ptr<T>();
      const T* s = src.data_ptr<T>();
      parallel_for(b.outer * col_blocks, 1, [&](int64_t w0, int64_t w1) {
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t ob = w / col_blocks, c0 = (w % col_blocks) * kCols;
          const int64_t c1 = std::min(b.inner, c0 + kCols);
          for (int64_t j = 0; j < n_idx; ++j) {
            T* orow = o + (ob * n_out + idx[j]) * b.inner;
            const T* srow = s + (ob * n_idx + j) * b.inner;
            for (int64_t c = c0; c < c1; ++c)
              orow[c] = static_cast<T>(static_cast<A>(orow[c]) + static_cast<A>(srow[c]));
          }
        }
      });
    }
  });
}

}  // namespace kiln::cpu
