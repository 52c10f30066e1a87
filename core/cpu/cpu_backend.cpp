// The CPU Backend: forwards each device-interface method to its kernel body in
// core/cpu/, and the backend registry that maps a Device to its Backend.
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/cpu/cpu_kernels.h"
#include "core/gemm_plan.h"

namespace kiln {
namespace {

class CpuBackend final : public Backend {
 public:
  Allocator& allocator() override { return cpu_allocator(); }
  void copy(const Tensor& d, const Tensor& s) override { cpu::copy(d, s); }
  void copy_from_cpu(const Tensor& d, const Tensor& s) override { cpu::copy(d, s); }
  void copy_to_cpu(const Tensor& d, const Tensor& s) override { cpu::copy(d, s); }
  void fill(const Tensor& d, double v) override { cpu::fill(d, v); }
  void arange(const Tensor& o, double start, double step) override { cpu::arange(o, start, step); }
  void unary(UnaryOp op, const Tensor& o, const Tensor& i) override { cpu::unary(op, o, i); }
  void binary(BinaryOp op, const Tensor& o, const Tensor& a, const Tensor& b) override { cpu::binary(op, o, a, b); }
  void where(const Tensor& o, const Tensor& c, const Tensor& a, const Tensor& b) override { cpu::where(o, c, a, b); }
  void reduce(ReduceOp op, const Tensor& o, const Tensor& i, const Shape& dims) override { cpu::reduce(op, o, i, dims); }
  void matmul(const Tensor& o, const Tensor& a, const Tensor& b) override { cpu::matmul(o, a, b); }
  void softmax(const Tensor& o, const Tensor& i, bool log) override { cpu::softmax(o, i, log); }
  void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy, bool log) override {
    cpu::softmax_backward(dx, y, dy, log);
  }
  void layer_norm(const Tensor& y, const Tensor& m, const Tensor& r, const Tensor& x, const Tensor& w,
                  const Tensor& b, double eps) override {
    cpu::layer_norm(y, m, r, x, w, b, eps);
  }
  void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                           const Tensor& m, const Tensor& r, const Tensor& w) override {
    cpu::layer_norm_backward(dx, dw, db, dy, x, m, r, w);
  }
  void rms_norm(const Tensor& y, const Tensor& r, const Tensor& x, const Tensor& w, double eps) override {
    cpu::rms_norm(y, r, x, w, eps);
  }
  void rms_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& r,
                         const Tensor& w) override {
    cpu::rms_norm_backward(dx, dw, dy, x, r, w);
  }
  void rotary_embedding(const Tensor& y, const Tensor& x, const Tensor& c, const Tensor& s, int64_t heads,
                        bool transpose) override {
    cpu::rotary_embedding(y, x, c, s, heads, transpose);
  }
  void gated_activation(const Tensor& o, const Tensor& a, const Tensor& b, GatedAct act) override {
    cpu::gated_activation(o, a, b, act);
  }
  void gated_activation_backward(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a,
                                 const Tensor& b, GatedAct act) override {
    cpu::gated_activation_backward(da, db, dy, a, b, act);
  }
  void cross_entropy(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& target,
                     int64_t ignore, double smoothing) override {
    cpu::cross_entropy(loss, lse, logits, target, ignore, smoothing);
  }
  void cross_entropy_backward(const Tensor& dl, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                              const Tensor& target, int64_t ignore, double smoothing) override {
    cpu::cross_entropy_backward(dl, dloss, logits, lse, target, ignore, smoothing);
  }
  void index_select(const Tensor& o, const Tensor& i, int64_t dim, const Tensor& idx) override {
    cpu::index_select(o, i, dim, idx);
  }
  void index_add(const Tensor& o, int64_t dim, const Tensor& idx, const Tensor& s) override {
    cpu::index_add(o, dim, idx, s);
  }
  void gather(const Tensor& o, const Tensor& i, int64_t dim, const Tensor& idx) override { cpu::gather(o, i, dim, idx); }
  void scatter(const Tensor& o, int64_t dim, const Tensor& idx, const Tensor& s, bool add) override {
    cpu::scatter(o, dim, idx, s, add);
  }
  void sort(const Tensor& v, const Tensor& idx, const Tensor& i, bool desc) override { cpu::sort(v, idx, i, desc); }
  void cumsum(const Tensor& o, const Tensor& i, int64_t dim, bool rev) override { cpu::cumsum(o, i, dim, rev); }
  void multinomial(const Tensor& o, const Tensor& p, const Tensor& u, bool repl) override {
    cpu::multinomial(o, p, u, repl);
  }
  void uniform(const Tensor& o, double lo, double hi, PhiloxState st) override { cpu::uniform(o, lo, hi, st); }
  void normal(const Tensor& o, double m, double s, PhiloxState st) override { cpu::normal(o, m, s, st); }
  void bernoulli(const Tensor& o, double p, PhiloxState st) override { cpu::bernoulli(o, p, st); }
  void randint(const Tensor& o, int64_t lo, int64_t hi, PhiloxState st) override { cpu::randint(o, lo, hi, st); }
  void multi_tensor_adamw(const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& m,
                          const std::vector<Tensor>& v, const std::vector<int64_t>& steps, double lr, double wd,
                          double beta1, double beta2, double eps) override {
    cpu::multi_tensor_adamw(p, g, m, v, steps, lr, wd, beta1, beta2, eps);
  }
  void multi_tensor_lamb(const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& m,
                         const std::vector<Tensor>& v, const std::vector<int64_t>& steps, double lr, double wd,
                         double beta1, double beta2, double eps, bool bias_correction) override {
    cpu::multi_tensor_lamb(p, g, m, v, steps, lr, wd, beta1, beta2, eps, bias_correction);
  }
  void multi_tensor_norm(const Tensor& o, const std::vector<Tensor>& ts, double norm_type) override {
    cpu::multi_tensor_norm(o, ts, norm_type);
  }
  void multi_tensor_all_finite(const Tensor& o, const std::vector<Tensor>& ts) override {
    cpu::multi_tensor_all_finite(o, ts);
  }
  bool has_fused_attention() const override { return true; }
  void addmm(const Tensor& o, const Tensor& a, const Tensor& b, const Tensor& bias) override {
    if (o.dtype() == DType::Float32) cpu::addmm(o, a, b, bias);
    else Backend::addmm(o, a, b, bias);
  }
  void masked_scale_add(const Tensor& o, const Tensor& x, const Tensor& keep, double scale,
                        const Tensor& residual) override {
    cpu::masked_scale_add(o, x, keep, scale, residual);
  }
  void attention(const Tensor& ctx, const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& mask, const Tensor& keep, int64_t heads, double scale, double keep_scale,
                 bool causal) override {
    cpu::attention(ctx, probs, q, k, v, mask, keep, heads, scale, keep_scale, causal);
  }
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dctx, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& keep, int64_t heads,
                          double scale, double keep_scale, bool causal) override {
    cpu::attention_backward(dq, dk, dv, dctx, q, k, v, probs, keep, heads, scale, keep_scale, causal);
  }
};

}  // namespace

