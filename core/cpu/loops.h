// Strided loops over N operands of one shape: the engine under every CPU
// elementwise kernel (a much smaller cousin of PyTorch's TensorIterator).
//
// make_loop() takes operands of identical sizes (broadcast inputs arrive with
// stride 0), drops size-1 dims, orders dims by the output's strides (fastest
// first) and merges dims that are contiguous for every operand. for_each_chunk()
// then walks the linear index space in fixed chunks (Note [Deterministic
// chunking]) and hands the body runs of the innermost dim:
//     body(char* const* ptrs, const int64_t* strides_bytes, int64_t n)
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "core/tensor.h"

namespace kiln::cpu {

inline constexpr int kMaxLoopDims = 16;

template <int N>
struct StridedLoop {
  int ndim = 0;                                        // after coalescing (>= 1)
  int64_t sizes[kMaxLoopDims];                         // dim 0 is innermost
  int64_t strides[N][kMaxLoopDims];                    // bytes
  char* base[N];
  int64_t numel = 1;
};

template <int N>
StridedLoop<N> make_loop(const std::array<const Tensor*, N>& ops) {
  StridedLoop<N> L;
  const Tensor& out = *ops[0];
  const int64_t nd = out.dim();
  KILN_CHECK(nd <= kMaxLoopDims, "tensors with more than ", kMaxLoopDims, " dims are not supported");
  for (int k = 0; k < N; ++k) {
    KILN_CHECK(ops[k]->sizes() == out.sizes(), "internal: loop operands differ in shape ",
               shape_str(ops[k]->sizes()), " vs ", shape_str(out.sizes()));
    L.base[k] = static_cast<char*>(ops[k]->raw_data());
  }
  // Order dims innermost-first by the output's |stride| (stable for ties).
  std::vector<int64_t> order;
  for (int64_t d = nd - 1; d >= 0; --d)
    if (out.size(d) != 1) order.push_back(d);
  for (size_t i = 1; i < order.size(); ++i)
    for (size_t j = i; j > 0; --j) {
      auto s = [&](int64_t d) { int64_t v = out.stride(d); return v < 0 ? -v : v; };
      if (s(order[j]) < s(order[j - 1])) std::swap(order[j], order[j - 1]); else break;
    }
  int n = 0;
  for (int64_t d : order) {
    const int64_t size = out.size(d);
    if (n > 0) {  // merge into previous when contiguous for every operand
      bool merge = true;
      for (int k = 0; k < N && merge; ++k)
        merge = ops[k]->stride(d) * static_cast<int64_t>(ops[k]->element_size()) ==
                L.strides[k][n - 1] * L.sizes[n - 1];
      if (merge) { L.sizes[n - 1] *= size; continue; }
    }
    L.sizes[n] = size;
    for (int k = 0; k < N; ++k)
      L.strides[k][n] = ops[k]->stride(d) * static_cast<int64_t>(ops[k]->element_size());
    ++n;
  }
  if (n == 0) {  // scalar or all-size-1
    L.sizes[0] = 1;
    for (int k = 0; k < N; ++k) L.strides[k][0] = 0;
    n = 1;
  }
  L.ndim = n;
  L.numel = out.numel();
  return L;
}

// Runs body over linear indices [begin, end) of L, in runs along dim 0.
template <int N, typename Body>
void loop_range(const StridedLoop<N>& L, int64_t begin, int64_t end, Body&& body) {
  int64_t idx[kMaxLoopDims];
  int64_t rem = begin;
  for (int d = 0; d < L.ndim; ++d) { idx[d] = rem % L.sizes[d]; rem /= L.sizes[d]; }
  char* ptrs[N];
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = L.strides[k][0];
  int64_t i = begin;
  while (i < end) {
    for (int k = 0; k < N; ++k) {
      int64_t off = 0;
      for (int d = 0; d < L.ndim; ++d) off += idx[d] * L.strides[k][d];
      ptrs[k] = L.base[k] + off;
    }
    const int64_t run = std::min(L.sizes[0] - idx[0], end - i);
    body(ptrs, inner, run);
    i += run;
    idx[0] += run;
    for (int d = 0; d < L.ndim - 1 && idx[d] == L.sizes[d]; ++d) { idx[d] = 0; ++idx[d + 1]; }
  }
}

inline constexpr int64_t kElementwiseGrain = 32768;

// Parallel over the whole loop in fixed chunks.
template <int N, typename Body>
void for_each_chunk(const StridedLoop<N>& L, Body&& body, int64_t grain = kElementwiseGrain) {
  parallel_for(L.numel, grain, [&](int64_t b, int64_t e) { loop_range(L, b, e, body); });
}

}  // namespace kiln::cpu
