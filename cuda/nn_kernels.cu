// CUDA row kernels for the fused nn ops: softmax / log_softmax, layer norm and
// softmax-cross-entropy, forward and backward. CPU twin:
// core/cpu/nn_kernels.cpp (same formulas, same saved statistics).
//
// One block per row; each thread walks the row with a block-sized stride and
// the block combines per-thread partials in a fixed tree (block_all_reduce,
// cuda/row_kernels.cuh, shared with cuda/decoder_kernels.cu),
// so results are reproducible run to run. The layer-norm weight and bias
// gradients are column sums taken, as on the CPU, over fixed blocks of rows
// whose partials are then added in block order: no atomics.
#include <limits>

#include "cuda/row_kernels.cuh"

namespace kiln::cuda::kernels {
namespace {

template <typename T>
__global__ void softmax_kernel(T* y, const T* x, int64_t C, bool log) {
  using A = acc_t<T>;
  const T* xr = x + blockIdx.x * C;
  T* yr = y + blockIdx.x * C;
  A mx = -std::numeric_limits<A>::infinity();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = MaxOp{}(mx, to_acc(xr[c]));
  mx = block_all_reduce(mx, MaxOp{});
  if (mx == -std::numeric_limits<A>::infinity()) mx = 0;  // all -inf row: exp() gives 0s, sum 0
  A sum = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += m_exp(to_acc(xr[c]) - mx);
  sum = block_all_reduce(sum, SumOp{});
  if (log) {
    const A lse = m_log(sum) + mx;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_acc<T>(to_acc(xr[c]) - lse);
  } else {
    const A inv = A(1) / sum;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_acc<T>(m_exp(to_acc(xr[c]) - mx) * inv);
  }
}

// Attention's normalisation in one pass (scaled_masked_softmax, ops/nn_ops.cpp):
// row r of x scaled and shifted by mask row r / rows_per_mask (mask may be
// null), then softmax, all in the accumulation type. The CPU composes mul,
// add and softmax, rounding to T after each; this rounds once.
template <typename T>
__global__ void scaled_masked_softmax_kernel(T* y, const T* x, const T* mask, int64_t rows_per_mask, int64_t C,
                                             acc_t<T> scale) {
  using A = acc_t<T>;
  const T* xr = x + blockIdx.x * C;
  const T* mr = mask ? mask + (blockIdx.x / rows_per_mask) * C : nullptr;
  T* yr = y + blockIdx.x * C;
  auto value = [&](int64_t c) { return to_acc(xr[c]) * scale + (mr ? to_acc(mr[c]) : A(0)); };
  A mx = -std::numeric_limits<A>::infinity();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = MaxOp{}(mx, value(c));
  mx = block_all_reduce(mx, MaxOp{});
  if (mx == -std::numeric_limits<A>::infinity()) mx = 0;  // all -inf row: exp() gives 0s, sum 0
  A sum = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += m_exp(value(c) - mx);
  sum = block_all_reduce(sum, SumOp{});
  const A inv = A(1) / sum;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = from_acc<T>(m_exp(value(c) - mx) * inv);
}

template <typename T>
__global__ void softmax_backward_kernel(T* dx, const T* y, const T* dy, int64_t C, bool log) {
  using A = acc_t<T>;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * C;
  A dot = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += log ? to_acc(dy[base + c]) : to_acc(dy[base + c]) * to_acc(y[base + c]);
  dot = block_all_reduce(dot, SumOp{});
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A g = to_acc(dy[base + c]), yv = to_acc(y[base + c]);
    dx[base + c] = from_acc<T>(log ? g - m_exp(yv) * dot : yv * (g - dot));
  }
}

template <typename T, typename S>
__global__ void layer_norm_kernel(T* y, S* mean, S* rstd, const T* x, const T* w, const T* b, int64_t C,
                                  double eps) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  T* yr = y + r * C;
  A m = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m += to_acc(xr[c]);
  m = block_all_reduce(m, SumOp{}) / static_cast<A>(C);
  A v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A d = to_acc(xr[c]) - m;
    v += d * d;
  }
  v = block_all_reduce(v, SumOp{}) / static_cast<A>(C);
  const A rs = A(1) / m_sqrt(v + static_cast<A>(eps));
  if (threadIdx.x == 0) {
    mean[r] = static_cast<S>(m);
    rstd[r] = static_cast<S>(rs);
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    A h = (to_acc(xr[c]) - m) * rs;
    if (w) h = h * to_acc(w[c]);
    if (b) h = h + to_acc(b[c]);
    yr[c] = from_acc<T>(h);
  }
}

