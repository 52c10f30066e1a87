// CPU fused multi-head attention (Note [Fused attention], ops/fused.cpp):
// per (batch, head) pair, the scores GEMM, scale + mask + softmax, dropout
// and the context GEMM, reading q/k/v straight from their (B, T, C) and
// (B, S, C) rows (head h is columns [h*HS, (h+1)*HS), so no per-head copies)
// and writing the context into its columns of the (B, T, C) output. Backward
// redoes the same per pair. The arithmetic per element is that of the
// composite (matmul, mul by the scale, add the mask, softmax, dropout's mul
// by keep / (1 - p)), in the same order. Pairs run in parallel, each a fixed
// set of BLAS calls, so results do not depend on the thread count. Causal
// attention computes only the blocks that hold attended keys (Note [Causal
// attention blocks]).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/vec_math.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// C(M, N) = op(A) @ op(B) (C += ... when accumulate), row-major, leading dims given.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
          int64_t ldc, bool accumulate = false) {
  if constexpr (std::is_same_v<T, float>) sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
  else dgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

struct Dims {
  int64_t B, T, S, C, NH, HS;
  int64_t q_b, q_t, k_b, k_t, v_b, v_t;  // batch and row strides of q, k, v (elements)
};

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  Dims d{q.size(0),   q.size(1),   k.size(1),   q.size(2),   heads,       q.size(2) / heads,
         q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1)};
  return d;
}

// Note [Causal attention blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Causal attention (bottom-right aligned: query t attends keys s <= t + D,
// D = S - T >= 0) needs no score, probability or gradient above that
// diagonal. The kernels cover the attended part of each (T, S) score matrix
// with tiles: the keys [0, D) every query sees (one rectangle), and the
// triangle beside it split recursively -- its lower-left rectangle, then the
// two half-size triangles -- down to diagonal tiles of kRowBlock rows (rows
// [t0, t1) by keys [t0 + D, t1 + D)). Every product runs per tile: the
// scores and dP (= g v^T) tiles are written, the context, dQ, dK and dV are
// accumulated over the tiles (zeroed first), so most of the work is in a few
// large GEMMs (half the matrix: 256 by 256 at T = 512) rather than many
// thin ones. Softmax runs over each row's keys [0, t + D + 1); the masked
// entries of a diagonal tile are written as 0 in P (the composite's
// exp(-inf - max) / sum; NaN in a row whose attended scores are all -inf,
// where the composite's row is NaN too) and as 0 in dS (masked_fill's
// backward); those NaN reach fewer dV rows than the composite's NaN row does
// (the forward, dQ and dK match it). Entries outside the tiles are never
// written nor read. At T = S = 512 the tiles are (16*17/2) / 16^2 = 53% of
// the dense products. Without causal there is one tile, the whole matrix: the
// dense kernels of before, unchanged. The tiles depend on T and S only.
constexpr int64_t kRowBlock = 32;

// Query rows [r0, r1) by keys [c0, c1) of the scores.
struct Tile {
  int64_t r0, r1, c0, c1;
};

// The triangle of rows [a, b) (a a multiple of kRowBlock) by keys [c, c + b - a), row t attending keys < t - a + c + 1.
void add_triangle(std::vector<Tile>& tiles, int64_t a, int64_t b, int64_t c) {
  const int64_t blocks = (b - a + kRowBlock - 1) / kRowBlock;
  if (blocks <= 1) {
    tiles.push_back({a, b, c, c + (b - a)});
    return;
  }
  const int64_t m = a + blocks / 2 * kRowBlock;
  tiles.push_back({m, b, c, c + (m - a)});  // every row of the lower half sees the upper half's keys
  add_triangle(tiles, a, m, c);
  add_triangle(tiles, m, b, c + (m - a));
}

struct Blocks {
  int64_t T, S, D;
  bool causal;
  std::vector<Tile> tiles;
  Blocks(const Dims& d, bool c) : T(d.T), S(d.S), D(d.S - d.T), causal(c) {
    if (!causal) {
      tiles.push_back({0, T, 0, S});
      return;
    }
    if (D > 0) tiles.push_back({0, T, 0, D});
    add_triangle(tiles, 0, T, D);
  }
  // Keys row t attends, and the end of the keys its diagonal tile holds.
  int64_t limit(int64_t t) const { return causal ? t + D + 1 : S; }
  int64_t tile_end(int64_t t) const { return causal ? std::min(T, (t / kRowBlock + 1) * kRowBlock) + D : S; }
};

