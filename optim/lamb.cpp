#include "optim/lamb.h"

#include <Eigen/Core>
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

template <typename T>
using Block = Eigen::Array<T, Eigen::Dynamic, 1, Eigen::ColMajor, detail::kBlock, 1>;

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
  const NormsSq sq = detail::sum_blocks<NormsSq>(n, [&](int64_t b, int64_t e) {
    Eigen::Map<Array> M(m + b, e - b), V(v + b, e - b);
    const Eigen::Map<const Array> G(g + b, e - b);
    M = M * s.b1 + G * s.c1;
    V = V * s.b2 + (G * s.c2) * G;
    Block<T> u;
    lamb_direction(p + b, m + b, v + b, e - b, s, u);
    return NormsSq{detail::sum_squares(p + b, e - b), detail::sum_squares(u.data(), e - b)};
  });
  const double p_norm = std::sqrt(sq.p), u_norm = std::sqrt(sq.u);
  const double ratio = p_norm > 0 && u_norm > 0 ? p_norm / u_norm : 1.0;
  const T scale = static_cast<T>(-(lr * ratio));
  // Pass 2: apply.
  detail::for_each_block(n, [&](int64_t b, int64_t e) {
    Block<T> u;
    lamb_direction(p + b, m + b, v + b, e - b, s, u);
    Eigen::Map<Array> P(p + b, e - b);
    P = P + scale * u;
  });
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
    state.buffers.push_back(zeros(param.sizes(), param.dtype()));
    state.buffers.push_back(zeros(param.sizes(), param.dtype()));
  }
  const double beta1 = group.option("beta1"), beta2 = group.option("beta2");
  const double t = static_cast<double>(state.step);
  const bool bias_correction = group.option("bias_correction") != 0.0;
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, t) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, t) : 1.0;
  detail::dispatch_float(param.dtype(), "LAMB", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const LambScalars<T> s{static_cast<T>(beta1),     static_cast<T>(1.0 - beta1),
                           static_cast<T>(beta2),     static_cast<T>(1.0 - beta2),
                           static_cast<T>(bc1),       static_cast<T>(bc2),
                           static_cast<T>(group.option("eps")), static_cast<T>(*group.weight_decay)};
    lamb_update<T>(param.data_ptr<T>(), grad.data_ptr<T>(), state.buffers[0].data_ptr<T>(),
                   state.buffers[1].data_ptr<T>(), param.numel(), *group.lr, s);
  });
  state.buffers[0].bump_version();
  state.buffers[1].bump_version();
}

}  // namespace kiln::optim
