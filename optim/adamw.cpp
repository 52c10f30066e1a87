#include "optim/adamw.h"

#include <Eigen/Core>
#include <cmath>

#include "cuda/cuda.h"
#include "ops/ops.h"
#include "optim/update_loop.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> adamw_defaults(const AdamWOptions& o) {
  return {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}};
}

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
  detail::for_each_block(n, [&](int64_t b, int64_t e) {
    Eigen::Map<Array> P(p + b, e - b), M(m + b, e - b), V(v + b, e - b);
    const Eigen::Map<const Array> G(g + b, e - b);
    if (decay != T(1)) P = P * decay;
    M = M * b1 + G * c1;
    V = V * b2 + (G * c2) * G;
    P = P + (M * neg_step_size) / (V.sqrt() / bc2_sqrt + eps_t);
  });
}

// The generic path (Note [Fused and generic updates]): adamw_update's
// statements as tensor ops. The ops round each double scalar to the
// parameter's dtype, as the fused loop does.
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
  if (!detail::use_fused_update(param)) {
    adamw_update_generic(param, grad, state.buffers[0], state.buffers[1], *group.lr, *group.weight_decay,
                         group.option("beta1"), group.option("beta2"), group.option("eps"), state.step);
    return;
  }
  detail::dispatch_float(param.dtype(), "AdamW", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adamw_update<T>(param.data_ptr<T>(), grad.data_ptr<T>(), state.buffers[0].data_ptr<T>(),
                    state.buffers[1].data_ptr<T>(), param.numel(), *group.lr, *group.weight_decay,
                    group.option("beta1"), group.option("beta2"), group.option("eps"), state.step);
  });
  state.buffers[0].bump_version();
  state.buffers[1].bump_version();
}

void AdamW::update_group(const ParamGroup& group, const std::vector<UpdateItem>& items) {
  const auto split = detail::split_items(items);
  for (const UpdateItem* it : split.rest) update(group, it->param, it->grad, *it->state);
  for (const auto& bucket : split.buckets) {
    detail::MomentBucket b = detail::gather_moment_bucket(bucket);
    cuda::multi_tensor_adamw(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.steps, *group.lr, *group.weight_decay,
                             group.option("beta1"), group.option("beta2"), group.option("eps"));
    b.bump_buffer_versions();
  }
}

}  // namespace kiln::optim
