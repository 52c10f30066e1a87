#include "optim/adamw.h"

#include <cmath>

#include "ops/ops.h"
#include "optim/update_loop.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> adamw_defaults(const AdamWOptions& o) {
  return {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}};
}

// The generic path (Note [Fused and generic updates]): the statements of the
// CPU body of multi_tensor_adamw_ (core/cpu/multi_tensor.cpp) as tensor ops.
// The ops round each double scalar to the parameter's dtype, as that loop does.
void adamw_update_generic(Tensor p, const Tensor& g, Tensor m, Tensor v, double lr, double weight_decay,
                          double beta1, double beta2, double eps, int64_t step) {
  const double t = static_cast<double>(step);
  const double decay = 1.0 - lr * weight_decay;
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, t));
  const double neg_step_size = -(lr / (1.0 - std::pow(beta1, t)));
  if (decay != 1.0) p.mul_(decay);  // p * decay (a decay that rounds to 1 leaves p as it is either way)
  m.mul_(beta1);                    // m * b1
  m.add_(g, 1.0 - beta1);           // + g * c1
  v.mul_(beta2);                    // v * b2
  v.add_(mul(mul(g, 1.0 - beta2), g));  // + (g * c2) * g
  const Tensor denom = add(div(sqrt(v), bc2_sqrt), eps);  // sqrt(v) / bc2_sqrt + eps
  p.add_(div(mul(m, neg_step_size), denom));              // p + (m * neg_step_size) / denom
}

}  // namespace

void check_adam_options(const std::string& opt, const ParamGroup& group) {
  const double beta1 = group.option("beta1"), beta2 = group.option("beta2"), eps = group.option("eps");
  KILN_CHECK(beta1 >= 0 && beta1 < 1, opt, ": invalid beta1 ", beta1, " (must be in [0, 1))");
  KILN_CHECK(beta2 >= 0 && beta2 < 1, opt, ": invalid beta2 ", beta2, " (must be in [0, 1))");
  KILN_CHECK(eps >= 0, opt, ": invalid eps ", eps, " (must be >= 0)");
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), {}, {}, {}}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Optimizer("AdamW", std::move(groups), options.lr, options.weight_decay, adamw_defaults(options)) {
  validate_all_groups();
}

std::vector<std::string> AdamW::buffer_names(const ParamGroup&) const { return {"exp_avg", "exp_avg_sq"}; }

void AdamW::validate(const ParamGroup& group) const { check_adam_options("AdamW", group); }

void AdamW::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  if (state.buffers.empty()) {
    state.buffers.push_back(zeros(param.sizes(), TensorOptions(param.dtype(), param.device())));
    state.buffers.push_back(zeros(param.sizes(), TensorOptions(param.dtype(), param.device())));
  }
  if (!detail::use_multi_tensor_update(param)) {
    adamw_update_generic(param, grad, state.buffers[0], state.buffers[1], *group.lr, *group.weight_decay,
                         group.option("beta1"), group.option("beta2"), group.option("eps"), state.step);
    return;
  }
  multi_tensor_adamw_({param}, {grad}, {state.buffers[0]}, {state.buffers[1]}, {state.step}, *group.lr,
                      *group.weight_decay, group.option("beta1"), group.option("beta2"), group.option("eps"));
}

// One multi-tensor op per (device, dtype) bucket (Note [Multi-tensor ops]).
void AdamW::update_group(const ParamGroup& group, const std::vector<UpdateItem>& items) {
  const auto split = detail::split_items(items);
  for (const UpdateItem* it : split.rest) update(group, it->param, it->grad, *it->state);
  for (const auto& bucket : split.buckets) {
    const detail::MomentBucket b = detail::gather_moment_bucket(bucket);
    multi_tensor_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.steps, *group.lr, *group.weight_decay,
                        group.option("beta1"), group.option("beta2"), group.option("eps"));
  }
}

}  // namespace kiln::optim
