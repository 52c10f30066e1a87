// CPU bodies of the multi-tensor ops (Note [Multi-tensor ops], ops/multi_tensor.h):
// the fused AdamW and LAMB updates, the norm of a list and the non-finite
// check. Each tensor of a list is processed in list order by a blocked loop
// over its raw data (core/block_loop.h, Note [Deterministic chunking]), so a
// list gives exactly what the tensors give one at a time, for any thread
// count. The CUDA bodies (cuda/optim_kernels.cu) follow these statements and
// roundings.
#include <Eigen/Core>
#include <cmath>
#include <cstring>

#include "core/block_loop.h"
#include "core/cpu/cpu_kernels.h"

namespace kiln::cpu {
namespace {

using detail::for_each_block;
using detail::kBlock;
using detail::kChunk;
using detail::sum_blocks;

// f(TypeTag<T>{}) for T = float or double (the ops check the dtypes first).
template <typename F>
decltype(auto) dispatch_f32_f64(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    default: fail(op, ": tensors must be float32 or float64, got ", dtype_name(t));
  }
}

// Sum of x[i]^2 over [0, n) in float64 with eight interleaved accumulators
// combined in a fixed order: deterministic, and vectorisable without fast-math.
template <typename T>
double sum_squares(const T* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double v = static_cast<double>(x[i + k]);
      acc[k] += v * v;
    }
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// ---- AdamW --------------------------------------------------------------------

// One fused pass over blocks; the statement order follows torch.optim.AdamW's
// single-tensor path (mul_, add_, addcmul_, sqrt / bc2_sqrt + eps, addcdiv_),
// with T arithmetic and the scalars rounded to T first.
template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, double lr, double weight_decay, double beta1, double beta2,
                  double eps, int64_t step) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  const double t = static_cast<double>(step);
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T b1 = static_cast<T>(beta1), c1 = static_cast<T>(1.0 - beta1);
  const T b2 = static_cast<T>(beta2), c2 = static_cast<T>(1.0 - beta2);
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, t)));
  const T neg_step_size = static_cast<T>(-(lr / (1.0 - std::pow(beta1, t))));
  const T eps_t = static_cast<T>(eps);
  for_each_block(n, [&](int64_t b, int64_t e) {
    Eigen::Map<Array> P(p + b, e - b), M(m + b, e - b), V(v + b, e - b);
    const Eigen::Map<const Array> G(g + b, e - b);
    if (decay != T(1)) P = P * decay;
    M = M * b1 + G * c1;
    V = V * b2 + (G * c2) * G;
    P = P + (M * neg_step_size) / (V.sqrt() / bc2_sqrt + eps_t);
  });
}

// ---- LAMB ---------------------------------------------------------------------

template <typename T>
using Block = Eigen::Array<T, Eigen::Dynamic, 1, Eigen::ColMajor, kBlock, 1>;

struct NormsSq {
  double p = 0.0, u = 0.0;
  NormsSq operator+(const NormsSq& o) const { return {p + o.p, u + o.u}; }
};

template <typename T>
struct LambScalars {
  T b1, c1, b2, c2, bc1, bc2, eps, wd;
};

// u for one block from the updated m, v and the current p. Both passes call
// this one function, so the second sees exactly the values the first measured.
template <typename T>
[[gnu::noinline]] void lamb_direction(const T* p, const T* m, const T* v, int64_t n, const LambScalars<T>& s,
                                      Block<T>& u) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  const Eigen::Map<const Array> P(p, n), M(m, n), V(v, n);
  u.resize(n);
  u = (M / s.bc1) / ((V / s.bc2).sqrt() + s.eps) + s.wd * P;
}

template <typename T>
void lamb_update(T* p, const T* g, T* m, T* v, int64_t n, double lr, const LambScalars<T>& s) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  // Pass 1: moments, and the squared norms of p and u.
  const NormsSq sq = sum_blocks<NormsSq>(n, [&](int64_t b, int64_t e) {
    Eigen::Map<Array> M(m + b, e - b), V(v + b, e - b);
    const Eigen::Map<const Array> G(g + b, e - b);
    M = M * s.b1 + G * s.c1;
    V = V * s.b2 + (G * s.c2) * G;
    Block<T> u;
    lamb_direction(p + b, m + b, v + b, e - b, s, u);
    return NormsSq{sum_squares(p + b, e - b), sum_squares(u.data(), e - b)};
  });
  const double p_norm = std::sqrt(sq.p), u_norm = std::sqrt(sq.u);
  const double ratio = p_norm > 0 && u_norm > 0 ? p_norm / u_norm : 1.0;
  const T scale = static_cast<T>(-(lr * ratio));
  // Pass 2: apply.
  for_each_block(n, [&](int64_t b, int64_t e) {
    Block<T> u;
    lamb_direction(p + b, m + b, v + b, e - b, s, u);
    Eigen::Map<Array> P(p + b, e - b);
    P = P + scale * u;
  });
}

