// Results are bit-identical whatever kiln::set_num_threads() says (Note
// [Deterministic chunking], Note [Random numbers]): every computation below runs
// with 1, 2 and 3 threads and must produce the same bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>

#include "core/cpu/gemm_library.h"
#include "core/parallel.h"
#include "tests/grad_compare.h"
#include "tests/test_util.h"

namespace kiln {
namespace {
using testing::rnd;
using testing::bitwise_equal;

// Runs f under each thread count and checks every output against the 1-thread run.
void expect_thread_invariant(const std::function<TensorList()>& f) {
  testing::ThreadCountGuard restore;
  set_num_threads(1);
  const TensorList want = f();
  ASSERT_FALSE(want.empty());
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    ASSERT_EQ(get_num_threads(), threads);
    const TensorList got = f();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(want[i].defined() && got[i].defined()) << "output " << i;
      EXPECT_TRUE(bitwise_equal(got[i], want[i])) << threads << " threads, output " << i;
    }
  }
}

TEST(Determinism, RestoresThreadCount) {
  const int before = get_num_threads();
  { testing::ThreadCountGuard g; set_num_threads(before + 2); }
  EXPECT_EQ(get_num_threads(), before);
}

TEST(Determinism, LargeSums) {
  const Tensor x = rnd({257, 1031}, 1);
  const Tensor y = rnd({64, 100, 33}, 2);
  const Tensor h = rnd({300, 700}, 3).to(DType::Float16);
  expect_thread_invariant([&] {
    return TensorList{sum(x),
                      sum(x, {0}),
                      sum(x, {1}),
                      sum(x.t(), {0}),
                      mean(x, {0, 1}, true),
                      sum(y, {0, 2}),
                      sum(y, {1}),
                      sum(y.permute({2, 0, 1}), {-1}),
                      var(y, {0}),
                      amax(y, {1}),
                      argmax(y, 2),
                      sum(h, {0}),
                      sum(h)};
  });
}

TEST(Determinism, Matmul512) {
  const Tensor a = rnd({512, 512}, 4), b = rnd({512, 512}, 5);
  expect_thread_invariant([&] { return TensorList{matmul(a, b), matmul(a.t(), b), matmul(a.view({2, 256, 512}), b)}; });
}

// Each GEMM library alone (Note [GEMM library per shape]), on one block, rows
// split, columns split and K split (Note [GEMM threading]).
TEST(Determinism, MatmulInEachGemmLibrary) {
  const Tensor a = rnd({700, 64}, 6), b = rnd({64, 600}, 7), c = rnd({40, 64}, 8), d = rnd({64, 1100}, 9);
  const Tensor e = rnd({64, 4096}, 10), f = rnd({4096, 64}, 11);
  for (cpu::GemmPolicy p : {cpu::GemmPolicy::OpenBLAS, cpu::GemmPolicy::OneDNN}) {
    const cpu::GemmPolicy saved = cpu::set_gemm_policy(p);
    expect_thread_invariant([&] { return TensorList{matmul(a, b), matmul(c, d), matmul(e, f), matmul(c, c.t())}; });
    cpu::set_gemm_policy(saved);
  }
}

TEST(Determinism, SoftmaxAndLogSoftmax) {
  const Tensor x = rnd({512, 1000}, 6);
  expect_thread_invariant([&] { return TensorList{softmax(x, -1), softmax(x, 0), log_softmax(x, -1)}; });
}

TEST(Determinism, LayerNormForwardAndBackward) {
  const Tensor x0 = rnd({1024, 768}, 7), w0 = rnd({768}, 8), b0 = rnd({768}, 9), g = rnd({1024, 768}, 10);
  expect_thread_invariant([&] {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    Tensor y = layer_norm(x, {768}, w, b);
    sum(y * g).backward();
    return TensorList{y.detach(), x.grad(), w.grad(), b.grad()};
  });
}

TEST(Determinism, EmbeddingBackwardWithRepeatedIds) {
  Generator gen(11);
  const Tensor ids = randint(0, 100, {50, 100}, {}, &gen);  // 5000 ids over 100 rows
  const Tensor w0 = rnd({100, 200}, 12), g = rnd({50, 100, 200}, 13);
  expect_thread_invariant([&] {
    Tensor w = w0.clone();
    w.set_requires_grad(true);
    Tensor e = embedding(w, ids, 3);
    sum(e * g).backward();
    Tensor w2 = w0.clone();
    w2.set_requires_grad(true);
    sum(index_select(w2, 0, ids.reshape({-1})) * g.view({5000, 200})).backward();
    return TensorList{e.detach(), w.grad(), w2.grad()};
  });
}

TEST(Determinism, RandomNumbersWithTheSameSeed) {
  expect_thread_invariant([] {
    manual_seed(2024);
    Tensor a = randn({300001});
    Tensor b = bernoulli({300001}, 0.3);
    Tensor c = rand({1000, 333});
    Generator g(77);
    Tensor d = randn({123457}, DType::Float64, &g);
    Tensor e = randint(-5, 5, {100003}, {}, &g);
    Tensor f = dropout(ones({200000}), 0.1, true, &g);
    return TensorList{a, b, c, d, e, f};
  });
}

TEST(Determinism, SmallMlpForwardAndBackward) {
  const Tensor x = rnd({256, 64}, 14), w1 = rnd({128, 64}, 15) * 0.1, b1 = rnd({128}, 16) * 0.1;
  const Tensor w2 = rnd({10, 128}, 17) * 0.1, b2 = rnd({10}, 18) * 0.1;
  Generator gen(19);
  const Tensor target = randint(0, 10, {256}, {}, &gen);
  const Tensor gamma0 = ones({128}), beta0 = zeros({128});
  expect_thread_invariant([&] {
    TensorList params;
    for (const Tensor& p : {w1, b1, w2, b2, gamma0, beta0}) {
      Tensor q = p.clone();
      q.set_requires_grad(true);
      params.push_back(q);
    }
    Tensor h = gelu(linear(x, params[0], params[1]));
    h = layer_norm(h, {128}, params[4], params[5]);
    Generator drop(20);
    h = dropout(h, 0.1, true, &drop);
    Tensor logits = linear(h, params[2], params[3]);
    Tensor loss = cross_entropy(logits, target, -100, 0.1);
    loss.backward();
    TensorList out{loss.detach(), logits.detach()};
    for (const Tensor& p : params) out.push_back(p.grad());
    return out;
  });
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Note [Pool jobs]: back-to-back tiny jobs, where a worker often wakes after
// its job has ended and the next has begun. Every chunk must run exactly once
// per job and every job must end (a shared chunk counter once let a late
// worker run a chunk twice and leave the caller waiting forever).
TEST(ThreadPool, BackToBackTinyJobsRunEachChunkOnce) {
  testing::ThreadCountGuard guard;
  set_num_threads(2);
  std::atomic<int64_t> runs{0};
  int64_t expected = 0;
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 2 + job % 3;  // 2-4 chunks of one item
    parallel_for(n, 1, [&](int64_t b, int64_t e) { runs.fetch_add(e - b); });
    expected += n;
    ASSERT_EQ(runs.load(), expected) << "job " << job;
  }
}

}  // namespace
}  // namespace kiln
