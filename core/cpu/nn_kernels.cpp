// CPU row kernels for the fused neural-network ops: softmax / log_softmax,
// layer norm and softmax-cross-entropy, forward and backward. Rows are
// independent and run in parallel; the column sums of the layer-norm weight
// gradients are taken in fixed row blocks combined in block order.
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/vec_math.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Accumulator for a row: float for float32/16-bit, double for float64.
template <typename T> using Acc = compute_t<T>;

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }

template <typename T>
void softmax_rows(T* y, const T* x, int64_t R, int64_t C, bool log) {
  using A = Acc<T>;
  parallel_for(R, row_grain(C), [&](int64_t b, int64_t e) {
    std::vector<A> buf(static_cast<size_t>(C));
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      A mx = -std::numeric_limits<A>::infinity();
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, static_cast<A>(xr[c]));
      if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf row: exp() gives 0s, sum 0
      A sum = 0;
      for (int64_t c = 0; c < C; ++c) {
        buf[c] = vexp(static_cast<A>(xr[c]) - mx);
        sum += buf[c];
      }
      if (log) {
        const A lse = std::log(sum) + mx;
        for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>(static_cast<A>(xr[c]) - lse);
      } else {
        const A inv = A(1) / sum;
        for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>(buf[c] * inv);
      }
    }
  });
}

template <typename T>
void softmax_backward_rows(T* dx, const T* y, const T* dy, int64_t R, int64_t C, bool log) {
  using A = Acc<T>;
  parallel_for(R, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* yr = y + r * C;
      const T* gr = dy + r * C;
      T* dr = dx + r * C;
      A dot = 0;
      if (log) {
        for (int64_t c = 0; c < C; ++c) dot += static_cast<A>(gr[c]);
        for (int64_t c = 0; c < C; ++c)
          dr[c] = static_cast<T>(static_cast<A>(gr[c]) - vexp(static_cast<A>(yr[c])) * dot);
      } else {
        for (int64_t c = 0; c < C; ++c) dot += static_cast<A>(gr[c]) * static_cast<A>(yr[c]);
        for (int64_t c = 0; c < C; ++c)
          dr[c] = static_cast<T>(static_cast<A>(yr[c]) * (static_cast<A>(gr[c]) - dot));
      }
    }
  });
}

template <typename T, typename S>
void layer_norm_rows(T* y, S* mean, S* rstd, const T* x, const T* w, const T* bias, int64_t R, int64_t C,
                     double eps) {
  using A = Acc<T>;
  parallel_for(R, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      A m = 0;
      for (int64_t c = 0; c < C; ++c) m += static_cast<A>(xr[c]);
      m /= static_cast<A>(C);
      A v = 0;
      for (int64_t c = 0; c < C; ++c) {
        const A d = static_cast<A>(xr[c]) - m;
        v += d * d;
      }
      v /= static_cast<A>(C);
      const A rs = A(1) / std::sqrt(v + static_cast<A>(eps));
      mean[r] = static_cast<S>(m);
      rstd[r] = static_cast<S>(rs);
      for (int64_t c = 0; c < C; ++c) {
        A h = (static_cast<A>(xr[c]) - m) * rs;
        if (w) h = h * static_cast<A>(w[c]);
        if (bias) h = h + static_cast<A>(bias[c]);
        yr[c] = static_cast<T>(h);
      }
    }
  });
}

constexpr int64_t kLnBlock = 64;  // rows per block of the weight-gradient sums

