#include "optim/sgd.h"

#include <Eigen/Core>

#include "ops/ops.h"
#include "optim/update_loop.h"

namespace kiln::optim {
namespace {

std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  return {{"momentum", o.momentum}, {"dampening", o.dampening}, {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

// One fused pass over blocks (the branches are per block, the arithmetic
// vectorised); the statement order follows torch.optim.SGD, in T arithmetic
// with the scalars rounded to T first.
template <typename T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, double lr, double weight_decay, double momentum,
                double dampening, bool nesterov, bool first) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  using Block = Eigen::Array<T, Eigen::Dynamic, 1, Eigen::ColMajor, detail::kBlock, 1>;
  const T wd = static_cast<T>(weight_decay), mom = static_cast<T>(momentum);
  const T keep = static_cast<T>(1.0 - dampening), neg_lr = static_cast<T>(-lr);
  detail::for_each_block(n, [&](int64_t b, int64_t e) {
    Eigen::Map<Array> P(p + b, e - b);
    const Eigen::Map<const Array> G(g + b, e - b);
    Block d = G;
    if (weight_decay != 0.0) d = d + wd * P;
    if (momentum != 0.0) {
      Eigen::Map<Array> B(buf + b, e - b);
      if (first) B = d;
      else B = B * mom + keep * d;
      if (nesterov) d = d + mom * B;
      else d = B;
    }
    P = P + neg_lr * d;
  });
}

// The generic path (Note [Fused and generic updates]): sgd_update's
// statements as tensor ops, scalars rounded to the parameter's dtype by the
// ops as the fused loop rounds them. buf is undefined when momentum == 0.
void sgd_update_generic(Tensor p, const Tensor& g, Tensor buf, double lr, double weight_decay, double momentum,
                        double dampening, bool nesterov, bool first) {
  Tensor d = g;
  if (weight_decay != 0.0) d = add(d, mul(p, weight_decay));  // d + wd * p
  if (momentum != 0.0) {
    if (first) {
      buf.copy_(d);
    } else {
      buf.mul_(momentum);            // b * mom
      buf.add_(d, 1.0 - dampening);  // + (1 - dampening) * d
    }
    d = nesterov ? add(d, mul(buf, momentum)) : buf;
  }
  p.add_(d, -lr);  // p + (-lr) * d
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}, {}, {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer("SGD", std::move(groups), options.lr, options.weight_decay, sgd_defaults(options)) {
  validate_all_groups();
}

std::vector<std::string> SGD::buffer_names(const ParamGroup& group) const {
  if (group.option("momentum") == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::validate(const ParamGroup& group) const {
  const double momentum = group.option("momentum"), dampening = group.option("dampening");
  const double nesterov = group.option("nesterov");
  KILN_CHECK(momentum >= 0, "SGD: invalid momentum ", momentum, " (must be >= 0)");
  KILN_CHECK(dampening >= 0, "SGD: invalid dampening ", dampening, " (must be >= 0)");
  KILN_CHECK(nesterov == 0.0 || nesterov == 1.0, "SGD: nesterov must be 0 or 1, got ", nesterov);
  KILN_CHECK(nesterov == 0.0 || (momentum > 0 && dampening == 0), "SGD: Nesterov momentum requires momentum > 0 ",
             "and zero dampening, got momentum ", momentum, " and dampening ", dampening);
}

void SGD::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  const double momentum = group.option("momentum");
  const bool first = state.buffers.empty();
  if (momentum != 0.0 && first) state.buffers.push_back(empty_tensor(param.sizes(), param.dtype(), param.device()));
  if (!detail::use_fused_update(param)) {
    sgd_update_generic(param, grad, momentum != 0.0 ? state.buffers[0] : Tensor(), *group.lr, *group.weight_decay,
                       momentum, group.option("dampening"), group.option("nesterov") != 0.0, first);
    return;
  }
  detail::dispatch_float(param.dtype(), "SGD", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* buf = momentum != 0.0 ? state.buffers[0].data_ptr<T>() : nullptr;
    sgd_update<T>(param.data_ptr<T>(), grad.data_ptr<T>(), buf, param.numel(), *group.lr, *group.weight_decay,
                  momentum, group.option("dampening"), group.option("nesterov") != 0.0, first);
  });
  if (momentum != 0.0) state.buffers[0].bump_version();
}

}  // namespace kiln::optim
