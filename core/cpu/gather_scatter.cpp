// CPU gather and scatter along one dim (core/backend.h states the contract;
// ops/gather_scatter.cpp checks arguments and validates the index). CUDA twin:
// cuda/gather_scatter.cu.
//
// index's shape is viewed as (outer, n, inner) around dim: index element
// (o, j, i) addresses element (o, index[o, j, i], i) of the indexed tensor,
// whose offset is outer_off(o) + index * stride(dim) + inner_off[i].
// scatter runs each (o, i) line in j order (Note [Deterministic scatter_add],
// ops/gather_scatter.cpp): lines never share a target, so threads split lines
// and the result does not depend on the thread count.
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t dim_stride = 0;
  Shape outer_sizes, outer_strides;  // dims before dim: index's sizes, t's strides
  std::vector<int64_t> inner_off;    // per inner coordinate i: its offset in t

  int64_t outer_off(int64_t o) const {
    int64_t off = 0;
    for (size_t d = outer_sizes.size(); d-- > 0;) {
      off += (o % outer_sizes[d]) * outer_strides[d];
      o /= outer_sizes[d];
    }
    return off;
  }
};

// index's (outer, n, inner) with offsets into t (strides in elements).
Lines lines_of(const Tensor& index, const Tensor& t, int64_t dim) {
  Lines L;
  const int64_t nd = index.dim();
  for (int64_t d = 0; d < dim; ++d) {
    L.outer *= index.size(d);
    L.outer_sizes.push_back(index.size(d));
    L.outer_strides.push_back(t.stride(d));
  }
  L.n = index.size(dim);
  L.dim_stride = t.stride(dim);
  for (int64_t d = dim + 1; d < nd; ++d) L.inner *= index.size(d);
  L.inner_off.assign(static_cast<size_t>(L.inner), 0);
  // Row-major walk over the inner coordinates.
  Shape coord(static_cast<size_t>(nd), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < L.inner; ++i) {
    L.inner_off[static_cast<size_t>(i)] = off;
    for (int64_t d = nd - 1; d > dim; --d) {
      if (++coord[static_cast<size_t>(d)] < index.size(d)) { off += t.stride(d); break; }
      off -= (index.size(d) - 1) * t.stride(d);
      coord[static_cast<size_t>(d)] = 0;
    }
  }
  return L;
}

}  // namespace

// out (o, j, i) = in[outer_off(o) + index * stride(dim) + inner_off[i]]
void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  const Lines L = lines_of(index, in, dim);
  const int64_t* idx = index.data_ptr<int64_t>();
  dispatch_all(in.dtype(), "gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.raw_data());
    T* dst = out.data_ptr<T>();
    parallel_for(L.outer * L.n, std::max<int64_t>(1, 32768 / L.inner), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {  // r = o * n + j
        const int64_t base = L.outer_off(r / L.n);
        const int64_t* ir = idx + r * L.inner;
        T* orow = dst + r * L.inner;
        for (int64_t i = 0; i < L.inner; ++i)
          orow[i] = src[base + ir[i] * L.dim_stride + L.inner_off[static_cast<size_t>(i)]];
      }
    });
  });
}

// Per (o, i) line, j ascending: out[target] = src (or += src, rounded to T per add).
void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  if (index.numel() == 0) return;
  const Lines L = lines_of(index, out, dim);
  const int64_t* idx = index.data_ptr<int64_t>();
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = num_chunks(L.inner, kCols);
  dispatch_all(out.dtype(), "scatter", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      KILN_CHECK(!add, "scatter_add: not defined for bool tensors");
    }
    T* o = out.data_ptr<T>();
    const T* s = src.data_ptr<T>();
    parallel_for(L.outer * col_blocks, std::max<int64_t>(1, 4096 / (L.n * kCols)), [&](int64_t w0, int64_t w1) {
      for (int64_t w = w0; w < w1; ++w) {
        const int64_t ob = w / col_blocks, c0 = (w % col_blocks) * kCols;
        const int64_t c1 = std::min(L.inner, c0 + kCols);
        const int64_t base = L.outer_off(ob);
        for (int64_t j = 0; j < L.n; ++j) {
          const int64_t row = (ob * L.n + j) * L.inner;
          for (int64_t c = c0; c < c1; ++c) {
            T& dst = o[base + idx[row + c] * L.dim_stride + L.inner_off[static_cast<size_t>(c)]];
            if constexpr (std::is_same_v<T, bool>) {
              dst = s[row + c];
            } else {
              dst = add ? static_cast<T>(static_cast<A>(dst) + static_cast<A>(s[row + c])) : s[row + c];
            }
          }
        }
      }
    });
  });
}

}  // namespace kiln::cpu
