// `kiln bench dispatch`: what one op costs beyond its arithmetic (issue 26's
// "op dispatch overhead, µs per op"): tiny float32 tensors ([8], a [1, 8] x
// [8, 8] matmul, layer_norm over 8), so the time is argument checks, shape
// work, allocation, dispatch and, with grad, the autograd node; each op run
// `--ops` times in a loop, the median of `--reps` loops. Beside it:
// bench/dispatch_torch.py, the same ops in PyTorch (docs/performance.md).
#include <cstdio>

#include "kiln.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct DispatchOptions {
  int64_t ops = 20000;
  int reps = 7;
};

int run_dispatch(const DispatchOptions& o) {
  set_num_threads(1);
  std::printf("bench dispatch: float32, 1 thread, %lld ops per loop, median of %d loops (microseconds per op)\n",
              static_cast<long long>(o.ops), o.reps);
  std::printf("%-32s %10s %12s\n", "op", "no grad", "with grad");
  auto per_op = [&](auto&& op, bool grad) {
    Tensor x = randn({8}), w = randn({8, 8}), row = randn({1, 8}), g = ones({8}), b = zeros({8});
    for (Tensor* t : {&x, &w, &row, &g, &b}) t->set_requires_grad(grad);
    std::optional<NoGradGuard> no_grad;
    if (!grad) no_grad.emplace();
    const double s = median_seconds([&] {
      for (int64_t i = 0; i < o.ops; ++i) op(x, w, row, g, b);
    }, o.reps);
    return s / static_cast<double>(o.ops) * 1e6;
  };
  auto line = [&](const char* name, auto&& op) {
    std::printf("%-32s %10.2f %12.2f\n", name, per_op(op, false), per_op(op, true));
  };
  using T = const Tensor&;
  line("add(x, x) [8]", [](T x, T, T, T, T) { return add(x, x); });
  line("mul(x, 2.0) [8]", [](T x, T, T, T, T) { return mul(x, 2.0); });
  line("gelu(x) [8]", [](T x, T, T, T, T) { return gelu(x); });
  line("x.view({2, 4})", [](T x, T, T, T, T) { return x.view({2, 4}); });
  line("matmul [1,8] x [8,8]", [](T, T w, T row, T, T) { return matmul(row, w); });
  line("layer_norm(x, {8}, g, b)", [](T x, T, T, T g, T b) { return layer_norm(x, {8}, g, b); });
  line("softmax(x, 0) [8]", [](T x, T, T, T, T) { return softmax(x, 0); });
  // Forward and backward of a small chain: what a training step pays per op.
  Tensor x = randn({8}).set_requires_grad(true);
  const double chain = median_seconds([&] {
    for (int64_t i = 0; i < o.ops / 10; ++i) sum(gelu(mul(add(x, x), 2.0))).backward();
  }, o.reps);
  std::printf("%-32s %10s %12.2f\n", "add, mul, gelu, sum + backward", "-",
              chain / static_cast<double>(o.ops / 10) * 1e6);
  return 0;
}

const BenchRegistrar dispatch_reg("dispatch", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand("dispatch", "Per-op overhead on tiny tensors (microseconds per op)");
  auto o = std::make_shared<DispatchOptions>();
  cmd->add_option("--ops", o->ops, "ops per timed loop")->check(CLI::Range(int64_t{10}, int64_t{100000000}));
  cmd->add_option("--reps", o->reps, "timed loops (the median is printed)")->check(CLI::Range(1, 1000));
  return [o] { return run_dispatch(*o); };
});

}  // namespace
}  // namespace kiln::tools
