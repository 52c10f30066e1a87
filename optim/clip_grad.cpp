#include "optim/clip_grad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/ops.h"
#include "optim/optimizer.h"
#include "optim/update_loop.h"

namespace kiln::optim {
namespace {

std::vector<Tensor> gradients(const std::vector<Tensor>& params, const char* fn) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    KILN_CHECK(params[i].defined(), fn, ": parameter ", i, " is an undefined tensor");
    const Tensor& g = params[i].grad();
    if (!g.defined()) continue;
    KILN_CHECK(g.dtype() == DType::Float32 || g.dtype() == DType::Float64, fn, ": the gradient of parameter ", i,
               " is ", dtype_name(g.dtype()), "; expected float32 or float64");
    grads.push_back(g);
  }
  return grads;
}

// The generic path (Note [Fused and generic updates] in optim/optimizer.h):
// the same float64 accumulation with tensor ops on each gradient's device;
// within a gradient the sum runs in the device's reduction order, across
// gradients in list order as in multi_tensor_norm. One read back to the host
// at the end.
double total_norm_generic(const std::vector<Tensor>& grads, double norm_type) {
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  std::vector<Tensor> parts;  // float64 0-dim, moved to the first gradient's device
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;  // adds 0 (max: 0, the starting value)
    const Tensor x = to_dtype(g, DType::Float64);
    Tensor part;
    if (inf) part = amax(abs(x));  // propagates NaN
    else if (norm_type == 2.0) part = sum(mul(x, x));
    else part = sum(pow(abs(x), norm_type));
    if (!parts.empty() && part.device() != parts.front().device()) part = to_device(part, parts.front().device());
    parts.push_back(part);
  }
  if (parts.empty()) return 0.0;
  double acc;
  if (inf) {
    acc = amax(stack(parts)).item<double>();  // every part >= 0 (or NaN, which amax keeps)
  } else {
    Tensor t = parts.front();
    for (size_t i = 1; i < parts.size(); ++i) t = add(t, parts[i]);
    acc = t.item<double>();
  }
  if (inf) return acc;
  return norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type);
}

// One multi-tensor op (Note [Multi-tensor ops]: on the CPU the fused loops,
// float64 sums in a fixed order, on CUDA one kernel) when every gradient is
// on one CPU or CUDA device and the generic path is not forced; else the
// generic path for all of them.
double total_norm(const std::vector<Tensor>& grads, double norm_type) {
  bool one_device = true;
  for (const Tensor& g : grads)
    one_device = one_device && detail::use_multi_tensor_update(g) && g.device() == grads.front().device();
  if (!one_device) return total_norm_generic(grads, norm_type);
  return multi_tensor_norm(grads, norm_type).item<double>();
}

void check_norm_type(double norm_type, const char* fn) {
  KILN_CHECK(norm_type > 0, fn, ": norm_type must be > 0 (or infinity), got ", norm_type);
}

// Every gradient times min(max_norm / (total + 1e-6), 1).
void scale_gradients(const std::vector<Tensor>& grads, double max_norm, double total) {
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);  // std::min keeps a nan coef
  NoGradGuard no_grad;
  for (const Tensor& grad : grads) {
    detail::dispatch_float(grad.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T c = static_cast<T>(coef);
      if (c == T(1)) return;
      if (!grad.is_contiguous() || !detail::use_fused_update(grad)) {  // the generic path: same products
        Tensor(grad).mul_(static_cast<double>(c));
        return;
      }
      T* x = grad.data_ptr<T>();
      detail::for_each_block(grad.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) x[i] = x[i] * c;
      });
      grad.bump_version();
    });
  }
}

}  // namespace

void clip_grads_to_norm(const std::vector<Tensor>& params, double max_norm, double total_norm) {
  KILN_CHECK(max_norm >= 0, "clip_grads_to_norm: max_norm must be >= 0, got ", max_norm);
  scale_gradients(gradients(params, "clip_grads_to_norm"), max_norm, total_norm);
}

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  check_norm_type(norm_type, "grad_norm");
  return total_norm(gradients(params, "grad_norm"), norm_type);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  check_norm_type(norm_type, "clip_grad_norm");
  KILN_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  const std::vector<Tensor> grads = gradients(params, "clip_grad_norm");
  if (grads.empty()) return 0.0;
  const double total = total_norm(grads, norm_type);
  KILN_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm: the total norm of order ", norm_type,
             " of the gradients is ", total, "; set error_if_nonfinite = false to scale by it anyway");
  scale_gradients(grads, max_norm, total);
  return total;
}

}  // namespace kiln::optim