template <typename T, typename S>
void layer_norm_backward_rows(T* dx, T* dw, T* db, const T* dy, const T* x, const S* mean, const S* rstd,
                              const T* w, int64_t R, int64_t C) {
  using A = Acc<T>;
  parallel_for(R, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * C;
      const T* gr = dy + r * C;
      const A m = static_cast<A>(mean[r]), rs = static_cast<A>(rstd[r]);
      A sum_g = 0, sum_gx = 0;
      for (int64_t c = 0; c < C; ++c) {
        const A g = static_cast<A>(gr[c]) * (w ? static_cast<A>(w[c]) : A(1));
        const A xh = (static_cast<A>(xr[c]) - m) * rs;
        sum_g += g;
        sum_gx += g * xh;
      }
      const A inv_c = A(1) / static_cast<A>(C);
      for (int64_t c = 0; c < C; ++c) {
        const A g = static_cast<A>(gr[c]) * (w ? static_cast<A>(w[c]) : A(1));
        const A xh = (static_cast<A>(xr[c]) - m) * rs;
        dx[r * C + c] = static_cast<T>(rs * (g - inv_c * sum_g - xh * inv_c * sum_gx));
      }
    }
  });
  if (!dw && !db) return;
  const int64_t blocks = num_chunks(R, kLnBlock);
  std::vector<A> pw(static_cast<size_t>(blocks * C), A(0)), pb(static_cast<size_t>(blocks * C), A(0));
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      A* accw = pw.data() + blk * C;
      A* accb = pb.data() + blk * C;
      for (int64_t r = blk * kLnBlock; r < std::min(R, (blk + 1) * kLnBlock); ++r) {
        const A m = static_cast<A>(mean[r]), rs = static_cast<A>(rstd[r]);
        for (int64_t c = 0; c < C; ++c) {
          const A g = static_cast<A>(dy[r * C + c]);
          accw[c] += g * (static_cast<A>(x[r * C + c]) - m) * rs;
          accb[c] += g;
        }
      }
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    A sw = 0, sb = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sw += pw[static_cast<size_t>(blk * C + c)];
      sb += pb[static_cast<size_t>(blk * C + c)];
    }
    if (dw) dw[c] = static_cast<T>(sw);
    if (db) db[c] = static_cast<T>(sb);
  }
}

// Row statistics with 8 independent lanes (the compiler vectorises them; a
// single accumulator is a serial dependency it may not reorder). Fixed lane
// order, so the result depends only on the row.
template <typename A, typename T>
void row_max_sum(const T* x, int64_t C, A& mx_out, A& sum_out) {
  A mx[8], sm[8] = {};
  int64_t c = 0;
  if constexpr (std::is_same_v<T, float>) {  // the same lanes as vectors (Note [Eight-lane exp])
    f32x8 vm = splat8(-std::numeric_limits<float>::infinity()), vs = splat8(0.0f);
    for (; c + 8 <= C; c += 8) {
      const f32x8 v = load8(x + c);
      vm = v > vm ? v : vm;
      vs += v;
    }
    store8(mx, vm);
    store8(sm, vs);
  } else {
    for (int l = 0; l < 8; ++l) mx[l] = -std::numeric_limits<A>::infinity();
    for (; c + 8 <= C; c += 8)
      for (int l = 0; l < 8; ++l) {
        const A v = static_cast<A>(x[c + l]);
        mx[l] = v > mx[l] ? v : mx[l];
        sm[l] += v;
      }
  }
  A m = -std::numeric_limits<A>::infinity(), s = 0;
  for (; c < C; ++c) {
    const A v = static_cast<A>(x[c]);
    m = v > m ? v : m;
    s += v;
  }
  for (int l = 0; l < 8; ++l) m = mx[l] > m ? mx[l] : m;
  mx_out = m;
  sum_out = ((sm[0] + sm[1]) + (sm[2] + sm[3])) + ((sm[4] + sm[5]) + (sm[6] + sm[7])) + s;
}

template <typename A, typename T>
A row_sum_exp(const T* x, int64_t C, A shift) {
  A sm[8] = {};
  int64_t c = 0;
  if constexpr (std::is_same_v<T, float>) {
    f32x8 acc = splat8(0.0f);
    const f32x8 sh = splat8(shift);
    for (; c + 8 <= C; c += 8) acc += exp_f32x8(load8(x + c) - sh);
    store8(sm, acc);
  } else {
    for (; c + 8 <= C; c += 8)
      for (int l = 0; l < 8; ++l) sm[l] += vexp(static_cast<A>(x[c + l]) - shift);
  }
  A s = 0;
  for (; c < C; ++c) s += vexp(static_cast<A>(x[c]) - shift);
  return ((sm[0] + sm[1]) + (sm[2] + sm[3])) + ((sm[4] + sm[5]) + (sm[6] + sm[7])) + s;
}