// One row of softmax(s * scale + mask) over its attended keys [0, lim), as
// softmax_rows computes it; keys [lim, end) are masked: exp(-inf - max) / sum.
template <typename T>
void softmax_row(T* s, const T* mrow, T scale, int64_t lim, int64_t end) {
  for (int64_t c = 0; c < lim; ++c) s[c] = mrow ? s[c] * scale + mrow[c] : s[c] * scale;
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t c = 0; c < lim; ++c) mx = std::max(mx, s[c]);
  if (std::isinf(mx) && mx < 0) mx = 0;
  int64_t c0 = 0;
  if constexpr (std::is_same_v<T, float>) {  // Note [Eight-lane exp]
    const f32x8 m8 = splat8(mx);
    for (; c0 + 8 <= lim; c0 += 8) store8(s + c0, exp_f32x8(load8(s + c0) - m8));
  }
  for (int64_t c = c0; c < lim; ++c) s[c] = vexp(s[c] - mx);
  T sum = 0;
  for (int64_t c = 0; c < lim; ++c) sum += s[c];
  const T inv = T(1) / sum;
  for (int64_t c = 0; c < lim; ++c) s[c] = s[c] * inv;
  for (int64_t c = lim; c < end; ++c) s[c] = T(0) * inv;
}

// out = P * (keep * keep_scale) over each row's tiles (row stride S).
template <typename T>
void drop_rows(T* out, const T* P, const uint8_t* kp, T keep_scale, const Blocks& bl) {
  for (int64_t t = 0; t < bl.T; ++t)
    for (int64_t c = t * bl.S, e = t * bl.S + bl.tile_end(t); c < e; ++c) out[c] = P[c] * (kp[c] ? keep_scale : T(0));
}

// rows x HS of a head's columns (row stride ld) set to 0: the start of a sum over tiles.
template <typename T>
void zero_rows(T* p, int64_t rows, int64_t HS, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) std::fill(p + r * ld, p + r * ld + HS, T(0));
}

// Note [Attention scratch]: each (batch, head) pair needs (T, S) scratch
// (the dropped probabilities; dP and dS backward). Fresh buffers per pair
// would be fresh pages, faulted in and zeroed by the kernel on every use; a
// thread keeps its two buffers for the next pair and call instead, and drops
// them after a call that needed more than kKeptScratch bytes each. Only
// entries the tiles write are read, so the reuse never shows in a result.
constexpr size_t kKeptScratch = size_t{8} << 20;

template <typename T>
class Scratch {
 public:
  T* get(size_t n) {
    if (n > size_) {
      data_.reset();  // free before allocating the larger one
      data_.reset(new T[n]);
      size_ = n;
    }
    return data_.get();
  }
  void trim() {
    if (size_ * sizeof(T) > kKeptScratch) data_.reset(), size_ = 0;
  }

 private:
  std::unique_ptr<T[]> data_;
  size_t size_ = 0;
};

template <typename T>
Scratch<T>& thread_scratch(int slot) {
  thread_local Scratch<T> s[2];
  return s[slot];
}