void Backend::attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, int64_t, double, double, bool) {
  fail("attention: this device has no fused attention kernel (multi_head_attention composes primitives there)");
}

void Backend::attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, double, double,
                                 bool) {
  fail("attention_backward: this device has no fused attention kernel");
}

void Backend::masked_scale_add(const Tensor& out, const Tensor& x, const Tensor& keep, double scale,
                               const Tensor& residual) {
  Tensor factor = empty_tensor(x.sizes(), x.dtype(), x.device());  // keep * scale, as dropout() forms it
  copy(factor, keep);
  Tensor s = empty_tensor({}, x.dtype(), x.device());
  fill(s, scale);
  binary(BinaryOp::Mul, factor, factor, make_tensor(s.storage(), x.sizes(), Shape(x.sizes().size(), 0), s.offset(), x.dtype()));
  binary(BinaryOp::Mul, out, x, factor);
  if (residual.defined()) binary(BinaryOp::Add, out, out, residual);
}

void Backend::check_index(const Tensor& index, int64_t limit, std::optional<int64_t> ignore, const IndexCheck& what,
                          const Tensor& counted) {
  const Tensor host = index.device().is_cpu() ? index : empty_tensor(index.sizes(), index.dtype(), kCPU);
  if (!index.device().is_cpu() && index.numel() > 0) copy_to_cpu(host, index);
  const int64_t* p = host.data_ptr<int64_t>();
  int64_t kept = 0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (ignore && p[i] == *ignore) continue;
    KILN_CHECK(p[i] >= 0 && p[i] < limit, what.op, ": ", what.entry, " ", p[i], " at position ", i,
               " is out of range for ", limit, " ", what.unit);
    ++kept;
  }
  if (counted.defined()) fill(counted, static_cast<double>(kept));
}

void Backend::scaled_masked_softmax(const Tensor&, const Tensor&, const Tensor&, double) {
  fail("scaled_masked_softmax: this device has no fused masked-softmax kernel");
}

void Backend::addmm(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  matmul(matrix_as_batch(out), matrix_as_batch(a), matrix_as_batch(b));
  binary(BinaryOp::Add, out, out, make_tensor(bias.storage(), out.sizes(), {0, bias.stride(0)}, bias.offset(), bias.dtype()));
}

// Tensor by tensor: |x| in float64, then max, or the sum of squares (order 2)
// or of |x|^p, into a running total on this device; the root at the end.
void Backend::multi_tensor_norm(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type) {
  const bool inf = std::isinf(norm_type);
  const Device dev = out.device();
  auto flat = [](const Tensor& t) { return make_tensor(t.storage(), {t.numel()}, {1}, t.offset(), t.dtype()); };
  auto constant = [&](double v, int64_t n) {  // v broadcast to (n)
    Tensor s = empty_tensor({}, DType::Float64, dev);
    fill(s, v);
    return make_tensor(s.storage(), {n}, {0}, s.offset(), DType::Float64);
  };
  const Tensor total = flat(out);  // (1)
  fill(total, 0.0);
  Tensor part = empty_tensor({1}, DType::Float64, dev);
  for (const Tensor& t : tensors) {
    const int64_t n = t.numel();
    if (n == 0) continue;  // adds 0 (max: 0, the starting value)
    Tensor x = empty_tensor({n}, DType::Float64, dev);
    copy(x, flat(t));
    unary(UnaryOp::Abs, x, x);
    if (!inf) binary(norm_type == 2.0 ? BinaryOp::Mul : BinaryOp::Pow, x, x, norm_type == 2.0 ? x : constant(norm_type, n));
    reduce(inf ? ReduceOp::Max : ReduceOp::Sum, part, x, {0});
    binary(inf ? BinaryOp::Maximum : BinaryOp::Add, total, total, part);
  }
  if (inf) return;
  if (norm_type == 2.0) unary(UnaryOp::Sqrt, total, total);
  else binary(BinaryOp::Pow, total, total, constant(1.0 / norm_type, 1));
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

Backend& cpu_backend() {
  static CpuBackend b;
  return b;
}


}  // namespace kiln