template <typename T, typename S>
__global__ void layer_norm_backward_dx_kernel(T* dx, const T* dy, const T* x, const S* mean, const S* rstd,
                                              const T* w, int64_t C) {
  using A = acc_t<T>;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * C;
  const A m = static_cast<A>(mean[blockIdx.x]), rs = static_cast<A>(rstd[blockIdx.x]);
  A sum_g = 0, sum_gx = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A g = to_acc(dy[base + c]) * (w ? to_acc(w[c]) : A(1));
    sum_g += g;
    sum_gx += g * ((to_acc(x[base + c]) - m) * rs);
  }
  sum_g = block_all_reduce(sum_g, SumOp{});
  sum_gx = block_all_reduce(sum_gx, SumOp{});
  const A inv_c = A(1) / static_cast<A>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A g = to_acc(dy[base + c]) * (w ? to_acc(w[c]) : A(1));
    const A xh = (to_acc(x[base + c]) - m) * rs;
    dx[base + c] = from_acc<T>(rs * (g - inv_c * sum_g - xh * inv_c * sum_gx));
  }
}

// Thread (column c, row block y) sums rows [y*rows, (y+1)*rows) into partials.
template <typename T, typename S>
__global__ void layer_norm_backward_wb_kernel(acc_t<T>* pw, acc_t<T>* pb, const T* dy, const T* x, const S* mean,
                                              const S* rstd, int64_t R, int64_t C, int64_t rows) {
  using A = acc_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * rows, r1 = r0 + rows < R ? r0 + rows : R;
  A aw = 0, ab = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const A g = to_acc(dy[r * C + c]);
    aw += g * (to_acc(x[r * C + c]) - static_cast<A>(mean[r])) * static_cast<A>(rstd[r]);
    ab += g;
  }
  pw[blockIdx.y * C + c] = aw;
  pb[blockIdx.y * C + c] = ab;
}

template <typename T>
__global__ void layer_norm_backward_wb_final_kernel(T* dw, T* db, const acc_t<T>* pw, const acc_t<T>* pb,
                                                    int64_t blocks, int64_t C) {
  using A = acc_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  A sw = 0, sb = 0;
  for (int64_t k = 0; k < blocks; ++k) {
    sw += pw[k * C + c];
    sb += pb[k * C + c];
  }
  if (dw) dw[c] = from_acc<T>(sw);
  if (db) db[c] = from_acc<T>(sb);
}

template <typename T>
__global__ void cross_entropy_kernel(T* loss, T* lse_out, const T* logits, const int64_t* target, int64_t C,
                                     int64_t ignore, double smoothing) {
  using A = acc_t<T>;
  const int64_t n = blockIdx.x;
  const T* x = logits + n * C;
  A mx = -std::numeric_limits<A>::infinity(), sum_x = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A v = to_acc(x[c]);
    mx = MaxOp{}(mx, v);
    sum_x += v;
  }
  mx = block_all_reduce(mx, MaxOp{});
  sum_x = block_all_reduce(sum_x, SumOp{});
  A s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += m_exp(to_acc(x[c]) - mx);
  s = block_all_reduce(s, SumOp{});
  if (threadIdx.x != 0) return;
  const A lse = mx + m_log(s);
  lse_out[n] = from_acc<T>(lse);
  const int64_t t = target[n];
  if (t == ignore) {
    loss[n] = from_acc<T>(A(0));
    return;
  }
  if (t < 0 || t >= C) {  // reported by the queued index check (Note [Lazy index checks])
    loss[n] = from_acc<T>(std::numeric_limits<A>::quiet_NaN());
    return;
  }
  const A eps = static_cast<A>(smoothing);
  const A nll = lse - to_acc(x[t]);
  const A smooth = lse - sum_x / static_cast<A>(C);
  loss[n] = from_acc<T>((A(1) - eps) * nll + eps * smooth);
}

template <typename T>
__global__ void cross_entropy_backward_kernel(T* dlogits, const T* dloss, const T* logits, const T* lse,
                                              const int64_t* target, int64_t N, int64_t C, int64_t ignore,
                                              double smoothing) {
  using A = acc_t<T>;
  const int64_t total = N * C, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const A eps = static_cast<A>(smoothing), off = eps / static_cast<A>(C);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t n = i / C, c = i % C;
    const int64_t t = target[n];
    if (t == ignore) {
      dlogits[i] = from_acc<T>(A(0));
      continue;
    }
    const A p = m_exp(to_acc(logits[i]) - to_acc(lse[n]));
    dlogits[i] = from_acc<T>(to_acc(dloss[n]) * (p - off - (c == t ? A(1) - eps : A(0))));
  }
}

}  // namespace

