// CPU kernel bodies, one free function per Backend method (core/backend.h
// documents the contract of each). CpuBackend (cpu_backend.cpp) forwards to them.
#pragma once

#include "core/backend.h"

namespace kiln::cpu {

// elementwise.cpp
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
void arange(const Tensor& out, double start, double step);
void unary(UnaryOp op, const Tensor& out, const Tensor& in);
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);

// reduce.cpp
void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const Shape& dims);

// gemm.cpp
void matmul(const Tensor& out, const Tensor& a, const Tensor& b);
// C(M,N) = A(M,K) @ B(K,N) (C += ... when accumulate), float32, row-major with
// leading dims; the one place that decides how float32 GEMM runs (oneDNN or
// OpenBLAS per shape: Note [GEMM library per shape]; Note [GEMM threading]).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate = false);
// out(M, N) = a(M, K) @ b(K, N) + bias(N), float32; out and bias contiguous.
void addmm(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
// The same for float64 (single-threaded BLAS; callers parallelise).
void dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
           const double* B, int64_t ldb, double* C, int64_t ldc, bool accumulate = false);
void set_blas_threads(int n);

// random.cpp (beside bernoulli, which draws the keep masks it applies)
// A bool keep mask's bytes (Note [Keep masks as bytes], core/cpu/random.cpp).
const uint8_t* keep_bytes(const Tensor& keep);
void masked_scale_add(const Tensor& out, const Tensor& x, const Tensor& keep, double scale, const Tensor& residual);

// attention.cpp
void attention(const Tensor& ctx, const Tensor& probs, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& mask, const Tensor& keep, int64_t heads, double scale, double keep_scale, bool causal);
void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dctx, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& keep, int64_t heads,
                        double scale, double keep_scale, bool causal);

// nn_kernels.cpp
void softmax(const Tensor& out, const Tensor& in, bool log);
void softmax_backward(const Tensor& dx, const Tensor& y, const Tensor& dy, bool log);
void layer_norm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                const Tensor& weight, const Tensor& bias, double eps);
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                         const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight);
void cross_entropy(const Tensor& loss, const Tensor& lse, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index, double smoothing);
void cross_entropy_backward(const Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                            const Tensor& lse, const Tensor& target, int64_t ignore_index, double smoothing);

// decoder_kernels.cpp
void rms_norm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, double eps);
void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                       const Tensor& weight);
void rotary_embedding(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t heads,
                      bool transpose);
void gated_activation(const Tensor& out, const Tensor& a, const Tensor& b, GatedAct act);
void gated_activation_backward(const Tensor& da, const Tensor& db, const Tensor& dy, const Tensor& a, const Tensor& b,
                               GatedAct act);

// index.cpp
void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

// gather_scatter.cpp
void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool add);

// sort_scan.cpp
void sort(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending);
void cumsum(const Tensor& out, const Tensor& in, int64_t dim, bool reverse);
void multinomial(const Tensor& out, const Tensor& probs, const Tensor& u, bool replacement);

// random.cpp
void uniform(const Tensor& out, double lo, double hi, PhiloxState st);
void normal(const Tensor& out, double mean, double std, PhiloxState st);
void bernoulli(const Tensor& out, double p, PhiloxState st);
void randint(const Tensor& out, int64_t lo, int64_t hi, PhiloxState st);

// multi_tensor.cpp (Note [Multi-tensor ops], ops/multi_tensor.h)
void multi_tensor_adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                        double eps);
void multi_tensor_lamb(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                       const std::vector<int64_t>& steps, double lr, double weight_decay, double beta1, double beta2,
                       double eps, bool bias_correction);
void multi_tensor_norm(const Tensor& out, const std::vector<Tensor>& tensors, double norm_type);
void multi_tensor_all_finite(const Tensor& out, const std::vector<Tensor>& tensors);

}  // namespace kiln::cpu
