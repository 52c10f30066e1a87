// kiln's public ops: free functions on Tensors that check their arguments,
// run the device kernel (core/backend.h) and record autograd history
// (autograd/record.h). Each op's forward and backward live side by side in
// one file of ops/, with its gradient-check samples (ops/op_registry.h):
//   factory.cpp     empty zeros ones full arange rand randn randint bernoulli tensor
//   elementwise.cpp add sub mul div neg pow exp log sqrt rsqrt tanh erf sigmoid
//                   relu gelu abs maximum minimum where clamp masked_fill, comparisons
//   reduce.cpp      sum mean max min argmax var
//   view_ops.cpp    view reshape flatten permute transpose narrow slice select
//                   expand squeeze unsqueeze
//   copy_ops.cpp    contiguous clone to(dtype) to(device) and the in-place ops
//   linalg.cpp      matmul linear
//   nn_ops.cpp      softmax log_softmax scaled_masked_softmax layer_norm embedding dropout cross_entropy
//   shape_ops.cpp   cat stack split chunk index_select
//   gather_scatter.cpp  gather scatter scatter_add
//   sort_scan_ops.cpp   sort argsort topk cumsum
//   multinomial.cpp     multinomial
//   triangle_ops.cpp    tril triu causal_mask
//   softmax_dtype.cpp   softmax log_softmax with an output dtype
//   fused.cpp       multi_head_attention(_qkv) linear_fused linear_gelu dropout_add (ops/fused.h:
//                   each equals a composition of the ops above; used by nn/models/)
//   decoder_ops.cpp rms_norm rotary_embedding gated_activation (ops/decoder_ops.h:
//                   each equals a composition of the ops above; Llama-style decoders, ModernBERT)
//   multi_tensor.cpp    multi_tensor_adamw_ multi_tensor_lamb_ multi_tensor_norm
//                       multi_tensor_all_finite (ops/multi_tensor.h, included here)
// Shapes use B batch, T sequence, C channels, V vocabulary.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/autograd/grad_mode.h"
#include "kiln/core/random.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/multi_tensor.h"

namespace kiln {

struct TensorOptions {
  std::optional<DType> dtype;  // default: float32 (int64 for integer arange/randint)
  Device device = kCPU;
  bool requires_grad = false;
  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}  // NOLINT
  TensorOptions(Device dev) : device(dev) {}  // NOLINT
  TensorOptions(DType d, Device dev) : dtype(d), device(dev) {}
};

// ---- factories ------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor scalar_tensor(double value, TensorOptions opts = {});
Tensor arange(double end, TensorOptions opts = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
// Row-major values into `shape` (default: 1-D); converted to opts.dtype.
Tensor tensor(const std::vector<double>& values, const Shape& shape = {}, TensorOptions opts = {});
Tensor tensor_from(const std::vector<int64_t>& values, const Shape& shape = {}, TensorOptions opts = {});
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);  // N(0, 1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor bernoulli(const Shape& shape, double p, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);

// ---- elementwise (NumPy broadcasting, PyTorch type promotion) --------------
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor abs(const Tensor& x);
// approximate: "none" (exact, erf) or "tanh"
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// x where mask is false, value where it is true; x and mask broadcast together
// (the result has their broadcast shape, as torch.masked_fill does).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// value: a 0-dim tensor (its gradient is the sum over the filled positions).
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);
// Comparisons give bool tensors and no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor logical_not(const Tensor& x);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// ---- reductions (dims may be negative; empty dims = all) -------------------
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
struct ValuesIndices {
  Tensor values, indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // over the flattened tensor
// Variance with Bessel-style correction (1 = unbiased, like PyTorch's default).
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);

// ---- views and copies --------------------------------------------------------
Tensor view(const Tensor& x, const Shape& shape);       // -1 infers one size
Tensor reshape(const Tensor& x, const Shape& shape);    // view when possible, else copy
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);     // -1 keeps a size
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to_dtype(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, Device device);

