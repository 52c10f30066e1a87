// CPU sort, cumsum and multinomial (core/backend.h states each contract).
// CUDA twin: cuda/sort_scan.cu, which runs the same arithmetic in the same
// order, so both devices give the same bits: sort keys (Note [Sort keys],
// ops/sort_scan_ops.cpp), running sums in line order, and the inverse-CDF
// search of multinomial (Note [Multinomial sampling], ops/multinomial.cpp).
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Note [Sort keys]: an unsigned key whose order is the value order.
template <typename T>
uint64_t sort_key(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 1u : 0u;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v)) ^ (uint64_t{1} << 63);
  } else {
    double d = static_cast<double>(static_cast<compute_t<T>>(v));
    if (d != d) return ~uint64_t{0};  // every NaN above +inf, all equal
    if (d == 0.0) d = 0.0;            // -0.0 equals +0.0
    uint64_t b;
    std::memcpy(&b, &d, sizeof b);
    return (b >> 63) ? ~b : b | (uint64_t{1} << 63);
  }
}

}  // namespace

void sort(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending) {
  const int64_t C = in.dim() == 0 ? 1 : in.size(-1);
  const int64_t R = C == 0 ? 0 : in.numel() / C;
  if (R == 0) return;
  dispatch_all(in.dtype(), "sort", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = in.data_ptr<T>();
    T* v = values.data_ptr<T>();
    int64_t* ix = indices.data_ptr<int64_t>();
    parallel_for(R, std::max<int64_t>(1, 16384 / C), [&](int64_t r0, int64_t r1) {
      std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(C));
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * C;
        for (int64_t j = 0; j < C; ++j) {
          const uint64_t k = sort_key(xr[j]);
          keyed[static_cast<size_t>(j)] = {descending ? ~k : k, j};
        }
        std::sort(keyed.begin(), keyed.end());  // (key, index): ties in index order, i.e. stable
        for (int64_t q = 0; q < C; ++q) {
          const int64_t j = keyed[static_cast<size_t>(q)].second;
          ix[r * C + q] = j;
          v[r * C + q] = xr[j];
        }
      }
    });
  });
}

// Each (outer, inner) line summed in order along dim in compute_t.
void cumsum(const Tensor& out, const Tensor& in, int64_t dim, bool reverse) {
  if (out.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  const int64_t n = in.dim() == 0 ? 1 : in.size(dim);
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = num_chunks(inner, kCols);
  dispatch_all(in.dtype(), "cumsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      fail("cumsum: internal: bool input reached the kernel (ops/ casts it to int64)");
    } else {
      using A = compute_t<T>;
      const T* x = in.data_ptr<T>();
      T* o = out.data_ptr<T>();
      parallel_for(outer * col_blocks, std::max<int64_t>(1, 4096 / (n * kCols)), [&](int64_t w0, int64_t w1) {
        A acc[kCols];
        for (int64_t w = w0; w < w1; ++w) {
          const int64_t ob = w / col_blocks, c0 = (w % col_blocks) * kCols;
          const int64_t c1 = std::min(inner, c0 + kCols);
          std::fill(acc, acc + kCols, A(0));
          for (int64_t s = 0; s < n; ++s) {
            const int64_t j = reverse ? n - 1 - s : s;
            const int64_t row = (ob * n + j) * inner;
            for (int64_t c = c0; c < c1; ++c) {
              acc[c - c0] += static_cast<A>(x[row + c]);
              o[row + c] = static_cast<T>(acc[c - c0]);
            }
          }
        }
      });
    }
  });
}

// Note [Multinomial sampling] (ops/multinomial.cpp): per row, in float64.
void multinomial(const Tensor& out, const Tensor& probs, const Tensor& u, bool replacement) {
  const int64_t R = probs.size(0), C = probs.size(1), n = out.size(1);
  if (R == 0 || n == 0) return;
  const double* p = probs.data_ptr<double>();
  const double* ur = u.data_ptr<double>();
  int64_t* o = out.data_ptr<int64_t>();
  parallel_for(R, std::max<int64_t>(1, 65536 / std::max<int64_t>(C * (replacement ? 1 : n), 1)),
               [&](int64_t r0, int64_t r1) {
    std::vector<double> w(static_cast<size_t>(C));
    for (int64_t r = r0; r < r1; ++r) {
      const double* pr = p + r * C;
      if (replacement) {
        double acc = 0.0;  // w = the running sum (the CDF, unnormalised)
        for (int64_t j = 0; j < C; ++j) w[static_cast<size_t>(j)] = acc += pr[j];
        const double total = acc;
        for (int64_t s = 0; s < n; ++s) {
          const double t = ur[r * n + s] * total;
          // first j with cdf[j] > t; past the end (rounding): the last nonzero category
          auto it = std::upper_bound(w.begin(), w.end(), t);
          if (it == w.end()) it = std::lower_bound(w.begin(), w.end(), total);
          o[r * n + s] = it - w.begin();
        }
      } else {
        std::copy(pr, pr + C, w.begin());  // the weights left; a drawn category's is zeroed
        for (int64_t s = 0; s < n; ++s) {
          double total = 0.0;
          for (int64_t j = 0; j < C; ++j) total += w[static_cast<size_t>(j)];
          const double t = ur[r * n + s] * total;
          double acc = 0.0;
          int64_t pick = -1, last = -1;
          for (int64_t j = 0; j < C; ++j) {
            const double wj = w[static_cast<size_t>(j)];
            if (wj <= 0.0) continue;
            last = j;
            acc += wj;
            if (acc > t) { pick = j; break; }
          }
          if (pick < 0) pick = std::max<int64_t>(last, 0);  // t rounded up to the total
          o[r * n + s] = pick;
          w[static_cast<size_t>(pick)] = 0.0;
        }
      }
    }
  });
}

}  // namespace kiln::cpu
