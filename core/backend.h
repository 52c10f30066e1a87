// The device interface: the kernels every device provides. Ops (ops/) check
// arguments, allocate outputs and record autograd; then call one of these on
// backend(device). The CPU backend lives in core/cpu/, the CUDA one in cuda/;
// without CUDA, backend(cuda) throws "built without CUDA". Internal: not
// installed (the public API is ops/ops.h and cuda/cuda.h).
//
// Conventions for every kernel:
//  - `out` is allocated by the caller with the final shape and dtype; inputs
//    arrive already broadcast (expanded, stride 0) to the shape the kernel
//    expects and already cast to the compute dtype unless stated otherwise.
//  - any operand may be non-contiguous unless stated; `out` may alias an
//    input exactly (same storage, offset and strides) for elementwise kernels.
//  - float16/bfloat16 compute in float32 (Note [Low-precision compute]).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/random.h"  // PhiloxState
#include "core/storage.h"
#include "core/tensor.h"

namespace kiln {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Erf, Sigmoid, Relu, Gelu, GeluTanh, Abs, LogicalNot
};

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  Eq, Ne, Lt, Le, Gt, Ge,  // output dtype bool
  // derivative helpers: (x, dy) -> dy * f'(x)
  ReluBackward, GeluBackward, GeluTanhBackward,
  // (y, dy) -> dy * f'(x) expressed through the output y
  TanhBackward, SigmoidBackward,
};

bool is_comparison(BinaryOp op);

// The activation of a gated unit (gated_activation, ops/decoder_ops.h):
// silu (SwiGLU), gelu with the exact erf (GeGLU), gelu's tanh approximation.
enum class GatedAct : uint8_t { Silu, Gelu, GeluTanh };

enum class ReduceOp : uint8_t { Sum, Max, Min, Argmax };

// How an index range check names what it checks, for its error message
// "<op>: <entry> <v> at position <i> is out of range for <limit> <unit>":
// {"embedding", "id", "embeddings"}. Pointers to string literals.
struct IndexCheck {
  const char* op;
  const char* entry;
  const char* unit;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Allocator& allocator() = 0;

  // dst <- src (same shape; dtype conversion allowed; both on this device).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  // Copies between this device and the CPU (same shape and dtype, contiguous).
  virtual void copy_from_cpu(const Tensor& dst, const Tensor& cpu_src) = 0;
  virtual void copy_to_cpu(const Tensor& cpu_dst, const Tensor& src) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // out[i] = start + i * step, out 1-D contiguous.
  virtual void arange(const Tensor& out, double start, double step) = 0;

