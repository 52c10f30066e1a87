// Internal to the CUDA backend (not installed): the kernel entry points, one
// per Backend method (core/backend.h states each contract; the CPU twin in
// core/cpu/ is each one's oracle), and the helpers they share. Host code only:
// included by the .cu kernel files and by the backend's .cpp files.
//
// Every entry point runs on the device of its tensors (the caller has made it
// current with DeviceGuard) and queues its work on that device's current
// stream (Note [Current stream], cuda/stream.h); none synchronises the host.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <vector>

#include "core/backend.h"
#include "cuda/cuda_check.h"

namespace kiln::cuda {
namespace detail {

// The calling thread's current stream on `device` (Note [Current stream]).
cudaStream_t current_cuda_stream(int device);
// Multiprocessor count of `device` (cached).
int sm_count(int device);
// The caching allocator behind CUDA tensors of `device` (cuda/memory.cpp).
Allocator& device_allocator(int device);

// Makes `device` the current CUDA device for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace detail

namespace kernels {

// elementwise_copy.cu: dst <- src with dtype conversion, any strides; fill; arange.
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
void arange(const Tensor& out, double start, double step);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// elementwise_unary.cu / elementwise_binary.cu
void unary(UnaryOp op, const Tensor& out, const Tensor& in);
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
// reduce.cu
void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims);
// gemm_lt.cpp (cuBLASLt) and gemm_int.cu (integer fallback)
void matmul(const Tensor& out, const Tensor& a, const Tensor& b);
void matmul_integer(const Tensor& out, const Tensor& a, const Tensor& b);
// gemm_lt.cpp epilogues (Note [cuBLASLt epilogues]); 2-D operands as Backend::addmm
// takes them. false: no epilogue kernel for this problem, nothing was queued.
bool addmm(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
// out = gelu_tanh(a @ b + bias), preact = a @ b + bias (cuBLASLt's GELU is the tanh form)
bool linear_gelu_tanh(const Tensor& out, const Tensor& preact, const Tensor& a, const Tensor& b, const Tensor& bias);
// nn_kernels.cu
void softmax(const Tensor& out, const Tensor& in, bool log);
void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy, bool log);
// out = softmax(x * scale + mask[row / (R / Rm)]) per row; x, out (R, C), mask (Rm, C) or undefined
void scaled_masked_softmax(const Tensor& out, const Tensor& x, const Tensor& mask, double scale);
void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps);
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                         const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight);
void cross_entropy(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index, double smoothing);
void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits, const Tensor& lse,
                            const Tensor& target, int64_t ignore_index, double smoothing);
// decoder_kernels.cu: the decoder ops (ops/decoder_ops.h)
void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps);
void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                       const Tensor& weight);
void rotary_embedding(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads,
                      bool transpose);
void gated_activation(const Tensor& out, const Tensor& a, const Tensor& b, GatedAct act);
void gated_activation_backward(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a, const Tensor& b,
                               GatedAct act);
// index.cu
void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
// Note [Lazy index checks]. check_index: false when it cannot
// take another set of names (the caller checks on the host instead).
bool check_index(const Tensor& index, int64_t limit, std::optional<int64_t> ignore, const IndexCheck& what,
                 const Tensor& counted);
// Queues a copy of `device`'s error record on the current stream; undefined
// when no check was ever queued there.
Tensor index_errors_probe(int device);
// Once that stream has drained: throws the error the copy holds, if any.
void index_errors_raise(int device, const Tensor& snapshot);
// Both, with a wait for the current stream between them.
void raise_index_errors(int device);
// gather_scatter.cu
void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool add);
// sort_scan.cu
void sort(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending);
void cumsum(const Tensor& out, const Tensor& in, int64_t dim, bool reverse);
void multinomial(const Tensor& out, const Tensor& probs, const Tensor& u, bool replacement);
// random.cu
void uniform(const Tensor& out, double lo, double hi, PhiloxState st);
void normal(const Tensor& out, double mean, double std, PhiloxState st);
void bernoulli(const Tensor& out, double p, PhiloxState st);
void randint(const Tensor& out, int64_t lo, int64_t hi, PhiloxState st);
// optim_kernels.cu: the multi-tensor ops (Note [Multi-tensor launches]).
void multi_tensor_adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                        double eps);
void multi_tensor_lamb(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                       double eps, bool bias_correction);
// Orders 2 and infinity of a one-dtype list; false (nothing queued) for the rest.
bool multi_tensor_norm(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type);
void multi_tensor_all_finite(const Tensor& out, const std::vector<Tensor>& tensors);

}  // namespace kernels
}  // namespace kiln::cuda