// ---- linear algebra -----------------------------------------------------------
// torch.matmul semantics: 1-D, 2-D and batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) @ weight(out, in)^T + bias(out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- neural-network ops ---------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// With an output dtype: computes in float32 (float64 when x or dtype is
// float64) and rounds once to `dtype`; softmax(x_bf16, -1, DType::Float32) is
// float32 probabilities of bfloat16 logits. (PyTorch casts x to dtype first;
// for a wider dtype the two agree.)
Tensor softmax(const Tensor& x, int64_t dim, DType dtype);
Tensor log_softmax(const Tensor& x, int64_t dim, DType dtype);
// softmax over the last dim of x * scale + mask: attention's normalisation.
// x (..., C) floating; mask undefined or broadcastable to x (BERT's (B, 1, 1, T)
// key bias for x (B, NH, T, T)). One fused kernel where the device has it
// (CUDA), else mul, add and softmax (bit-identical to writing them out).
Tensor scaled_masked_softmax(const Tensor& x, double scale, const Tensor& mask = Tensor());
// Normalises over the last weight.dim() dims (or `normalized_dims` when no weight).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// weight (V, C), ids (...) int64/int32 -> (..., C). Rows equal to padding_idx get no gradient.
Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<int64_t> padding_idx = std::nullopt);
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
// logits (..., C), target (...) int64 -> scalar ("mean", "sum") or (...) ("none").
// Classes are the LAST dim (Hugging Face's flattened layout).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, const std::string& reduction = "mean");
// input, target: the same shape, floating-point -> scalar ("mean", "sum") or
// the input's shape ("none"): (input - target)^2, as torch.nn.functional.mse_loss.
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
// logits, target (probabilities in [0, 1]): the same shape ->
// -[y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], computed stably, as
// torch.nn.functional.binary_cross_entropy_with_logits (multi-label heads).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const std::string& reduction = "mean");

// ---- joining and indexing ----------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// PyTorch's gather/scatter along dim. index int64 or int32 with x's number of
// dims, index.size(d) <= x.size(d) for d != dim (and <= src.size(d) for all
// d), values in [0, x.size(dim)) (else kiln::Error naming the op and value).
// gather: out (index's shape), out[i][j] = x[index[i][j]][j] for dim 0.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// scatter: a copy of x with out[index[i][j]][j] = src[i][j] (dim 0); where
// several entries name one element the last in row-major order of index wins.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);
// scatter_add: out[index[i][j]][j] += src[i][j], summed in row-major order of
// index on every device: deterministic (Note [Deterministic scatter_add]).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// ---- sorting, scans and sampling -------------------------------------------------------
// Sorts along dim: values, and indices (int64) into x. Always stable (ties keep
// their index order, ascending or descending; `stable` = false is accepted and
// changes nothing), the same on every device. NaN sorts above +inf.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = true);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = true);
// The k largest (or smallest) along dim, sorted, ties broken by index:
// x (..., C) -> values, indices (..., k) for dim -1; 0 <= k <= C. `sorted` =
// false is accepted; the result is sorted anyway.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// Running sum along dim (integers and bool -> int64), summed in order:
// deterministic, the same on every device.
Tensor cumsum(const Tensor& x, int64_t dim);
// Draws num_samples category indices (int64) per row of probs (C) or (R, C):
// non-negative finite weights, not necessarily normalised -> (n) or (R, n).
// Philox-seeded (Note [Multinomial sampling], ops/multinomial.cpp): the same
// samples on the CPU and CUDA for the same generator state.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);

// ---- triangles and attention masks ---------------------------------------------------------
// The lower (tril) or upper (triu) triangle of the last two dims of x
// (..., M, N): element (i, j) is kept where j - i <= diagonal (tril) or
// j - i >= diagonal (triu), else 0.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// The causal mask of T positions, (1, 1, T, T): query i may attend key j <= i.
// Floating dtype (default float32): additive, as scaled_masked_softmax and
// softmax(scores + mask) take it: 0 where attended, the dtype's lowest finite
// value above the diagonal (torch.finfo(dtype).min, as Hugging Face's masks).
// Combine it with a (B, 1, 1, T) key bias by minimum(), not add (lowest +
// lowest overflows). multi_head_attention (ops/fused.h) takes causal = true
// instead (no mask tensor; bottom-right aligned when keys outnumber queries),
// or this mask as a full (1, 1, T, T) mask_bias. Bool dtype: true where
// attended (torch SDPA's convention; mask scores with masked_fill(scores,
// logical_not(m), value)).
Tensor causal_mask(int64_t T, TensorOptions opts = {});

// ---- helpers shared by ops ------------------------------------------------------------
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums g over broadcast dims so it has `shape` (the inverse of expand).
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace kiln