  // out = op(in); same shape; out dtype == in dtype (bool for LogicalNot).
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& in) = 0;
  // out = op(a, b); a, b, out same shape (broadcast done by caller) and same
  // dtype, except comparisons write bool.
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // out = cond ? a : b; cond bool, a/b/out same dtype, all same shape.
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;

  // Reduces `in` over `dims` into `out`, which has in's shape with those dims
  // set to 1 (keepdim form). Argmax writes int64 (first index of the maximum).
  virtual void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims) = 0;

  // out(Bt, M, N) = a(Bt, M, K) @ b(Bt, K, N); a, b may be transposed views.
  virtual void matmul(const Tensor& out, const Tensor& a, const Tensor& b) = 0;

  // Row-wise over the last dim of contiguous (R, C) tensors.
  virtual void softmax(const Tensor& out, const Tensor& in, bool log) = 0;
  // dx = y * (dy - sum(dy * y))  |  log: dx = dy - exp(y) * sum(dy)
  virtual void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy, bool log) = 0;

  // x (R, C) contiguous; weight/bias (C) or undefined; mean/rstd (R) float32
  // (float64 for float64 x).
  virtual void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, const Tensor& bias, double eps) = 0;
  // dx (R, C) overwritten; dweight/dbias (C) overwritten when defined.
  virtual void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   const Tensor& dy, const Tensor& x, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& weight) = 0;

  // The decoder ops (ops/decoder_ops.h; CPU bodies in core/cpu/decoder_kernels.cpp,
  // CUDA in cuda/decoder_kernels.cu).
  // RMS norm over the last dim: x (R, C) contiguous, R, C > 0; weight (C)
  // contiguous of x's dtype, or undefined; y (R, C) contiguous of x's dtype;
  // rstd (R) float32 (float64 for float64 x). In the accumulation type A:
  //   rstd = 1 / sqrt(sum_c x^2 / C + eps),  y = T(T(x * rstd) * w)
  // (the normalised value rounded to x's dtype T before the weight, as
  // transformers' LlamaRMSNorm does; a no-op rounding for float32/float64).
  virtual void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps) = 0;
  // dx (R, C) overwritten; dweight (C) overwritten when defined: with
  // xh = T(x * rstd) and g = dy * w (dy alone without a weight)
  //   dx = rstd * (g - xh * sum_c(g * xh) / C),  dweight = sum_r dy * xh,
  // the column sums over fixed blocks of 64 rows added in block order.
  virtual void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                                 const Tensor& rstd, const Tensor& weight) = 0;
  // Rotary position embedding of x (B, T, heads * D), any strides; cos, sin
  // (T, D) contiguous of x's dtype; y (B, T, heads * D) contiguous. Per head,
  // with halves x1 = x[:D/2], x2 = x[D/2:] and c1, c2, s1, s2 likewise:
  //   forward:   y1 = x1 c1 - x2 s1,  y2 = x2 c2 + x1 s2
  //   transpose: y1 = x1 c1 + x2 s2,  y2 = x2 c2 - x1 s1   (the backward: x = dy)
  virtual void rotary_embedding(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin,
                                int64_t heads, bool transpose) = 0;
  // out = act(a) * b elementwise; a, b any strides, out contiguous, one shape
  // and floating dtype.
  virtual void gated_activation(const Tensor& out, const Tensor& a, const Tensor& b, GatedAct act) = 0;
  // da = dy * b * act'(a), db = dy * act(a); da, db contiguous, dy, a, b any strides.
  virtual void gated_activation_backward(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a,
                                         const Tensor& b, GatedAct act) = 0;

  // logits (N, C) contiguous, target (N) int64. loss (N) per-row loss
  // (0 where target == ignore_index), lse (N) logsumexp saved for backward.
  // Label smoothing eps: loss = (1-eps) * nll + eps * mean_c(-logp_c).
  virtual void cross_entropy(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                             const Tensor& target, int64_t ignore_index, double smoothing) = 0;
  // dlogits (N, C) = dloss_n * (softmax - smoothed one-hot), 0 for ignored rows.
  virtual void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                      const Tensor& lse, const Tensor& target, int64_t ignore_index,
                                      double smoothing) = 0;

  // out = in.index_select(dim, index); index 1-D int64, validated by caller.
  virtual void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) = 0;
  // out.index_add_(dim, index, src), deterministic (fixed summation order).
  virtual void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  // Index range check (Note [Lazy index checks], cuda/index.cu): every entry
  // of `index` (1-D int64, contiguous) other than `ignore` must lie in
  // [0, limit). `counted`, when defined (0-dim int64 on this device), is set
  // to the number of entries other than `ignore`. The default (the CPU's,
  // core/cpu/cpu_backend.cpp) reads the index on the host and throws at once,
  // naming the first offender. CUDA queues the check and reports what it found
  // at the next read of a CUDA tensor by the host (or raise_deferred_errors).
  virtual void check_index(const Tensor& index, int64_t limit, std::optional<int64_t> ignore, const IndexCheck& what,
                           const Tensor& counted);
  // Throws the error a queued check has found since the last report, after
  // the work queued so far on the current stream; the default has none.
  virtual void raise_deferred_errors() {}

  // Gather/scatter along `dim` (ops/gather_scatter.cpp), PyTorch's semantics.
  // index int64 contiguous, of the tensor's rank, index.size(d) <= size(d) for
  // d != dim, values in [0, size(dim)) (validated by the caller).
  // gather: out (index's shape) contiguous, in any strides:
  //   out[p] = in[p with coordinate dim replaced by index[p]]
  virtual void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) = 0;
  // scatter: out contiguous (holding self's values), src contiguous of index's
  // shape and out's dtype; for p over index's shape in row-major order
  //   out[p with dim := index[p]] = src[p]   (add: += src[p], rounded per add)
  // so duplicate targets are summed, or the last one written wins, in that
  // fixed order on every device (Note [Deterministic scatter_add]).
  virtual void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool add) = 0;
  // Sorts each row of contiguous in (R, C): values (R, C) of in's dtype and
  // indices (R, C) int64, both contiguous. Stable: ties keep their index order
  // (ascending or descending); NaN sorts above +inf, -0.0 equals +0.0
  // (Note [Sort keys], ops/sort_scan_ops.cpp).
  virtual void sort(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending) = 0;
  // out = the running sum of in along dim (reverse: from the end), in and out
  // contiguous of one shape and dtype; each line summed in order in
  // compute_t (int64 for integers), rounded once per output element.
  virtual void cumsum(const Tensor& out, const Tensor& in, int64_t dim, bool reverse) = 0;
  // out (R, n) int64 contiguous: category draws from the rows of probs (R, C)
  // float64 contiguous (validated: >= 0, finite, positive row sums; without
  // replacement n <= nonzero categories), u (R, n) float64 uniforms in [0, 1),
  // one per draw, by inverse-CDF search (Note [Multinomial sampling],
  // ops/multinomial.cpp).
  virtual void multinomial(const Tensor& out, const Tensor& probs, const Tensor& u, bool replacement) = 0;

  // Random fills from Philox (Note [Random numbers]); out contiguous.
  virtual void uniform(const Tensor& out, double lo, double hi, PhiloxState st) = 0;
  virtual void normal(const Tensor& out, double mean, double std, PhiloxState st) = 0;
  // out[i] = (u_i < p) for float p, written as 0/1 in out's dtype
  virtual void bernoulli(const Tensor& out, double p, PhiloxState st) = 0;
  virtual void randint(const Tensor& out, int64_t lo, int64_t hi, PhiloxState st) = 0;

  // Multi-tensor ops (Note [Multi-tensor ops], ops/multi_tensor.h); the ops
  // have checked every list. Optimizer steps, in place: entry i of params,
  // grads, exp_avgs and exp_avg_sqs belongs to parameter i; all contiguous,
  // of one dtype (float32 or float64), entry i of each of one shape; steps[i]
  // >= 1 is parameter i's update count. The lists are non-empty and of equal
  // length. AdamW: torch.optim.AdamW's formula in the statement order and
  // roundings of core/cpu/multi_tensor.cpp; LAMB likewise, one trust ratio per
  // parameter.
  virtual void multi_tensor_adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                  const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                                  const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1,
                                  double beta2, double eps) = 0;
  virtual void multi_tensor_lamb(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                                 const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1,
                                 double beta2, double eps, bool bias_correction) = 0;
  // out (0-dim float64) = the norm of order norm_type (> 0, or infinity) of
  // all the tensors together (contiguous, each float32 or float64, possibly
  // empty; the list may be empty: 0), the partial sums in float64 and in list
  // order, NaN propagating. The default composes copy, unary, binary and
  // reduce on this device, tensor by tensor; CUDA runs orders 2 and infinity
  // of a one-dtype list as multi-tensor kernels.
  virtual void multi_tensor_norm(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type);
  // out (0-dim bool) = no element of the tensors (floating, non-empty,
  // contiguous; the list may be empty: true) is inf or NaN.
  virtual void multi_tensor_all_finite(const Tensor& out, const std::vector<Tensor>& tensors) = 0;

  // Fused multi-head attention (Note [Fused attention], ops/fused.cpp). Optional:
  // a backend without it keeps these defaults, and multi_head_attention() runs
  // the composition of primitives there instead (the CUDA backend does so).
  // q (B, T, C), k and v (B, S, C) with unit stride in the last dim (any batch
  // and row strides), C = heads * head_size, float32 or float64; mask
  // undefined, or a (B, heads, T, S) view of q's dtype with unit stride in the
  // last dim and stride 0 where it broadcasts (a key bias is (B|1, 1, 1, S)
  // expanded); keep (B, heads, T, S) bool dropout keep mask, contiguous, or
  // undefined (no dropout); causal: key s is masked (-inf) for query t when
  // s > t + S - T, S >= T. Per (b, h):
  //   probs = softmax(q_h k_h^T * scale + mask_bh [causal mask])  -> probs (B, heads, T, S)
  //   ctx_h = (probs * keep * keep_scale) v_h                     -> ctx (B, T, C) contiguous
  // probs is the backward's input only: a kernel may leave entries its
  // backward does not read (causal ones) unwritten.
  virtual bool has_fused_attention() const { return false; }
  // Scaled masked softmax (scaled_masked_softmax, ops/nn_ops.cpp), optional:
  // out = softmax over the last dim of (x * scale + mask) in one pass.
  // x and out (R, C) contiguous, one floating dtype; mask (Rm, C) contiguous
  // of x's dtype with R a multiple of Rm (row r takes mask row r / (R / Rm)),
  // or undefined. Backends without it (the CPU) leave has_masked_softmax()
  // false and the op composes mul, add and softmax instead.
  virtual bool has_masked_softmax() const { return false; }
  virtual void scaled_masked_softmax(const Tensor& out, const Tensor& x, const Tensor& mask, double scale);
  // Dropout applied and residual added in one pass (dropout_add, ops/fused.cpp):
  // out = x * (keep ? scale : 0) + residual; keep bool; residual undefined: no
  // add. All the same shape, contiguous. The default composes copy and binary.
  virtual void masked_scale_add(const Tensor& out, const Tensor& x, const Tensor& keep, double scale,
                                const Tensor& residual);
  // out(M, N) = a(M, K) @ b(K, N) + bias(N) broadcast over rows (linear_fused,
  // ops/fused.cpp); a, b 2-D, may be transposed views; out and bias
  // contiguous, all one floating dtype. The default is matmul, then binary add.
  virtual void addmm(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
  // preact(M, N) = a @ b + bias as addmm, and out(M, N) = gelu(preact) (erf
  // form, or the tanh approximation when `tanh`) for linear_gelu
  // (ops/fused.cpp); out and preact contiguous. The default is addmm, then
  // unary Gelu / GeluTanh; CUDA runs the tanh form as one cuBLASLt GEMM.
  virtual void linear_gelu(const Tensor& out, const Tensor& preact, const Tensor& a, const Tensor& b,
                           const Tensor& bias, bool tanh) {
    addmm(preact, a, b, bias);
    unary(tanh ? UnaryOp::GeluTanh : UnaryOp::Gelu, out, preact);
  }
  virtual void attention(const Tensor& ctx, const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& mask, const Tensor& keep, int64_t heads, double scale, double keep_scale,
                         bool causal);
  // dq (B, T, C), dk and dv (B, S, C) with unit stride in the last dim (they
  // may be column slices of one (B, T, 3C) gradient), overwritten; dctx
  // (B, T, C) contiguous; probs as attention() left it.
  virtual void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dctx,
                                  const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                                  const Tensor& keep, int64_t heads, double scale, double keep_scale, bool causal);

  // Scaled-dot-product attention through a vendor kernel (cuDNN on CUDA, Note
  // [cuDNN attention] in cuda/attention_cudnn.cpp). Optional: a backend says
  // which cases it runs (the default: none) and multi_head_attention() takes
  // the other paths for the rest. q (B, T, C), k and v (B, S, C) with unit
  // stride in the last dim, C = heads * head_size, float16 or bfloat16; mask
  // (B, S) additive key bias in q's dtype, contiguous, or undefined (full
  // masks take the other paths); causal: the bottom-right aligned mask of
  // attention() (S >= T); dropout p >= 0 drawn from the backend's own Philox
  // stream at `st` (forward and backward given the same st and p drop the
  // same elements). out (B, T, C) contiguous; stats (B, heads, T) float32
  // contiguous, the logsumexp of each score row. sdpa_forward returns false,
  // having written nothing, when the backend cannot run this exact problem
  // after all (the caller takes another path).
  virtual bool sdpa_supported(DType dtype, int64_t T, int64_t S, int64_t head_size, bool has_mask, double p,
                              bool causal) const {
    (void)dtype, (void)T, (void)S, (void)head_size, (void)has_mask, (void)p, (void)causal;
    return false;
  }
  // Self-attention without a causal mask (S = T).
  bool sdpa_supported(DType dtype, int64_t T, int64_t head_size, bool has_mask, double p) const {
    return sdpa_supported(dtype, T, T, head_size, has_mask, p, false);
  }
  virtual bool sdpa_forward(const Tensor& out, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& mask, int64_t heads, double scale, double p, PhiloxState st, bool causal);
  // dq (B, T, C), dk and dv (B, S, C) with unit stride in the last dim (they
  // may be column slices of one (B, T, 3C) gradient), overwritten; dout
  // (B, T, C) contiguous.
  virtual void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& stats, const Tensor& mask, int64_t heads, double scale, double p,
                             PhiloxState st, bool causal);
};

inline bool Backend::sdpa_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, int64_t, double, double, PhiloxState, bool) {
  fail("internal: sdpa_forward called on a backend without fused scaled-dot-product attention");
}
inline void Backend::sdpa_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                                   double, double, PhiloxState, bool) {
  fail("internal: sdpa_backward called on a backend without fused scaled-dot-product attention");
}

// The backend for a device; kiln::Error "built without CUDA" (or "no CUDA
// device") when it cannot exist. CUDA's comes from libkiln_cuda through its
// hooks (core/cuda_hooks.h, Note [Package layout] in core/components.h).
Backend& backend(Device device);
Backend& cpu_backend();

}  // namespace kiln
