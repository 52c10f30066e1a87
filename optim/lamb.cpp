#include "optim/lamb.h"

#include <cmath>

#include "ops/ops.h"
#include "optim/adamw.h"
#include "optim/update_loop.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> lamb_defaults(const LAMBOptions& o) {
  return {{"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"bias_correction", o.bias_correction ? 1.0 : 0.0}};
}

// The generic path (Note [Fused and generic updates]): the CPU body of
// multi_tensor_lamb_ (core/cpu/multi_tensor.cpp) with tensor ops, the scalars
// in double (the ops round them to p's dtype as that loop does). The squared
// norms are float64 sums in the device's reduction order, and the trust ratio
// is computed on the device, so nothing is read back to the host.
void lamb_update_generic(Tensor p, const Tensor& g, Tensor m, Tensor v, double lr, double beta1, double beta2,
                         double bc1, double bc2, double eps, double weight_decay) {
  m.mul_(beta1);                        // m * b1
  m.add_(g, 1.0 - beta1);               // + g * c1
  v.mul_(beta2);                        // v * b2
  v.add_(mul(mul(g, 1.0 - beta2), g));  // + (g * c2) * g
  // u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * p
  const Tensor u = add(div(div(m, bc1), add(sqrt(div(v, bc2)), eps)), mul(p, weight_decay));
  auto norm = [](const Tensor& x) {
    const Tensor x64 = to_dtype(x, DType::Float64);
    return sqrt(sum(mul(x64, x64)));
  };
  const Tensor p_norm = norm(p), u_norm = norm(u);  // float64, 0-dim
  // ratio = p_norm / u_norm, or 1 when either norm is 0 (or NaN)
  const Tensor ratio = where(gt(p_norm, 0.0), where(gt(u_norm, 0.0), div(p_norm, u_norm), 1.0), 1.0);
  const Tensor scale = to_dtype(mul(ratio, -lr), p.dtype());  // -(lr * ratio), rounded to p's dtype
  p.add_(mul(u, scale));                                       // p + scale * u
}

}  // namespace

LAMB::LAMB(std::vector<Tensor> params, const LAMBOptions& options)
    : LAMB(std::vector<ParamGroup>{ParamGroup{std::move(params), {}, {}, {}}}, options) {}

LAMB::LAMB(std::vector<ParamGroup> groups, const LAMBOptions& options)
    : Optimizer("LAMB", std::move(groups), options.lr, options.weight_decay, lamb_defaults(options)) {
  validate_all_groups();
}

std::vector<std::string> LAMB::buffer_names(const ParamGroup&) const { return {"exp_avg", "exp_avg_sq"}; }

void LAMB::validate(const ParamGroup& group) const {
  check_adam_options("LAMB", group);
  const double bc = group.option("bias_correction");
  KILN_CHECK(bc == 0.0 || bc == 1.0, "LAMB: bias_correction must be 0 or 1, got ", bc);
}

void LAMB::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  if (state.buffers.empty()) {
    state.buffers.push_back(zeros(param.sizes(), TensorOptions(param.dtype(), param.device())));
    state.buffers.push_back(zeros(param.sizes(), TensorOptions(param.dtype(), param.device())));
  }
  const double beta1 = group.option("beta1"), beta2 = group.option("beta2");
  const bool bias_correction = group.option("bias_correction") != 0.0;
  if (detail::use_multi_tensor_update(param)) {
    multi_tensor_lamb_({param}, {grad}, {state.buffers[0]}, {state.buffers[1]}, {state.step}, *group.lr,
                       *group.weight_decay, beta1, beta2, group.option("eps"), bias_correction);
    return;
  }
  const double t = static_cast<double>(state.step);
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, t) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, t) : 1.0;
  lamb_update_generic(param, grad, state.buffers[0], state.buffers[1], *group.lr, beta1, beta2, bc1, bc2,
                      group.option("eps"), *group.weight_decay);
}

// One multi-tensor op per (device, dtype) bucket (Note [Multi-tensor ops]).
void LAMB::update_group(const ParamGroup& group, const std::vector<UpdateItem>& items) {
  const auto split = detail::split_items(items);
  for (const UpdateItem* it : split.rest) update(group, it->param, it->grad, *it->state);
  for (const auto& bucket : split.buckets) {
    const detail::MomentBucket b = detail::gather_moment_bucket(bucket);
    multi_tensor_lamb_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.steps, *group.lr, *group.weight_decay,
                       group.option("beta1"), group.option("beta2"), group.option("eps"),
                       group.option("bias_correction") != 0.0);
  }
}

}  // namespace kiln::optim
