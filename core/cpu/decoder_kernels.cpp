// CPU bodies of the decoder ops (ops/decoder_ops.h; contracts in
// core/backend.h): RMS norm, rotary position embedding and the gated
// activations, forward and backward. Rows (or fixed chunks of elements) run
// in parallel and each result depends only on its own inputs; the RMS-norm
// weight gradient is summed over fixed blocks of rows combined in block
// order, so every result is the same on any thread count (Note
// [Deterministic chunking], core/parallel.h).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/activation_math.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/vec_math.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

template <typename T> using Acc = compute_t<T>;

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }

// ---- RMS norm -------------------------------------------------------------------

// sum_c x^2 over a row in 8 independent lanes, combined in a fixed order.
template <typename A, typename T>
A row_sum_squares(const T* x, int64_t C) {
  A lane[8] = {};
  int64_t c = 0;
  for (; c + 8 <= C; c += 8)
    for (int l = 0; l < 8; ++l) {
      const A v = static_cast<A>(x[c + l]);
      lane[l] += v * v;
    }
  A s = 0;
  for (; c < C; ++c) {
    const A v = static_cast<A>(x[c]);
    s += v * v;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + s;
}

// x * rstd rounded to T (transformers' .to(input_dtype)), back in A.
template <typename T, typename A>
inline A normed(T x, A rs) { return static_cast<A>(static_cast<T>(static_cast<A>(x) * rs)); }

template <typename T, typename S>
void rms_norm_rows(T* y, S* rstd, const T* x, const T* w, int64_t R, int64_t C, double eps) {
  using A = Acc<T>;
  parallel_for(R, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      const A ms = row_sum_squares<A>(xr, C) / static_cast<A>(C);
      const A rs = A(1) / std::sqrt(ms + static_cast<A>(eps));
      rstd[r] = static_cast<S>(rs);
      for (int64_t c = 0; c < C; ++c) {
        const A h = normed(xr[c], rs);
        yr[c] = static_cast<T>(w ? h * static_cast<A>(w[c]) : h);
      }
    }
  });
}

constexpr int64_t kRmsBlock = 64;  // rows per block of the weight-gradient sums (as layer norm's)

template <typename T, typename S>
void rms_norm_backward_rows(T* dx, T* dw, const T* dy, const T* x, const S* rstd, const T* w, int64_t R, int64_t C) {
  using A = Acc<T>;
  const A inv_c = A(1) / static_cast<A>(C);
  parallel_for(R, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * C;
      const T* gr = dy + r * C;
      const A rs = static_cast<A>(rstd[r]);
      A dot = 0;
      for (int64_t c = 0; c < C; ++c)
        dot += static_cast<A>(gr[c]) * (w ? static_cast<A>(w[c]) : A(1)) * normed(xr[c], rs);
      for (int64_t c = 0; c < C; ++c) {
        const A g = static_cast<A>(gr[c]) * (w ? static_cast<A>(w[c]) : A(1));
        dx[r * C + c] = static_cast<T>(rs * (g - normed(xr[c], rs) * (dot * inv_c)));
      }
    }
  });
  if (!dw) return;
  const int64_t blocks = num_chunks(R, kRmsBlock);
  std::vector<A> part(static_cast<size_t>(blocks * C), A(0));
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      A* acc = part.data() + blk * C;
      for (int64_t r = blk * kRmsBlock; r < std::min(R, (blk + 1) * kRmsBlock); ++r) {
        const A rs = static_cast<A>(rstd[r]);
        for (int64_t c = 0; c < C; ++c) acc[c] += static_cast<A>(dy[r * C + c]) * normed(x[r * C + c], rs);
      }
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    A s = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) s += part[static_cast<size_t>(blk * C + c)];
    dw[c] = static_cast<T>(s);
  }
}

// ---- rotary embedding -------------------------------------------------------------

template <typename T>
void rotary_rows(T* y, const T* x, const int64_t* xs, const T* cos, const T* sin, int64_t B, int64_t Tn,
                 int64_t heads, int64_t D, bool transpose) {
  using A = Acc<T>;
  const int64_t half = D / 2, W = heads * D;
  parallel_for(B * Tn, row_grain(W), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t bi = row / Tn, t = row % Tn;
      const T* xr = x + bi * xs[0] + t * xs[1];
      T* yr = y + row * W;
      const T* cr = cos + t * D;
      const T* sr = sin + t * D;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t j1 = h * D + i, j2 = j1 + half;
          const A x1 = static_cast<A>(xr[j1 * xs[2]]), x2 = static_cast<A>(xr[j2 * xs[2]]);
          const A c1 = static_cast<A>(cr[i]), c2 = static_cast<A>(cr[i + half]);
          const A s1 = static_cast<A>(sr[i]), s2 = static_cast<A>(sr[i + half]);
          if (transpose) {
            yr[j1] = static_cast<T>(x1 * c1 + x2 * s2);
            yr[j2] = static_cast<T>(x2 * c2 - x1 * s1);
          } else {
            yr[j1] = static_cast<T>(x1 * c1 - x2 * s1);
            yr[j2] = static_cast<T>(x2 * c2 + x1 * s2);
          }
        }
    }
  });
}

