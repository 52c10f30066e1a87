// CPU fused multi-head attention (Note [Fused attention], ops/fused.cpp):
// per (batch, head) pair, the scores GEMM, scale + key mask + softmax, dropout
// and the context GEMM, reading q/k/v straight from their (B, T, C) rows
// (head h is columns [h*HS, (h+1)*HS), so no per-head copies) and writing the
// context into its columns of the (B, T, C) output. Backward redoes the same
// per pair. The arithmetic per element is that of the composite (matmul, mul
// by the scale, add the mask, softmax, dropout's mul by keep / (1 - p)), in
// the same order. Pairs run in parallel, each a fixed set of BLAS calls, so
// results do not depend on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/vec_math.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// C(M, N) = op(A) @ op(B), row-major, leading dims given.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
          int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) sgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
  else dgemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

struct Dims {
  int64_t B, T, C, NH, HS;
  int64_t q_b, q_t, k_b, k_t, v_b, v_t;  // batch and row strides of q, k, v (elements)
};

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  Dims d{q.size(0), q.size(1), q.size(2), heads, q.size(2) / heads,
         q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1)};
  return d;
}

template <typename T>
void attention_typed(const Tensor& ctx, const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& mask, const Tensor& keep, int64_t heads, double scale_d, double keep_scale_d) {
  const Dims d = dims_of(q, k, v, heads);
  const T* Q = q.data_ptr<T>();
  const T* K = k.data_ptr<T>();
  const T* V = v.data_ptr<T>();
  const T* Mk = mask.defined() ? mask.data_ptr<T>() : nullptr;
  const uint8_t* keep_p = keep.defined() ? keep_bytes(keep) : nullptr;  // Note [Keep masks as bytes]
  T* P = probs.data_ptr<T>();
  T* O = ctx.data_ptr<T>();
  const T scale = static_cast<T>(scale_d), keep_scale = static_cast<T>(keep_scale_d);
  const int64_t Tn = d.T, TT = d.T * d.T;
  parallel_for(d.B * d.NH, 1, [&](int64_t p0, int64_t p1) {
    std::vector<T> buf(static_cast<size_t>(keep_p ? TT : 0));
    for (int64_t pair = p0; pair < p1; ++pair) {
      const int64_t b = pair / d.NH, h = pair % d.NH;
      const T* q_bh = Q + b * d.q_b + h * d.HS;
      const T* k_bh = K + b * d.k_b + h * d.HS;
      const T* v_bh = V + b * d.v_b + h * d.HS;
      T* S = P + pair * TT;
      gemm<T>(false, true, Tn, Tn, d.HS, q_bh, d.q_t, k_bh, d.k_t, S, Tn);  // (T, T) = q k^T
      const T* mrow = Mk ? Mk + b * Tn : nullptr;
      for (int64_t t = 0; t < Tn; ++t) {
        T* s = S + t * Tn;
        // softmax(s * scale + mask), as softmax_rows computes it
        for (int64_t c = 0; c < Tn; ++c) s[c] = mrow ? s[c] * scale + mrow[c] : s[c] * scale;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t c = 0; c < Tn; ++c) mx = std::max(mx, s[c]);
        if (std::isinf(mx) && mx < 0) mx = 0;
        int64_t c0 = 0;
        if constexpr (std::is_same_v<T, float>) {  // Note [Eight-lane exp]
          const f32x8 m8 = splat8(mx);
          for (; c0 + 8 <= Tn; c0 += 8) store8(s + c0, exp_f32x8(load8(s + c0) - m8));
        }
        for (int64_t c = c0; c < Tn; ++c) s[c] = vexp(s[c] - mx);
        T sum = 0;
        for (int64_t c = 0; c < Tn; ++c) sum += s[c];
        const T inv = T(1) / sum;
        for (int64_t c = 0; c < Tn; ++c) s[c] = s[c] * inv;
      }
      const T* A = S;
      if (keep_p) {  // dropout: P * (keep * 1/(1-p))
        const uint8_t* kp = keep_p + pair * TT;
        for (int64_t i = 0; i < TT; ++i) buf[static_cast<size_t>(i)] = S[i] * (kp[i] ? keep_scale : T(0));
        A = buf.data();
      }
      gemm<T>(false, false, Tn, d.HS, Tn, A, Tn, v_bh, d.v_t, O + b * Tn * d.C + h * d.HS, d.C);
    }
  });
}

