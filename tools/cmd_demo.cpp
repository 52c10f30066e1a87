// `kiln demo`: a short demonstration of the core: a two-layer MLP learns a
// noisy two-spiral classification with autograd and plain SGD with momentum,
// printing loss and accuracy as it goes.
#include <cmath>
#include <cstdio>

#include "kiln.h"
#include "tools/command.h"

namespace kiln::tools {
namespace {

struct DemoOptions {
  int steps = 500;
  int hidden = 64;
  uint64_t seed = 0;
};

int run_demo(const DemoOptions& o) {
  manual_seed(o.seed);
  const int64_t n = 512;
  // two interleaved spirals: class k at angle 2.5 r + k*pi, radius r, plus noise
  const std::vector<double> r = (rand({n}) * 3.0 + 0.25).to_vector<double>();
  const std::vector<int64_t> cls = randint(0, 2, {n}).to_vector<int64_t>();
  const std::vector<double> noise = randn({n, 2}).to_vector<double>();
  std::vector<double> xy;
  for (int64_t i = 0; i < n; ++i) {
    const double a = 2.5 * r[i] + M_PI * static_cast<double>(cls[i]);
    xy.push_back(r[i] * std::cos(a) + 0.05 * noise[2 * i]);
    xy.push_back(r[i] * std::sin(a) + 0.05 * noise[2 * i + 1]);
  }
  Tensor x = tensor(xy, {n, 2});
  Tensor label = tensor_from(cls);
  Tensor w1 = (randn({o.hidden, 2}) * 0.5).requires_grad_();
  Tensor b1 = zeros({o.hidden}).requires_grad_();
  Tensor w2 = (randn({2, o.hidden}) * (1.0 / std::sqrt(o.hidden))).requires_grad_();
  Tensor b2 = zeros({2}).requires_grad_();
  std::vector<Tensor> params{w1, b1, w2, b2}, velocity;
  for (const Tensor& p : params) velocity.push_back(zeros_like(p));
  std::printf("kiln demo: 2-layer MLP (hidden %d) on two spirals, %lld points\n", o.hidden,
              static_cast<long long>(n));
  double acc = 0;
  for (int step = 1; step <= o.steps; ++step) {
    Tensor logits = linear(gelu(linear(x, w1, b1)), w2, b2);
    Tensor loss = cross_entropy(logits, label);
    for (Tensor& p : params) p.zero_grad();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        velocity[i].mul_(0.9);
        velocity[i].add_(params[i].grad());
        params[i].add_(velocity[i], -0.05);
      }
    }
    if (step % 50 == 0 || step == 1) {
      acc = mean(to_dtype(eq(argmax(logits.detach(), 1), label), DType::Float32)).item<float>();
      std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, loss.item<float>(), acc);
    }
  }
  return acc > 0.9 ? 0 : 1;
}

const Registrar reg("demo", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "A short demonstration of the core: an MLP learns two spirals");
  auto opts = std::make_shared<DemoOptions>();
  cmd->add_option("--steps", opts->steps, "training steps")->check(CLI::PositiveNumber);
  cmd->add_option("--hidden", opts->hidden, "hidden units")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", opts->seed, "random seed");
  return [opts] { return run_demo(*opts); };
});

}  // namespace
}  // namespace kiln::tools