template <typename T>
void cross_entropy_rows(T* loss, T* lse_out, const T* logits, const int64_t* target, int64_t N, int64_t C,
                        int64_t ignore, double smoothing) {
  using A = Acc<T>;
  const A eps = static_cast<A>(smoothing);
  parallel_for(N, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T* x = logits + n * C;
      A mx, sum_x;
      row_max_sum(x, C, mx, sum_x);
      const A lse = mx + std::log(row_sum_exp(x, C, mx));
      lse_out[n] = static_cast<T>(lse);
      if (target[n] == ignore) {
        loss[n] = T(0);
        continue;
      }
      const A nll = lse - static_cast<A>(x[target[n]]);
      const A smooth = lse - sum_x / static_cast<A>(C);
      loss[n] = static_cast<T>((A(1) - eps) * nll + eps * smooth);
    }
  });
}

template <typename T>
void cross_entropy_backward_rows(T* dlogits, const T* dloss, const T* logits, const T* lse,
                                 const int64_t* target, int64_t N, int64_t C, int64_t ignore, double smoothing) {
  using A = Acc<T>;
  const A eps = static_cast<A>(smoothing);
  parallel_for(N, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      T* d = dlogits + n * C;
      if (target[n] == ignore) {
        for (int64_t c = 0; c < C; ++c) d[c] = T(0);
        continue;
      }
      const A g = static_cast<A>(dloss[n]), l = static_cast<A>(lse[n]);
      const A off = eps / static_cast<A>(C);
      const T* x = logits + n * C;
      // branch-free over the row (vectorised), then the target's one-hot term
      int64_t c = 0;
      if constexpr (std::is_same_v<T, float>) {
        const f32x8 gv = splat8(g), lv = splat8(l), ov = splat8(off);
        for (; c + 8 <= C; c += 8) store8(d + c, gv * (exp_f32x8(load8(x + c) - lv) - ov));
      }
      for (; c < C; ++c) d[c] = static_cast<T>(g * (vexp(static_cast<A>(x[c]) - l) - off));
      const int64_t t = target[n];
      d[t] = static_cast<T>(g * (vexp(static_cast<A>(x[t]) - l) - off - (A(1) - eps)));
    }
  });
}

template <typename T>
const T* opt_ptr(const Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; }
template <typename T>
T* opt_mut(const Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; }

}  // namespace

void softmax(const Tensor& out, const Tensor& in, bool log) {
  const int64_t C = in.size(-1), R = in.numel() / std::max<int64_t>(C, 1);
  dispatch_floating(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_rows<T>(out.data_ptr<T>(), in.data_ptr<T>(), R, C, log);
  });
}

void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy, bool log) {
  const int64_t C = y.size(-1), R = y.numel() / std::max<int64_t>(C, 1);
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_rows<T>(dx.data_ptr<T>(), y.data_ptr<T>(), dy.data_ptr<T>(), R, C, log);
  });
}

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    layer_norm_rows<T, S>(y.data_ptr<T>(), mean.data_ptr<S>(), rstd.data_ptr<S>(), x.data_ptr<T>(),
                          opt_ptr<T>(weight), opt_ptr<T>(bias), R, C, eps);
  });
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                         const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    layer_norm_backward_rows<T, S>(dx.data_ptr<T>(), opt_mut<T>(dweight), opt_mut<T>(dbias), dy.data_ptr<T>(),
                                   x.data_ptr<T>(), mean.data_ptr<S>(), rstd.data_ptr<S>(), opt_ptr<T>(weight),
                                   R, C);
  });
}

void cross_entropy(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index, double smoothing) {
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_rows<T>(loss.data_ptr<T>(), lse.data_ptr<T>(), logits.data_ptr<T>(), target.data_ptr<int64_t>(),
                          logits.size(0), logits.size(1), ignore_index, smoothing);
  });
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, int64_t ignore_index, double smoothing) {
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_backward_rows<T>(dlogits.data_ptr<T>(), dloss.data_ptr<T>(), logits.data_ptr<T>(),
                                   lse.data_ptr<T>(), target.data_ptr<int64_t>(), logits.size(0),
                                   logits.size(1), ignore_index, smoothing);
  });
}

}  // namespace kiln::cpu
