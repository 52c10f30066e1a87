// The CPU Backend: forwards each device-interface method to its kernel body in
// core/cpu/, and the backend registry that maps a Device to its Backend.
#include <cstring>
#include <mutex>

#include "core/cpu/cpu_kernels.h"

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
  void uniform(const Tensor& o, double lo, double hi, PhiloxState st) override { cpu::uniform(o, lo, hi, st); }
  void normal(const Tensor& o, double m, double s, PhiloxState st) override { cpu::normal(o, m, s, st); }
  void bernoulli(const Tensor& o, double p, PhiloxState st) override { cpu::bernoulli(o, p, st); }
  void randint(const Tensor& o, int64_t lo, int64_t hi, PhiloxState st) override { cpu::randint(o, lo, hi, st); }
};

Backend* (*g_cuda_factory)(int) = nullptr;

}  // namespace

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

Backend& cpu_backend() {
  static CpuBackend b;
  return b;
}

void register_cuda_backend(Backend* (*factory)(int)) { g_cuda_factory = factory; }

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  if (!cuda_built()) fail("device ", device.str(), " requested, but kiln was built without CUDA");
  if (!g_cuda_factory) fail("device ", device.str(), ": the CUDA backend has no kernels registered in this build");
  return *g_cuda_factory(device.index);
}

}  // namespace kiln
