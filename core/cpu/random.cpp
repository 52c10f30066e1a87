// CPU random fills from Philox (Note [Random numbers]): element i of a call
// uses the block at counter (i, offset), so values never depend on threads.
#include <cmath>

#include "core/cpu/cpu_kernels.h"
#include "core/parallel.h"
#include "core/random.h"

namespace kiln::cpu {
namespace {

template <typename F>
void fill_random(const Tensor& out, const char* op, F value_of) {
  dispatch_all(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    parallel_for(out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double v = value_of(static_cast<uint64_t>(i));
        if constexpr (std::is_same_v<T, bool>) o[i] = v != 0.0;
        else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) o[i] = T(static_cast<float>(v));
        else o[i] = static_cast<T>(v);
      }
    });
  });
}

}  // namespace

void uniform(const Tensor& out, double lo, double hi, PhiloxState st) {
  fill_random(out, "uniform", [&](uint64_t i) {
    const auto w = philox_words(st, i);
    return lo + (hi - lo) * philox_uniform(w[0], w[1]);
  });
}

void normal(const Tensor& out, double mean, double std, PhiloxState st) {
  fill_random(out, "normal", [&](uint64_t i) {
    const auto w = philox_words(st, i);
    const double u1 = 1.0 - philox_uniform(w[0], w[1]);  // (0, 1]
    const double u2 = philox_uniform(w[2], w[3]);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}

void bernoulli(const Tensor& out, double p, PhiloxState st) {
  fill_random(out, "bernoulli", [&](uint64_t i) {
    const auto w = philox_words(st, i);
    return philox_uniform(w[0], w[1]) < p ? 1.0 : 0.0;
  });
}

void randint(const Tensor& out, int64_t lo, int64_t hi, PhiloxState st) {
  const uint64_t range = static_cast<uint64_t>(hi - lo);
  fill_random(out, "randint", [&](uint64_t i) {
    const auto w = philox_words(st, i);
    const uint64_t r = ((static_cast<uint64_t>(w[0]) << 32) | w[1]) % range;
    return static_cast<double>(lo + static_cast<int64_t>(r));
  });
}

}  // namespace kiln::cpu