template <typename T>
void attention_typed(const Tensor& ctx, const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& mask, const Tensor& keep, int64_t heads, double scale_d, double keep_scale_d,
                     bool causal) {
  const Dims d = dims_of(q, k, v, heads);
  const Blocks bl(d, causal);
  const T* Q = q.data_ptr<T>();
  const T* K = k.data_ptr<T>();
  const T* V = v.data_ptr<T>();
  const T* Mk = mask.defined() ? mask.data_ptr<T>() : nullptr;
  const int64_t m_b = Mk ? mask.stride(0) : 0, m_h = Mk ? mask.stride(1) : 0, m_t = Mk ? mask.stride(2) : 0;
  const uint8_t* keep_p = keep.defined() ? keep_bytes(keep) : nullptr;  // Note [Keep masks as bytes]
  T* P = probs.data_ptr<T>();
  T* O = ctx.data_ptr<T>();
  const T scale = static_cast<T>(scale_d), keep_scale = static_cast<T>(keep_scale_d);
  const int64_t TS = d.T * d.S, S = d.S;
  parallel_for(d.B * d.NH, 1, [&](int64_t p0, int64_t p1) {
    Scratch<T>& scratch = thread_scratch<T>(0);  // Note [Attention scratch]
    T* const buf = keep_p ? scratch.get(static_cast<size_t>(TS)) : nullptr;
    for (int64_t pair = p0; pair < p1; ++pair) {
      const int64_t b = pair / d.NH, h = pair % d.NH;
      const T* q_bh = Q + b * d.q_b + h * d.HS;
      const T* k_bh = K + b * d.k_b + h * d.HS;
      const T* v_bh = V + b * d.v_b + h * d.HS;
      T* o_bh = O + b * d.T * d.C + h * d.HS;
      T* Sc = P + pair * TS;
      for (const Tile& x : bl.tiles)  // q k^T
        gemm<T>(false, true, x.r1 - x.r0, x.c1 - x.c0, d.HS, q_bh + x.r0 * d.q_t, d.q_t, k_bh + x.c0 * d.k_t, d.k_t,
                Sc + x.r0 * S + x.c0, S);
      for (int64_t t = 0; t < d.T; ++t)
        softmax_row<T>(Sc + t * S, Mk ? Mk + b * m_b + h * m_h + t * m_t : nullptr, scale, bl.limit(t),
                       bl.tile_end(t));
      const T* A = Sc;  // the (dropped) probabilities
      if (keep_p) {     // dropout: P * (keep * 1/(1-p))
        drop_rows<T>(buf, Sc, keep_p + pair * TS, keep_scale, bl);
        A = buf;
      }
      if (causal) zero_rows<T>(o_bh, d.T, d.HS, d.C);
      for (const Tile& x : bl.tiles)
        gemm<T>(false, false, x.r1 - x.r0, d.HS, x.c1 - x.c0, A + x.r0 * S + x.c0, S, v_bh + x.c0 * d.v_t, d.v_t,
                o_bh + x.r0 * d.C, d.C, causal);
    }
    scratch.trim();
  });
}

