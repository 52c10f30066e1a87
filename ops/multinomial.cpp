// multinomial: category draws from rows of weights. Not differentiable.
// Kernels: core/cpu/sort_scan.cpp, cuda/sort_scan.cu.
//
// Note [Multinomial sampling]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The randomness is one generator call, drawn like every random op in kiln
// (Note [Random numbers], core/random.h): u = rand((R, n), float64, gen), so
// draw s of row r takes the uniform of the Philox block at counter
// (r * n + s, offset), and the CPU and CUDA kernels get the same u bit for
// bit. Each draw is then an inverse-CDF search in float64 whose every add
// runs in the same order on both devices, so they pick the same categories:
//  - with replacement: cdf_j is the running sum of the row's weights, in
//    order; draw s is the first j with cdf_j > u_s * total (binary search). A
//    zero weight never matches (cdf does not rise there); where rounding
//    puts u_s * total at the total, it is the last positive-weight category.
//  - without replacement: draws run one after another. Each sums the weights
//    left (in order), walks them to the first running sum above u_s * total,
//    and zeroes that weight: sequential sampling without replacement, the
//    distribution torch.multinomial draws from.
// Weights need not be normalised; they must be finite and >= 0 with a positive
// sum per row (and, without replacement, at least n positive), else kiln::Error.
// CUDA runs one thread per row: each row's work is a sequence of dependent
// float64 adds (C per CDF, and C per draw without replacement).
#include <cmath>

#include "ops/internal.h"

namespace kiln {
using namespace detail;

namespace {

// kiln::Error unless every row of p (R, C) float64 is a valid distribution.
void check_weights(const Tensor& p, int64_t n, bool replacement) {
  NoGradGuard ng;
  const double lowest = amin(p).item<double>();  // NaN compares false below
  const std::vector<double> totals = sum(p, {1}).to_vector<double>();  // inf or NaN anywhere in a row shows here
  for (size_t r = 0; r < totals.size(); ++r) {
    KILN_CHECK(lowest >= 0.0 && std::isfinite(totals[r]), "multinomial: probability tensor contains inf, nan or an "
               "element < 0");
    KILN_CHECK(totals[r] > 0.0, "multinomial: row ", r, " of probs sums to ", totals[r], "; weights must have a "
               "positive sum");
  }
  if (replacement) return;
  const std::vector<int64_t> positive = sum(gt(p, 0.0), {1}).to_vector<int64_t>();
  for (size_t r = 0; r < positive.size(); ++r)
    KILN_CHECK(positive[r] >= n, "multinomial: cannot draw ", n, " samples without replacement from row ", r,
               ", which has ", positive[r], " categories of positive weight");
}

}  // namespace

// probs (C) or (R, C) -> (n) or (R, n) int64
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  OpScope scope("multinomial", probs);
  scope.attr("num_samples", num_samples);
  scope.attr("replacement", replacement);
  check_defined(probs, "multinomial", "probs");
  KILN_CHECK(probs.dim() == 1 || probs.dim() == 2, "multinomial: probs must be 1-D or 2-D, got ",
             shape_str(probs.sizes()));
  KILN_CHECK(is_floating(probs.dtype()), "multinomial: probs must be floating-point, got ",
             dtype_name(probs.dtype()));
  KILN_CHECK(probs.size(-1) > 0, "multinomial: probs ", shape_str(probs.sizes()), " has no categories");
  KILN_CHECK(num_samples > 0, "multinomial: cannot draw num_samples = ", num_samples, " <= 0 samples");
  const int64_t C = probs.size(-1);
  KILN_CHECK(replacement || num_samples <= C, "multinomial: cannot draw ", num_samples,
             " samples without replacement from ", C, " categories");
  const int64_t R = probs.dim() == 1 ? 1 : probs.size(0);
  Tensor p = raw_contiguous(raw_cast(raw_view(raw_contiguous(probs.detach()), {R, C}), DType::Float64));
  if (R > 0) check_weights(p, num_samples, replacement);
  // One generator call, drawn even for an empty batch so the stream advances alike.
  Tensor u = rand({R, num_samples}, TensorOptions(DType::Float64, probs.device()), gen);
  Tensor out = empty_tensor({R, num_samples}, DType::Int64, probs.device());
  if (R > 0) backend(probs.device()).multinomial(out, p, u, replacement);
  return scope.out(probs.dim() == 1 ? raw_view(out, {num_samples}) : out);
}

// ---- registry samples -----------------------------------------------------------------
// The generator is seeded inside each sample, so every run (CPU, CUDA) draws
// the same numbers and tests/test_cuda_ops.cpp compares them bit for bit.
using S = std::vector<OpSample>;
using L = TensorList;
KILN_REGISTER_OP("multinomial", false, [] {
  return S{{"2 rows with replacement", {sample_tensor({2, 6}, 430, 0.0, 1.0)},
            [](const L& x) {
              Generator g(17);
              return multinomial(x[0], 8, true, &g);
            }},
           {"without replacement", {sample_tensor({3, 5}, 431, 0.0, 1.0)},
            [](const L& x) {
              Generator g(18);
              return multinomial(x[0], 4, false, &g);
            }}};
});

}  // namespace kiln
