// CPU parallelism: one pool of worker threads shared by every kernel.
//
// Note [Deterministic chunking]: parallel_for splits [0, n) into chunks whose
// boundaries depend only on n and the grain, never on the thread count, and
// parallel_reduce combines the per-chunk partials in chunk order. So a result
// is bit-identical whatever set_num_threads() says.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace kiln {

// Number of threads kernels use (default: all cores, or KILN_NUM_THREADS).
int get_num_threads();
void set_num_threads(int n);  // n >= 1, else kiln::Error

// Calls fn(begin, end) over chunks of at most `grain` items covering [0, n).
// Runs inline when n <= grain, when one thread is configured, or when called
// from inside a worker (no nested parallelism).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Number of chunks parallel_for uses for (n, grain); chunk c covers
// [c * grain, min(n, (c + 1) * grain)).
inline int64_t num_chunks(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

// Deterministic reduction: partial[c] = fn(chunk c), then combined in order.
template <typename T, typename ChunkFn, typename Combine>
T parallel_reduce(int64_t n, int64_t grain, T init, ChunkFn chunk_fn, Combine combine) {
  const int64_t chunks = num_chunks(n, grain);
  std::vector<T> partial(static_cast<size_t>(chunks), init);
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t b = c * grain;
      const int64_t e = b + grain < n ? b + grain : n;
      partial[static_cast<size_t>(c)] = chunk_fn(b, e);
    }
  });
  T acc = init;
  for (const T& p : partial) acc = combine(acc, p);
  return acc;
}

}  // namespace kiln
