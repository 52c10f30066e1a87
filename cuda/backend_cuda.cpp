// The CUDA Backend (core/backend.h): one per device, made on first use. Each
// method makes its device current and forwards to a kernel entry point
// (cuda/kernels.cuh) that queues work on the current stream (Note [Current
// stream]). Copies to the CPU synchronise that stream; copies from pageable
// CPU memory are staged by the driver before cudaMemcpyAsync returns, so the
// source may be reused at once (from pinned memory the stream is synchronised).
//
// backend() for a CUDA device lands here through the hooks libkiln_cuda
// registers as it loads (cuda/runtime.cpp), or says why there is no such device.
#include <array>
#include <mutex>

#include "cuda/attention_cudnn.h"
#include "cuda/cuda.h"
#include "cuda/kernels.cuh"
#include "cuda/runtime.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxDevices = 64;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  Allocator& allocator() override { return detail::device_allocator(device_); }

  void copy(const Tensor& d, const Tensor& s) override {
    detail::DeviceGuard g(device_);
    kernels::copy(d, s);
  }
  void copy_from_cpu(const Tensor& d, const Tensor& cpu_s) override { host_copy(d, cpu_s); }
  // The device's index-check record rides along with every read by the host
  // (Note [Lazy index checks], cuda/index.cu): queued just ahead of the data,
  // looked at once the copy has waited for the stream.
  void copy_to_cpu(const Tensor& cpu_d, const Tensor& s) override {
    check_host_copy(cpu_d, s);
    detail::DeviceGuard g(device_);
    const Tensor probe = cpu_d.numel() > 0 ? kernels::index_errors_probe(device_) : Tensor();
    try {
      cuda::copy(cpu_d, s, /*non_blocking=*/false);
    } catch (...) {
      // the record's copy lands before its pinned buffer goes back
      if (probe.defined()) (void)cudaStreamSynchronize(detail::current_cuda_stream(device_));
      throw;
    }
    kernels::index_errors_raise(device_, probe);
  }
  void fill(const Tensor& d, double v) override {
    detail::DeviceGuard g(device_);
    kernels::fill(d, v);
  }
  void arange(const Tensor& o, double start, double step) override {
    detail::DeviceGuard g(device_);
    kernels::arange(o, start, step);
  }
  void unary(UnaryOp op, const Tensor& o, const Tensor& i) override {
    detail::DeviceGuard g(device_);
    kernels::unary(op, o, i);
  }
  void binary(BinaryOp op, const Tensor& o, const Tensor& a, const Tensor& b) override {
    detail::DeviceGuard g(device_);
    kernels::binary(op, o, a, b);
  }
  void where(const Tensor& o, const Tensor& c, const Tensor& a, const Tensor& b) override {
    detail::DeviceGuard g(device_);
    kernels::where(o, c, a, b);
  }
  void reduce(ReduceOp op, const Tensor& o, const Tensor& i, const Shape& dims) override {
    detail::DeviceGuard g(device_);
    kernels::reduce(op, o, i, dims);
  }
  void matmul(const Tensor& o, const Tensor& a, const Tensor& b) override {
    detail::DeviceGuard g(device_);
    kernels::matmul(o, a, b);
  }
  void softmax(const Tensor& o, const Tensor& i, bool log) override {
    detail::DeviceGuard g(device_);
    kernels::softmax(o, i, log);
  }
  void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy, bool log) override {
    detail::DeviceGuard g(device_);
    kernels::softmax_backward(dx, y, dy, log);
  }
  bool has_masked_softmax() const override { return true; }
  void scaled_masked_softmax(const Tensor& o, const Tensor& x, const Tensor& mask, double scale) override {
    detail::DeviceGuard g(device_);
    kernels::scaled_masked_softmax(o, x, mask, scale);
  }
  void layer_norm(const Tensor& y, const Tensor& m, const Tensor& r, const Tensor& x, const Tensor& w,
                  const Tensor& b, double eps) override {
    detail::DeviceGuard g(device_);
    kernels::layer_norm(y, m, r, x, w, b, eps);
  }
  void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                           const Tensor& m, const Tensor& r, const Tensor& w) override {
    detail::DeviceGuard g(device_);
    kernels::layer_norm_backward(dx, dw, db, dy, x, m, r, w);
  }
  void rms_norm(const Tensor& y, const Tensor& r, const Tensor& x, const Tensor& w, double eps) override {
    detail::DeviceGuard g(device_);
    kernels::rms_norm(y, r, x, w, eps);
  }
  void rms_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& r,
                         const Tensor& w) override {
    detail::DeviceGuard g(device_);
    kernels::rms_norm_backward(dx, dw, dy, x, r, w);
  }
  void rotary_embedding(const Tensor& y, const Tensor& x, const Tensor& c, const Tensor& s, int64_t heads,
                        bool transpose) override {
    detail::DeviceGuard g(device_);
    kernels::rotary_embedding(y, x, c, s, heads, transpose);
  }
  void gated_activation(const Tensor& o, const Tensor& a, const Tensor& b, GatedAct act) override {
    detail::DeviceGuard g(device_);
    kernels::gated_activation(o, a, b, act);
  }
  void gated_activation_backward(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a,
                                 const Tensor& b, GatedAct act) override {
    detail::DeviceGuard g(device_);
    kernels::gated_activation_backward(da, db, dy, a, b, act);
  }
  void cross_entropy(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& target,
                     int64_t ignore, double smoothing) override {
    detail::DeviceGuard g(device_);
    kernels::cross_entropy(loss, lse, logits, target, ignore, smoothing);
  }
  void cross_entropy_backward(const Tensor& dl, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                              const Tensor& target, int64_t ignore, double smoothing) override {
    detail::DeviceGuard g(device_);
    kernels::cross_entropy_backward(dl, dloss, logits, lse, target, ignore, smoothing);
  }
  void index_select(const Tensor& o, const Tensor& i, int64_t dim, const Tensor& idx) override {
    detail::DeviceGuard g(device_);
    kernels::index_select(o, i, dim, idx);
  }
  void index_add(const Tensor& o, int64_t dim, const Tensor& idx, const Tensor& s) override {
    detail::DeviceGuard g(device_);
    kernels::index_add(o, dim, idx, s);
  }
  void check_index(const Tensor& idx, int64_t limit, std::optional<int64_t> ignore, const IndexCheck& what,
                   const Tensor& counted) override {
    detail::DeviceGuard g(device_);
    if (!kernels::check_index(idx, limit, ignore, what, counted))
      Backend::check_index(idx, limit, ignore, what, counted);  // on the host
  }
  void raise_deferred_errors() override {
    detail::DeviceGuard g(device_);
    kernels::raise_index_errors(device_);
  }
  void gather(const Tensor& o, const Tensor& i, int64_t dim, const Tensor& idx) override {
    detail::DeviceGuard g(device_);
    kernels::gather(o, i, dim, idx);
  }
  void scatter(const Tensor& o, int64_t dim, const Tensor& idx, const Tensor& s, bool add) override {
    detail::DeviceGuard g(device_);
    kernels::scatter(o, dim, idx, s, add);
  }
  void sort(const Tensor& v, const Tensor& idx, const Tensor& i, bool desc) override {
    detail::DeviceGuard g(device_);
    kernels::sort(v, idx, i, desc);
  }
  void cumsum(const Tensor& o, const Tensor& i, int64_t dim, bool rev) override {
    detail::DeviceGuard g(device_);
    kernels::cumsum(o, i, dim, rev);
  }
  void multinomial(const Tensor& o, const Tensor& p, const Tensor& u, bool repl) override {
    detail::DeviceGuard g(device_);
    kernels::multinomial(o, p, u, repl);
  }
  void uniform(const Tensor& o, double lo, double hi, PhiloxState st) override {
    detail::DeviceGuard g(device_);
    kernels::uniform(o, lo, hi, st);
  }
  void normal(const Tensor& o, double m, double s, PhiloxState st) override {
    detail::DeviceGuard g(device_);
    kernels::normal(o, m, s, st);
  }
  void bernoulli(const Tensor& o, double p, PhiloxState st) override {
    detail::DeviceGuard g(device_);
    kernels::bernoulli(o, p, st);
  }
  void randint(const Tensor& o, int64_t lo, int64_t hi, PhiloxState st) override {
    detail::DeviceGuard g(device_);
    kernels::randint(o, lo, hi, st);
  }
  void multi_tensor_adamw(const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& m,
                          const std::vector<Tensor>& v, const std::vector<int64_t>& steps, double lr, double wd,
                          double beta1, double beta2, double eps) override {
    detail::DeviceGuard guard(device_);
    kernels::multi_tensor_adamw(p, g, m, v, steps, lr, wd, beta1, beta2, eps);
  }
  void multi_tensor_lamb(const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& m,
                         const std::vector<Tensor>& v, const std::vector<int64_t>& steps, double lr, double wd,
                         double beta1, double beta2, double eps, bool bias_correction) override {
    detail::DeviceGuard guard(device_);
    kernels::multi_tensor_lamb(p, g, m, v, steps, lr, wd, beta1, beta2, eps, bias_correction);
  }
  // Orders 2 and infinity of a one-dtype list in the multi-tensor kernels;
  // other orders and mixed dtypes compose elementwise kernels and reductions
  // (Backend's default).
  void multi_tensor_norm(const Tensor& o, const std::vector<Tensor>& ts, double norm_type) override {
    detail::DeviceGuard guard(device_);
    if (!kernels::multi_tensor_norm(o, ts, norm_type)) Backend::multi_tensor_norm(o, ts, norm_type);
  }
  void multi_tensor_all_finite(const Tensor& o, const std::vector<Tensor>& ts) override {
    detail::DeviceGuard guard(device_);
    kernels::multi_tensor_all_finite(o, ts);
  }
  // Note [cuDNN attention] (cuda/attention_cudnn.cpp).
  using Backend::sdpa_supported;
  bool sdpa_supported(DType dt, int64_t T, int64_t S, int64_t hs, bool mask, double p, bool causal) const override {
    return sdpa::supported(device_, dt, T, S, hs, mask, p, causal);
  }
  bool sdpa_forward(const Tensor& o, const Tensor& stats, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& mask, int64_t heads, double scale, double p, PhiloxState st, bool causal) override {
    return sdpa::forward(device_, o, stats, q, k, v, mask, heads, scale, p, st, causal);
  }
  void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& stats, const Tensor& mask,
                     int64_t heads, double scale, double p, PhiloxState st, bool causal) override {
    sdpa::backward(device_, dq, dk, dv, dout, q, k, v, o, stats, mask, heads, scale, p, st, causal);
  }
  // Note [cuBLASLt epilogues] (cuda/gemm_lt.cpp): the bias inside the GEMM,
  // and for the tanh GELU the activation too; the composition where cuBLASLt
  // has no epilogue kernel (float64, odd shapes). erf GELU: bias epilogue,
  // then kiln's erf kernel.
  void addmm(const Tensor& o, const Tensor& a, const Tensor& b, const Tensor& bias) override {
    detail::DeviceGuard g(device_);
    if (!kernels::addmm(o, a, b, bias)) Backend::addmm(o, a, b, bias);
  }
  void linear_gelu(const Tensor& o, const Tensor& pre, const Tensor& a, const Tensor& b, const Tensor& bias,
                   bool tanh) override {
    detail::DeviceGuard g(device_);
    if (tanh && kernels::linear_gelu_tanh(o, pre, a, b, bias)) return;
    Backend::linear_gelu(o, pre, a, b, bias, tanh);  // addmm (above), then the GELU kernel
  }

 private:
  // Same-shape, same-dtype, contiguous copy between this device and the CPU
  // (the contract of copy_from_cpu / copy_to_cpu); synchronous for the caller.
  static void check_host_copy(const Tensor& dst, const Tensor& src) {
    KILN_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.dtype() == src.dtype() &&
                   dst.sizes() == src.sizes(),
               "internal: CUDA host copy needs contiguous tensors of one shape and dtype, got ", dst.str(), " and ",
               src.str());
  }
  void host_copy(const Tensor& dst, const Tensor& src) {
    check_host_copy(dst, src);
    cuda::copy(dst, src, /*non_blocking=*/false);
  }

  int device_;
};

}  // namespace

Backend& detail::cuda_backend(int index) {
  static std::mutex mutex;
  static std::array<CudaBackend*, kMaxDevices> backends{};  // never destroyed, like the allocators
  const int count = device_count();
  KILN_CHECK(count > 0, "device cuda:", index, " requested, but no CUDA device is available (no GPU or no driver)");
  KILN_CHECK(index >= 0 && index < count, "device cuda:", index, " does not exist (", count, " CUDA devices)");
  std::lock_guard<std::mutex> lock(mutex);
  CudaBackend*& b = backends[static_cast<size_t>(index)];
  if (!b) b = new CudaBackend(index);
  return *b;
}

}  // namespace kiln::cuda