void softmax(const Tensor& out, const Tensor& in, bool log) {
  const int64_t C = in.size(-1), R = in.numel() / std::max<int64_t>(C, 1);
  if (R == 0 || C == 0) return;
  check_rows(R);
  dispatch_device_floating(in.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(static_cast<unsigned>(R), threads_for(C), 0, stream_of(out), softmax_kernel<T>)(ptr<T>(out), ptr<T>(in), C,
                                                                                       log);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void scaled_masked_softmax(const Tensor& out, const Tensor& x, const Tensor& mask, double scale) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  if (R == 0 || C == 0) return;
  check_rows(R);
  const int64_t mask_rows = mask.defined() ? mask.numel() / C : 1;
  KILN_CHECK(mask_rows > 0 && R % mask_rows == 0, "scaled_masked_softmax: ", R, " rows do not repeat ", mask_rows,
             " mask rows");
  dispatch_device_floating(x.dtype(), "scaled_masked_softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(static_cast<unsigned>(R), threads_for(C), 0, stream_of(out), scaled_masked_softmax_kernel<T>)(
        ptr<T>(out), ptr<T>(x), opt_ptr<T>(mask), R / mask_rows, C,
        static_cast<acc_t<T>>(scale));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy, bool log) {
  const int64_t C = y.size(-1), R = y.numel() / std::max<int64_t>(C, 1);
  if (R == 0 || C == 0) return;
  check_rows(R);
  dispatch_device_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(static_cast<unsigned>(R), threads_for(C), 0, stream_of(dx), softmax_backward_kernel<T>)(
        ptr<T>(dx), ptr<T>(y), ptr<T>(dy), C, log);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  if (R == 0 || C == 0) return;
  check_rows(R);
  dispatch_device_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    KILN_LAUNCH(static_cast<unsigned>(R), threads_for(C), 0, stream_of(y), layer_norm_kernel<T, S>)(
        ptr<T>(y), ptr<S>(mean), ptr<S>(rstd), ptr<T>(x), opt_ptr<T>(weight), opt_ptr<T>(bias), C, eps);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                         const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const int64_t C = x.size(-1), R = x.numel() / std::max<int64_t>(C, 1);
  if (R == 0 || C == 0) return;
  check_rows(R);
  const cudaStream_t stream = stream_of(dx);
  dispatch_device_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using A = acc_t<T>;
    KILN_LAUNCH(static_cast<unsigned>(R), threads_for(C), 0, stream, layer_norm_backward_dx_kernel<T, S>)(
        ptr<T>(dx), ptr<T>(dy), ptr<T>(x), ptr<S>(mean), ptr<S>(rstd), opt_ptr<T>(weight), C);
    KILN_CUDA_CHECK_LAUNCH();
    if (!dweight.defined() && !dbias.defined()) return;
    // Row blocks of 64 as the CPU twin (more when that would exceed the grid's y limit).
    const int64_t rows = std::max<int64_t>(64, (R + 65534) / 65535);
    const int64_t blocks = (R + rows - 1) / rows;
    const DType acc_dtype = std::is_same_v<A, double> ? DType::Float64 : DType::Float32;
    Tensor pw = empty_tensor({blocks, C}, acc_dtype, x.device()), pb = empty_tensor({blocks, C}, acc_dtype, x.device());
    const unsigned bx = static_cast<unsigned>((C + kThreads - 1) / kThreads);
    KILN_LAUNCH(dim3(bx, static_cast<unsigned>(blocks)), kThreads, 0, stream, layer_norm_backward_wb_kernel<T, S>)(
        ptr<A>(pw), ptr<A>(pb), ptr<T>(dy), ptr<T>(x), ptr<S>(mean), ptr<S>(rstd), R, C, rows);
    KILN_CUDA_CHECK_LAUNCH();
    KILN_LAUNCH(bx, kThreads, 0, stream, layer_norm_backward_wb_final_kernel<T>)(
        dweight.defined() ? ptr<T>(dweight) : nullptr, dbias.defined() ? ptr<T>(dbias) : nullptr, ptr<A>(pw),
        ptr<A>(pb), blocks, C);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  check_rows(N);
  dispatch_device_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(static_cast<unsigned>(N), threads_for(C), 0, stream_of(loss), cross_entropy_kernel<T>)(
        ptr<T>(loss), ptr<T>(lse), ptr<T>(logits), ptr<int64_t>(target), C, ignore_index, smoothing);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, int64_t ignore_index, double smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N * C == 0) return;
  dispatch_device_floating(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    KILN_LAUNCH(grid_for(N * C), kThreads, 0, stream_of(dlogits), cross_entropy_backward_kernel<T>)(
        ptr<T>(dlogits), ptr<T>(dloss), ptr<T>(logits), ptr<T>(lse), ptr<int64_t>(target), N, C, ignore_index,
        smoothing);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kiln::cuda::kernels
