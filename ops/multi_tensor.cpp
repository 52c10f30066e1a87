// Multi-tensor ops (ops/multi_tensor.h, Note [Multi-tensor ops]): the argument
// checks, the OpScope, one backend call per list, and the registry samples.
#include "ops/multi_tensor.h"

#include <cmath>
#include <limits>
#include <string>

#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// The lists of an Adam-style step, by name, for the checks and the scope.
struct MomentLists {
  const std::vector<Tensor>* lists[4];
  static constexpr const char* kNames[4] = {"params", "grads", "exp_avgs", "exp_avg_sqs"};
};

// multi_tensor_adamw_ / multi_tensor_lamb_: equal lengths; every tensor
// defined, contiguous, of params[0]'s device and dtype (float32 or float64)
// and of its parameter's shape; update counts >= 1; the written tensors fit
// an in-place op (Note [In-place ops and autograd], ops/copy_ops.cpp).
void check_moment_lists(const char* op, const MomentLists& m, const std::vector<int64_t>& steps) {
  const std::vector<Tensor>& params = *m.lists[0];
  const size_t n = params.size();
  bool equal = steps.size() == n;
  for (const auto* l : m.lists) equal = equal && l->size() == n;
  KILN_CHECK(equal, op, ": the lists differ in length (params ", n, ", grads ", m.lists[1]->size(), ", exp_avgs ",
             m.lists[2]->size(), ", exp_avg_sqs ", m.lists[3]->size(), ", steps ", steps.size(), ")");
  if (n == 0) return;
  const Tensor& first = params.front();
  KILN_CHECK(first.defined(), op, ": params[0] is an undefined tensor");
  KILN_CHECK(first.dtype() == DType::Float32 || first.dtype() == DType::Float64, op,
             ": parameters must be float32 or float64, got params[0] ", first.str());
  for (int l = 0; l < 4; ++l) {
    const char* name = MomentLists::kNames[l];
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = (*m.lists[l])[i];
      KILN_CHECK(t.defined(), op, ": ", name, "[", i, "] is an undefined tensor");
      KILN_CHECK(t.device() == first.device(), op, ": expected tensors on the same device, got ", name, "[", i,
                 "] on ", t.device().str(), " and params[0] on ", first.device().str());
      KILN_CHECK(t.dtype() == first.dtype(), op, ": every tensor must be ", dtype_name(first.dtype()),
                 " like params[0], got ", name, "[", i, "] ", t.str());
      KILN_CHECK(t.is_contiguous(), op, ": every tensor must be contiguous, got ", name, "[", i, "] ", t.str());
      KILN_CHECK(t.sizes() == params[i].sizes(), op, ": ", name, "[", i, "] is ", t.str(), ", but params[", i,
                 "] is ", params[i].str());
    }
  }
  for (size_t i = 0; i < n; ++i) {
    KILN_CHECK(steps[i] >= 1, op, ": steps[", i, "] is ", steps[i], "; update counts start at 1");
    for (int l : {0, 2, 3}) check_inplace((*m.lists[l])[i], {(*m.lists[1])[i]}, op);
  }
}

// After a step: every written tensor's version is bumped.
void bump_written(const MomentLists& m) {
  for (int l : {0, 2, 3})
    for (const Tensor& t : *m.lists[l]) t.bump_version();
}

// multi_tensor_norm / multi_tensor_all_finite: every tensor defined and on
// the first one's device; returns that device (CPU for an empty list).
Device check_one_device(const std::vector<Tensor>& tensors, const char* op) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].defined(), op, ": tensor ", i, " is an undefined tensor");
    KILN_CHECK(tensors[i].device() == tensors.front().device(), op, ": expected tensors on the same device, got ",
               "tensor ", i, " on ", tensors[i].device().str(), " and tensor 0 on ", tensors.front().device().str());
  }
  return tensors.empty() ? kCPU : tensors.front().device();
}

}  // namespace

void multi_tensor_adamw_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                         const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1,
                         double beta2, double eps) {
  OpScope scope("multi_tensor_adamw_", params, grads, exp_avgs, exp_avg_sqs);
  scope.attr("steps", steps).attr("lr", lr).attr("weight_decay", weight_decay);
  scope.attr("beta1", beta1).attr("beta2", beta2).attr("eps", eps);
  const MomentLists m{{&params, &grads, &exp_avgs, &exp_avg_sqs}};
  check_moment_lists("multi_tensor_adamw_", m, steps);
  if (params.empty()) return;
  backend(params.front().device())
      .multi_tensor_adamw(params, grads, exp_avgs, exp_avg_sqs, steps, lr, weight_decay, beta1, beta2, eps);
  bump_written(m);
  scope.out(params);
  scope.out(exp_avgs);
  scope.out(exp_avg_sqs);
}

