// Regression and multi-label losses: mse_loss, composed from primitives (its
// gradient comes from theirs), and binary_cross_entropy_with_logits, whose
// forward is composed and whose gradient is its own formula. cross_entropy, which has a fused kernel,
// lives in ops/nn_ops.cpp. tests/test_nn_ops.cpp (Losses.*) checks them
// against their formulas; tests/test_gradcheck.cpp checks their gradients.
#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

void check_loss_inputs(const Tensor& input, const Tensor& target, const char* op) {
  check_defined(input, op, "input");
  check_defined(target, op, "target");
  KILN_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op,
             ": input and target must be floating-point, got ", dtype_name(input.dtype()), " and ",
             dtype_name(target.dtype()));
  KILN_CHECK(input.sizes() == target.sizes(), op, ": target of shape ", shape_str(target.sizes()),
             " does not match input ", shape_str(input.sizes()));
  check_same_device(input, target, op);
}

Tensor reduce_loss(const Tensor& loss, const std::string& reduction, const char* op) {
  KILN_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", op,
             ": reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  if (reduction == "none") return loss;
  return reduction == "sum" ? sum(loss) : mean(loss);  // mean of no element: NaN, as PyTorch
}

}  // namespace

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, const std::string& reduction) {
  OpScope scope("mse_loss", input_in, target_in);
  scope.attr("reduction", reduction);
  Tensor input = input_in, target = target_in;
  autocast::cast_inputs("mse_loss", input, target);  // Note [Autocast policy]
  check_loss_inputs(input, target, "mse_loss");
  const Tensor d = sub(input, target);
  return scope.out(reduce_loss(mul(d, d), reduction, "mse_loss"));
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in,
                                        const std::string& reduction) {
  OpScope scope("binary_cross_entropy_with_logits", logits_in, target_in);
  scope.attr("reduction", reduction);
  Tensor logits = logits_in, target = target_in;
  autocast::cast_inputs("binary_cross_entropy_with_logits", logits, target);  // Note [Autocast policy]
  check_loss_inputs(logits, target, "binary_cross_entropy_with_logits");
  // -[y log s(x) + (1 - y) log(1 - s(x))] = max(x, 0) - x y + log(1 + exp(-|x|)),
  // which never takes exp of a positive number (PyTorch's formulation). Its
  // gradient is recorded as one formula, (s(x) - y, -x): composed from relu
  // and abs it would be wrong at x = 0, where both kinks meet.
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = add(sub(relu(logits), mul(logits, target)), log(add(exp(neg(abs(logits))), 1.0)));
  }
  if (should_record({logits, target})) {
    SavedTensor sx(logits, "binary_cross_entropy_with_logits"), sy(target, "binary_cross_entropy_with_logits");
    record("binary_cross_entropy_with_logits", {logits, target}, {loss}, [=](const TensorList& g) {
      const Tensor x = sx.get(), y = sy.get();
      return TensorList{mul(g[0], sub(sigmoid(x), y)), mul(g[0], neg(x))};
    });
  }
  return scope.out(reduce_loss(loss, reduction, "binary_cross_entropy_with_logits"));
}

using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("mse_loss", true, [] {
  return S{{"mean", {sample_tensor({3, 4}, 110), sample_tensor({3, 4}, 111)},
            [](const L& x) { return mse_loss(x[0], x[1]); }},
           {"none, 1-D", {sample_tensor({5}, 112), sample_tensor({5}, 113)},
            [](const L& x) { return mse_loss(x[0], x[1], "none"); }}};
});
KILN_REGISTER_OP("binary_cross_entropy_with_logits", true, [] {
  // Soft targets in [0, 1] so the gradient with respect to the target is exercised too.
  return S{{"mean, soft targets", {sample_tensor({3, 4}, 114, -4, 4), sample_tensor({3, 4}, 115, 0, 1)},
            [](const L& x) { return binary_cross_entropy_with_logits(x[0], x[1]); }},
           {"sum", {sample_tensor({6}, 116, -3, 3), sample_tensor({6}, 117, 0, 1)},
            [](const L& x) { return binary_cross_entropy_with_logits(x[0], x[1], "sum"); }},
           {"logits at 0 (where relu and abs have kinks)",
            {tensor({0.0, 0.0, 0.5, -0.5}, {4}, TensorOptions(DType::Float64)), sample_tensor({4}, 118, 0, 1)},
            [](const L& x) { return binary_cross_entropy_with_logits(x[0], x[1], "none"); }}};
});

}  // namespace kiln
