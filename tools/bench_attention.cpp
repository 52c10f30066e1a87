// `kiln bench attention`: the fused CPU multi-head attention (ops/fused.h),
// causal against non-causal at the same shape: the forward alone and forward
// + backward, timed in alternating runs (dense, causal, dense, ...) so that
// machine noise hits both alike, medians of each, and their ratio (Note
// [Causal attention blocks], core/cpu/attention.cpp: the causal kernels skip
// the blocks above the diagonal).
// Prints per length: bench attention B=.. T=.. C=.. heads=.. p=.. <pass> dense_ms=.. causal_ms=.. ratio=..
#include <cstdio>

#include "kiln.h"
#include "ops/fused.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct AttentionOptions {
  int64_t batch = 2, hidden = 256, heads = 4;
  std::vector<int64_t> seqs{128, 512};
  double dropout = 0.0;
  int reps = 15;
  int threads = 0;
};

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_attention(const AttentionOptions& o) {
  if (o.threads > 0) set_num_threads(o.threads);
  std::printf("bench attention: fused CPU attention, float32, %d threads, medians of %d alternating runs\n",
              get_num_threads(), o.reps);
  for (const int64_t T : o.seqs) {
    manual_seed(0);
    Tensor q = randn({o.batch, T, o.hidden}).requires_grad_(), k = randn({o.batch, T, o.hidden}).requires_grad_();
    Tensor v = randn({o.batch, T, o.hidden}).requires_grad_();
    const Tensor w = randn({o.batch, T, o.hidden});
    Generator gen(1);
    const bool training = o.dropout > 0.0;
    auto forward = [&](bool causal) {
      NoGradGuard no_grad;
      multi_head_attention(q, k, v, o.heads, Tensor(), o.dropout, training, &gen, causal);
    };
    auto step = [&](bool causal) {
      for (Tensor* x : {&q, &k, &v}) x->mutable_grad() = Tensor();
      multi_head_attention(q, k, v, o.heads, Tensor(), o.dropout, training, &gen, causal).backward(w);
    };
    for (const bool with_backward : {false, true}) {
      std::vector<double> dense, causal;
      for (int warm = 0; warm < 2; ++warm) with_backward ? (step(false), step(true)) : (forward(false), forward(true));
      for (int r = 0; r < o.reps; ++r) {
        const bool causal_first = r % 2 == 1;  // alternate which one runs first, too
        for (const bool c : {causal_first, !causal_first}) {
          const double t = seconds_of([&] { with_backward ? step(c) : forward(c); });
          (c ? causal : dense).push_back(t);
        }
      }
      const double d = median(dense), c = median(causal);
      std::printf("bench attention B=%lld T=%lld C=%lld heads=%lld p=%g %s dense_ms=%.2f causal_ms=%.2f ratio=%.3f\n",
                  static_cast<long long>(o.batch), static_cast<long long>(T), static_cast<long long>(o.hidden),
                  static_cast<long long>(o.heads), o.dropout, with_backward ? "fwd+bwd" : "fwd", d * 1e3, c * 1e3,
                  c / d);
    }
  }
  return 0;
}

const BenchRegistrar reg("attention", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand("attention", "Fused CPU attention: causal against non-causal");
  auto o = std::make_shared<AttentionOptions>();
  cmd->add_option("--batch", o->batch, "batch size")->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o->seqs, "sequence lengths T = S (repeatable)")->check(CLI::PositiveNumber);
  cmd->add_option("--hidden", o->hidden, "hidden size C")->check(CLI::PositiveNumber);
  cmd->add_option("--heads", o->heads, "attention heads (divide C)")->check(CLI::PositiveNumber);
  cmd->add_option("--dropout", o->dropout, "attention dropout p (training when > 0)")->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--reps", o->reps, "timed runs of each (median)")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  return [o] { return run_attention(*o); };
});

}  // namespace
}  // namespace kiln::tools