void multi_tensor_lamb_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                        double eps, bool bias_correction) {
  OpScope scope("multi_tensor_lamb_", params, grads, exp_avgs, exp_avg_sqs);
  scope.attr("steps", steps).attr("lr", lr).attr("weight_decay", weight_decay);
  scope.attr("beta1", beta1).attr("beta2", beta2).attr("eps", eps).attr("bias_correction", bias_correction);
  const MomentLists m{{&params, &grads, &exp_avgs, &exp_avg_sqs}};
  check_moment_lists("multi_tensor_lamb_", m, steps);
  if (params.empty()) return;
  backend(params.front().device())
      .multi_tensor_lamb(params, grads, exp_avgs, exp_avg_sqs, steps, lr, weight_decay, beta1, beta2, eps,
                         bias_correction);
  bump_written(m);
  scope.out(params);
  scope.out(exp_avgs);
  scope.out(exp_avg_sqs);
}

Tensor multi_tensor_norm(const std::vector<Tensor>& tensors, double norm_type) {
  OpScope scope("multi_tensor_norm", tensors);
  scope.attr("norm_type", norm_type);
  KILN_CHECK(norm_type > 0, "multi_tensor_norm: norm_type must be > 0 (or infinity), got ", norm_type);
  const Device device = check_one_device(tensors, "multi_tensor_norm");
  std::vector<Tensor> flat;  // contiguous, as the backend takes them
  flat.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64,
               "multi_tensor_norm: tensors must be float32 or float64, got tensor ", i, " ", t.str());
    flat.push_back(raw_contiguous(t));
  }
  Tensor out = empty_tensor({}, DType::Float64, device);
  backend(device).multi_tensor_norm(out, flat, norm_type);
  return scope.out(out);
}

Tensor multi_tensor_all_finite(const std::vector<Tensor>& tensors) {
  OpScope scope("multi_tensor_all_finite", tensors);
  const Device device = check_one_device(tensors, "multi_tensor_all_finite");
  std::vector<Tensor> floating;  // the backend's contract: floating, non-empty, contiguous
  for (const Tensor& t : tensors)
    if (is_floating(t.dtype()) && t.numel() > 0) floating.push_back(raw_contiguous(t));
  Tensor out = empty_tensor({}, DType::Bool, device);
  backend(device).multi_tensor_all_finite(out, floating);
  return scope.out(out);
}

// ---- registry samples -------------------------------------------------------------
// Not differentiable. The in-place steps work on detached copies of the
// sample inputs (gradcheck hands in leaves that require grad) and return
// everything they wrote, flattened into one tensor.
namespace {
using L = std::vector<Tensor>;
using S = std::vector<OpSample>;

// inputs: two parameters, their gradients and moment buffers (v >= 0).
L moment_sample_inputs(uint64_t seed) {
  return {sample_tensor({3, 4}, seed),       sample_tensor({5}, seed + 1),
          sample_tensor({3, 4}, seed + 2),   sample_tensor({5}, seed + 3),
          sample_tensor({3, 4}, seed + 4),   sample_tensor({5}, seed + 5),
          sample_tensor({3, 4}, seed + 6, 0.0, 1.0), sample_tensor({5}, seed + 7, 0.0, 1.0)};
}

template <typename Step>
Tensor run_moment_step(const L& x, const Step& step) {
  auto copies = [&](size_t at) { return L{x[at].detach().clone(), x[at + 1].detach().clone()}; };
  const L p = copies(0), g = copies(2), m = copies(4), v = copies(6);
  step(p, g, m, v);
  L all;
  for (const L* l : {&p, &m, &v})
    for (const Tensor& t : *l) all.push_back(reshape(t, {-1}));
  return cat(all);
}

}  // namespace

KILN_REGISTER_OP("multi_tensor_adamw_", false, [] {
  return S{{"two parameters, steps 1 and 3",
            moment_sample_inputs(700),
            [](const L& x) {
              return run_moment_step(x, [](const L& p, const L& g, const L& m, const L& v) {
                multi_tensor_adamw_(p, g, m, v, {1, 3}, 1e-2, 0.1, 0.9, 0.999, 1e-8);
              });
            }}};
});
KILN_REGISTER_OP("multi_tensor_lamb_", false, [] {
  return S{{"two parameters, steps 1 and 3, bias correction",
            moment_sample_inputs(720),
            [](const L& x) {
              return run_moment_step(x, [](const L& p, const L& g, const L& m, const L& v) {
                multi_tensor_lamb_(p, g, m, v, {1, 3}, 1e-2, 0.01, 0.9, 0.999, 1e-6, true);
              });
            }}};
});
KILN_REGISTER_OP("multi_tensor_norm", false, [] {
  S s;
  for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()})
    s.push_back({"order " + std::to_string(p), {sample_tensor({3, 4}, 740), sample_tensor({7}, 741)},
                 [p](const L& x) { return multi_tensor_norm(x, p); }});
  return s;
});
KILN_REGISTER_OP("multi_tensor_all_finite", false, [] {
  return S{{"finite", {sample_tensor({3, 4}, 750), sample_tensor({7}, 751)},
            [](const L& x) { return multi_tensor_all_finite(x); }}};
});

}  // namespace kiln