template <typename T>
void attention_backward_typed(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dctx,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& keep, int64_t heads, double scale_d, double keep_scale_d) {
  const Dims d = dims_of(q, k, v, heads);
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
  const int64_t Tn = d.T, TT = d.T * d.T, C = d.C;
  parallel_for(d.B * d.NH, 1, [&](int64_t p0, int64_t p1) {
    std::vector<T> dP(static_cast<size_t>(TT)), dS(static_cast<size_t>(TT));
    for (int64_t pair = p0; pair < p1; ++pair) {
      const int64_t b = pair / d.NH, h = pair % d.NH;
      const T* q_bh = Q + b * d.q_b + h * d.HS;
      const T* k_bh = K + b * d.k_b + h * d.HS;
      const T* v_bh = V + b * d.v_b + h * d.HS;
      const T* g_bh = G + b * Tn * C + h * d.HS;
      const T* S = P + pair * TT;
      const uint8_t* kp = keep_p ? keep_p + pair * TT : nullptr;
      // d(dropped probs) = g v^T; dq = dS k; dk = dS^T q; dv = (dropped probs)^T g
      gemm<T>(false, true, Tn, Tn, d.HS, g_bh, C, v_bh, d.v_t, dP.data(), Tn);
      if (kp)
        for (int64_t i = 0; i < TT; ++i) dP[static_cast<size_t>(i)] = dP[static_cast<size_t>(i)] * (kp[i] ? keep_scale : T(0));
      for (int64_t t = 0; t < Tn; ++t) {  // softmax backward, then the scale
        const T* y = S + t * Tn;
        const T* g = dP.data() + t * Tn;
        T* ds = dS.data() + t * Tn;
        T dot = 0;
        for (int64_t c = 0; c < Tn; ++c) dot += g[c] * y[c];
        for (int64_t c = 0; c < Tn; ++c) ds[c] = (y[c] * (g[c] - dot)) * scale;
      }
      gemm<T>(false, false, Tn, d.HS, Tn, dS.data(), Tn, k_bh, d.k_t, dQ + b * dq.stride(0) + h * d.HS, dq.stride(1));
      gemm<T>(true, false, Tn, d.HS, Tn, dS.data(), Tn, q_bh, d.q_t, dK + b * dk.stride(0) + h * d.HS, dk.stride(1));
      const T* A = S;
      if (kp) {
        for (int64_t i = 0; i < TT; ++i) dP[static_cast<size_t>(i)] = S[i] * (kp[i] ? keep_scale : T(0));
        A = dP.data();
      }
      gemm<T>(true, false, Tn, d.HS, Tn, A, Tn, g_bh, C, dV + b * dv.stride(0) + h * d.HS, dv.stride(1));
    }
  });
}

}  // namespace

void attention(const Tensor& ctx, const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& mask, const Tensor& keep, int64_t heads, double scale, double keep_scale) {
  switch (q.dtype()) {
    case DType::Float32: return attention_typed<float>(ctx, probs, q, k, v, mask, keep, heads, scale, keep_scale);
    case DType::Float64: return attention_typed<double>(ctx, probs, q, k, v, mask, keep, heads, scale, keep_scale);
    default: break;
  }
  fail("attention: the fused CPU kernel takes float32 or float64, got ", dtype_name(q.dtype()));
}

void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dctx, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& keep, int64_t heads,
                        double scale, double keep_scale) {
  switch (q.dtype()) {
    case DType::Float32:
      return attention_backward_typed<float>(dq, dk, dv, dctx, q, k, v, probs, keep, heads, scale, keep_scale);
    case DType::Float64:
      return attention_backward_typed<double>(dq, dk, dv, dctx, q, k, v, probs, keep, heads, scale, keep_scale);
    default: break;
  }
  fail("attention_backward: the fused CPU kernel takes float32 or float64, got ", dtype_name(q.dtype()));
}

}  // namespace kiln::cpu