// ---- gated activations ---------------------------------------------------------------

template <GatedAct G, typename A>
inline A act_value(A x) {
  if constexpr (G == GatedAct::Silu) return act::silu<VecMath>(x);
  else if constexpr (G == GatedAct::Gelu) return act::gelu<VecMath>(x);
  else return act::gelu_tanh<VecMath>(x);
}
template <GatedAct G, typename A>
inline A act_grad(A x) {
  if constexpr (G == GatedAct::Silu) return act::silu_grad<VecMath>(x);
  else if constexpr (G == GatedAct::Gelu) return act::gelu_grad<VecMath>(x);
  else return act::gelu_tanh_grad<VecMath>(x);
}

template <typename T, GatedAct G>
void gated_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
  using A = Acc<T>;
  const StridedLoop<3> L = make_loop<3>({&out, &a, &b});
  for_each_chunk(L, [&](char* const* p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const A av = static_cast<A>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      const A bv = static_cast<A>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
      *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(act_value<G>(av) * bv);
    }
  });
}

template <typename T, GatedAct G>
void gated_backward_typed(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a, const Tensor& b) {
  using A = Acc<T>;
  const StridedLoop<5> L = make_loop<5>({&da, &db, &dy, &a, &b});
  for_each_chunk(L, [&](char* const* p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const A g = static_cast<A>(*reinterpret_cast<const T*>(p[2] + i * s[2]));
      const A av = static_cast<A>(*reinterpret_cast<const T*>(p[3] + i * s[3]));
      const A bv = static_cast<A>(*reinterpret_cast<const T*>(p[4] + i * s[4]));
      *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(g * bv * act_grad<G>(av));
      *reinterpret_cast<T*>(p[1] + i * s[1]) = static_cast<T>(g * act_value<G>(av));
    }
  });
}

template <typename F>
void dispatch_gated(GatedAct act, F&& f) {
  switch (act) {
    case GatedAct::Silu: return f(std::integral_constant<GatedAct, GatedAct::Silu>{});
    case GatedAct::Gelu: return f(std::integral_constant<GatedAct, GatedAct::Gelu>{});
    case GatedAct::GeluTanh: return f(std::integral_constant<GatedAct, GatedAct::GeluTanh>{});
  }
  fail("gated_activation: unknown activation");
}

template <typename T>
const T* opt_ptr(const Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; }

}  // namespace

void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    rms_norm_rows<T, S>(y.data_ptr<T>(), rstd.data_ptr<S>(), x.data_ptr<T>(), opt_ptr<T>(weight), R, C, eps);
  });
}

void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                       const Tensor& weight) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    rms_norm_backward_rows<T, S>(dx.data_ptr<T>(), dweight.defined() ? dweight.data_ptr<T>() : nullptr,
                                 dy.data_ptr<T>(), x.data_ptr<T>(), rstd.data_ptr<S>(), opt_ptr<T>(weight), R, C);
  });
}

void rotary_embedding(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads,
                      bool transpose) {
  const int64_t B = x.size(0), Tn = x.size(1), D = x.size(2) / heads;
  const int64_t xs[3] = {x.stride(0), x.stride(1), x.stride(2)};
  dispatch_floating(x.dtype(), "rotary_embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rotary_rows<T>(y.data_ptr<T>(), x.data_ptr<T>(), xs, cos.data_ptr<T>(), sin.data_ptr<T>(), B, Tn, heads, D,
                   transpose);
  });
}

void gated_activation(const Tensor& out, const Tensor& a, const Tensor& b, GatedAct act) {
  dispatch_floating(a.dtype(), "gated_activation", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_gated(act, [&](auto g) { gated_typed<T, decltype(g)::value>(out, a, b); });
  });
}

void gated_activation_backward(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a, const Tensor& b,
                               GatedAct act) {
  dispatch_floating(a.dtype(), "gated_activation_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_gated(act, [&](auto g) { gated_backward_typed<T, decltype(g)::value>(da, db, dy, a, b); });
  });
}

}  // namespace kiln::cpu