template <typename T>
void attention_backward_typed(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dctx,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& keep, int64_t heads, double scale_d, double keep_scale_d, bool causal) {
  const Dims d = dims_of(q, k, v, heads);
  const Blocks bl(d, causal);
  const T* Q = q.data_ptr<T>();
  const T* K = k.data_ptr<T>();
  const T* V = v.data_ptr<T>();
  const T* G = dctx.data_ptr<T>();
  const T* P = probs.data_ptr<T>();
  const uint8_t* keep_p = keep.defined() ? keep_bytes(keep) : nullptr;  // Note [Keep masks as bytes]
  T* dQ = dq.data_ptr<T>();
  T* dK = dk.data_ptr<T>();
  T* dV = dv.data_ptr<T>();
  const T scale = static_cast<T>(scale_d), keep_scale = static_cast<T>(keep_scale_d);
  const int64_t TS = d.T * d.S, C = d.C, S = d.S;
  const int64_t dq_t = dq.stride(1), dk_t = dk.stride(1), dv_t = dv.stride(1);
  parallel_for(d.B * d.NH, 1, [&](int64_t p0, int64_t p1) {
    Scratch<T>& dP_scratch = thread_scratch<T>(0);  // Note [Attention scratch]
    Scratch<T>& dS_scratch = thread_scratch<T>(1);
    T* const dP = dP_scratch.get(static_cast<size_t>(TS));
    T* const dS = dS_scratch.get(static_cast<size_t>(TS));
    for (int64_t pair = p0; pair < p1; ++pair) {
      const int64_t b = pair / d.NH, h = pair % d.NH;
      const T* q_bh = Q + b * d.q_b + h * d.HS;
      const T* k_bh = K + b * d.k_b + h * d.HS;
      const T* v_bh = V + b * d.v_b + h * d.HS;
      const T* g_bh = G + b * d.T * C + h * d.HS;
      T* dq_bh = dQ + b * dq.stride(0) + h * d.HS;
      T* dk_bh = dK + b * dk.stride(0) + h * d.HS;
      T* dv_bh = dV + b * dv.stride(0) + h * d.HS;
      const T* Pr = P + pair * TS;
      const uint8_t* kp = keep_p ? keep_p + pair * TS : nullptr;
      // d(dropped probs) = g v^T; dq = dS k; dk = dS^T q; dv = (dropped probs)^T g
      for (const Tile& x : bl.tiles)
        gemm<T>(false, true, x.r1 - x.r0, x.c1 - x.c0, d.HS, g_bh + x.r0 * C, C, v_bh + x.c0 * d.v_t, d.v_t,
                dP + x.r0 * S + x.c0, S);
      if (kp) drop_rows<T>(dP, dP, kp, keep_scale, bl);
      for (int64_t t = 0; t < d.T; ++t) {  // softmax backward, then the scale
        const T* y = Pr + t * S;
        const T* g = dP + t * S;
        T* ds = dS + t * S;
        const int64_t lim = bl.limit(t), end = bl.tile_end(t);
        T dot = 0;
        for (int64_t c = 0; c < lim; ++c) dot += g[c] * y[c];
        for (int64_t c = 0; c < lim; ++c) ds[c] = (y[c] * (g[c] - dot)) * scale;
        for (int64_t c = lim; c < end; ++c) ds[c] = T(0);  // masked_fill's backward: no gradient
      }
      const T* A = Pr;
      if (kp) {
        drop_rows<T>(dP, Pr, kp, keep_scale, bl);
        A = dP;
      }
      if (causal) {
        zero_rows<T>(dq_bh, d.T, d.HS, dq_t);
        zero_rows<T>(dk_bh, S, d.HS, dk_t);
        zero_rows<T>(dv_bh, S, d.HS, dv_t);
      }
      for (const Tile& x : bl.tiles) {  // Note [Causal attention blocks]
        const int64_t rows = x.r1 - x.r0, keys = x.c1 - x.c0;
        const T* ds = dS + x.r0 * S + x.c0;
        gemm<T>(false, false, rows, d.HS, keys, ds, S, k_bh + x.c0 * d.k_t, d.k_t, dq_bh + x.r0 * dq_t, dq_t, causal);
        gemm<T>(true, false, keys, d.HS, rows, ds, S, q_bh + x.r0 * d.q_t, d.q_t, dk_bh + x.c0 * dk_t, dk_t, causal);
        gemm<T>(true, false, keys, d.HS, rows, A + x.r0 * S + x.c0, S, g_bh + x.r0 * C, C, dv_bh + x.c0 * dv_t, dv_t,
                causal);
      }
    }
    dP_scratch.trim();
    dS_scratch.trim();
  });
}

}  // namespace

void attention(const Tensor& ctx, const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& mask, const Tensor& keep, int64_t heads, double scale, double keep_scale, bool causal) {
  switch (q.dtype()) {
    case DType::Float32:
      return attention_typed<float>(ctx, probs, q, k, v, mask, keep, heads, scale, keep_scale, causal);
    case DType::Float64:
      return attention_typed<double>(ctx, probs, q, k, v, mask, keep, heads, scale, keep_scale, causal);
    default: break;
  }
  fail("attention: the fused CPU kernel takes float32 or float64, got ", dtype_name(q.dtype()));
}

void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dctx, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& keep, int64_t heads,
                        double scale, double keep_scale, bool causal) {
  switch (q.dtype()) {
    case DType::Float32:
      return attention_backward_typed<float>(dq, dk, dv, dctx, q, k, v, probs, keep, heads, scale, keep_scale, causal);
    case DType::Float64:
      return attention_backward_typed<double>(dq, dk, dv, dctx, q, k, v, probs, keep, heads, scale, keep_scale,
                                              causal);
    default: break;
  }
  fail("attention_backward: the fused CPU kernel takes float32 or float64, got ", dtype_name(q.dtype()));
}

}  // namespace kiln::cpu