// ---- norms --------------------------------------------------------------------

// max |x| over [0, n), nan when any element is nan.
template <typename T>
double max_abs(const T* x, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::abs(static_cast<double>(x[i]));
    if (!(a <= m)) m = a;  // also takes a nan, after which nothing replaces it
    if (std::isnan(m)) return m;
  }
  return m;
}

template <typename T>
double sum_abs_pow(const T* x, int64_t n, double p) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), p);
  return acc;
}

double combine_max(double a, double b) { return std::isnan(a) || a > b ? a : b; }

// sum_i |x_i|^p over one contiguous tensor (for p = inf: max |x_i|).
double norm_partial(const Tensor& t, double norm_type) {
  return dispatch_f32_f64(t.dtype(), "multi_tensor_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = t.data_ptr<T>();
    const int64_t n = t.numel();
    if (std::isinf(norm_type))
      return parallel_reduce(
          n, kChunk, 0.0, [&](int64_t b, int64_t e) { return max_abs(x + b, e - b); }, combine_max);
    if (norm_type == 2.0)
      return sum_blocks(n, [&](int64_t b, int64_t e) { return sum_squares(x + b, e - b); });
    return sum_blocks(n, [&](int64_t b, int64_t e) { return sum_abs_pow(x + b, e - b, norm_type); });
  });
}

// ---- the non-finite check -------------------------------------------------------

// 1 when some element of the contiguous buffer has an all-ones exponent (inf
// or NaN). Bits, not std::isfinite, so 16-bit floats need no conversion; the
// loop has no early exit and vectorises.
template <typename U>
int has_nonfinite(const void* data, int64_t n, U exponent_mask) {
  const U* p = static_cast<const U*>(data);
  return parallel_reduce<int>(
      n, 1 << 16, 0,
      [&](int64_t b, int64_t e) {
        int bad = 0;
        for (int64_t i = b; i < e; ++i) bad |= (p[i] & exponent_mask) == exponent_mask;
        return bad;
      },
      [](int a, int b) { return a | b; });
}

bool all_finite(const Tensor& t) {
  const void* d = t.raw_data();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::Float32: return !has_nonfinite<uint32_t>(d, n, 0x7f800000u);
    case DType::Float64: return !has_nonfinite<uint64_t>(d, n, 0x7ff0000000000000ull);
    case DType::Float16: return !has_nonfinite<uint16_t>(d, n, 0x7c00u);
    case DType::BFloat16: return !has_nonfinite<uint16_t>(d, n, 0x7f80u);
    default: return true;  // integers and bools are always finite
  }
}

}  // namespace

void multi_tensor_adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                        double eps) {
  for (size_t i = 0; i < params.size(); ++i) {
    dispatch_f32_f64(params[i].dtype(), "multi_tensor_adamw_", [&](auto tag) {
      using T = typename decltype(tag)::type;
      adamw_update<T>(params[i].data_ptr<T>(), grads[i].data_ptr<T>(), exp_avgs[i].data_ptr<T>(),
                      exp_avg_sqs[i].data_ptr<T>(), params[i].numel(), lr, weight_decay, beta1, beta2, eps, steps[i]);
    });
  }
}

void multi_tensor_lamb(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                       double eps, bool bias_correction) {
  for (size_t i = 0; i < params.size(); ++i) {
    const double t = static_cast<double>(steps[i]);
    const double bc1 = bias_correction ? 1.0 - std::pow(beta1, t) : 1.0;
    const double bc2 = bias_correction ? 1.0 - std::pow(beta2, t) : 1.0;
    dispatch_f32_f64(params[i].dtype(), "multi_tensor_lamb_", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const LambScalars<T> s{static_cast<T>(beta1), static_cast<T>(1.0 - beta1), static_cast<T>(beta2),
                             static_cast<T>(1.0 - beta2), static_cast<T>(bc1), static_cast<T>(bc2),
                             static_cast<T>(eps), static_cast<T>(weight_decay)};
      lamb_update<T>(params[i].data_ptr<T>(), grads[i].data_ptr<T>(), exp_avgs[i].data_ptr<T>(),
                     exp_avg_sqs[i].data_ptr<T>(), params[i].numel(), lr, s);
    });
  }
}

void multi_tensor_norm(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type) {
  const bool inf = std::isinf(norm_type);
  double acc = 0.0;
  for (const Tensor& t : tensors) {
    const double part = norm_partial(t, norm_type);
    acc = inf ? combine_max(acc, part) : acc + part;
  }
  *out.data_ptr<double>() = inf ? acc : norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type);
}

void multi_tensor_all_finite(const Tensor& out, const std::vector<Tensor>& tensors) {
  bool ok = true;
  for (const Tensor& t : tensors) ok = all_finite(t) && ok;
  *out.data_ptr<bool>() = ok;
}

}  // namespace kiln::cpu
