// Internal to cuda/attention_cudnn*.cpp (not installed, not part of the public
// API of cuda/attention_cudnn.h): the pieces of the cuDNN attention graphs
// (Note [cuDNN attention], cuda/attention_cudnn.cpp) that the plan cache and
// the calls there share -- the descriptor wrapper, the execution plan, the
// variant-pack uids, the problem one pair of plans is built for -- and the
// forward and backward graph builders (cuda/attention_cudnn_graph.cpp).
// Includes <cudnn.h>.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "cuda/attention_cudnn_rules.h"
#include "cuda/cuda_check.h"

namespace kiln::cuda::sdpa::internal {

inline constexpr int64_t kAlignment = 16;  // bytes; every tensor pointer handed to cuDNN is checked against it
static_assert(kAlignment == kArgsAlignment, "the argument slots are aligned as the tensors are declared");

// ---- backend descriptors ------------------------------------------------------

// One cuDNN backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { KILN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* value) {
    KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, value));
  }
  void set(cudnnBackendAttributeName_t name, const Desc& d) {
    cudnnBackendDescriptor_t raw = d.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void set_dtype(cudnnBackendAttributeName_t name, cudnnDataType_t t) { set(name, CUDNN_TYPE_DATA_TYPE, 1, &t); }
  void finalize() { KILN_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};
using DescPtr = std::shared_ptr<Desc>;

using Dims = std::array<int64_t, 4>;

// ---- plans ----------------------------------------------------------------------

// A finalized execution plan and everything it was built from.
struct Plan {
  std::vector<DescPtr> descs;  // graph, tensors, operations, engine configs: alive as long as the plan
  DescPtr plan;
  int64_t workspace = 0;
};

// Variant-pack uids of the tensors kiln hands over.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kBias, kScale, kSeed, kOffset, kDropScale, kDropScaleInv, kOne,
  kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum,
  kSeqQ, kSeqKV, kLowest, kRaggedQ, kRaggedK, kRaggedV, kRaggedO,
};

// The problem one pair of plans is built for.
struct Problem {
  cudnnDataType_t io = CUDNN_DATA_HALF;
  int64_t B = 0, NH = 0, T = 0, S = 0, HS = 0;  // T queries, S keys: the graph's lengths (buckets when ragged)
  // Batch and row strides (elements). Ragged: the batch strides are T (or S)
  // times the row stride, nominal (each call's offsets place the batches).
  int64_t q_b = 0, q_t = 0, k_b = 0, k_t = 0, v_b = 0, v_t = 0;
  bool mask = false;
  CausalMask causal = CausalMask::None;                         // Note [cuDNN causal masks]
  bool ragged = false;                                          // Note [cuDNN attention buckets]
  bool fwd_padding = false, bwd_padding = false, bwd_repad = false;  // Note [cuDNN version rules]
  int64_t offset_bytes = 4;                                     // of one ragged offset
  double p = 0.0;
  auto tie() const {
    return std::tie(io, B, NH, T, S, HS, q_b, q_t, k_b, k_t, v_b, v_t, mask, causal, ragged, fwd_padding,
                    bwd_padding, bwd_repad, offset_bytes, p);
  }
  bool operator<(const Problem& o) const { return tie() < o.tie(); }
  bool dropout() const { return p > 0.0; }
  DType dtype() const { return io == CUDNN_DATA_HALF ? DType::Float16 : DType::BFloat16; }

  // (B, NH, L, HS) views of (B, L, C) memory with the given batch and row strides.
  Dims bhsd(int64_t sb, int64_t st) const { return {sb, HS, st, 1}; }
  Dims bhds(int64_t sb, int64_t st) const { return {sb, HS, 1, st}; }  // the transpose (B, NH, HS, L)
  Dims q_dims() const { return {B, NH, T, HS}; }    // q, o and their gradients
  Dims kv_dims() const { return {B, NH, S, HS}; }   // k, v and theirs
  Dims kv_t_dims() const { return {B, NH, HS, S}; }  // K^T, V^T
  Dims scores() const { return {B, NH, T, S}; }
  Dims scores_t() const { return {B, NH, S, T}; }
  Dims scores_t_strides() const { return {NH * T * S, T * S, 1, S}; }  // (.., S, T) view of (.., T, S)
  Dims out_strides() const { return bhsd(T * NH * HS, NH * HS); }
  Dims stats_dims() const { return {B, NH, T, 1}; }
  Dims bias_dims() const { return {B, 1, T, S}; }
  Dims bias_strides() const { return {S, S, 0, 1}; }  // (B, 1, T, S), stride 0 over queries
};

// The forward and backward graphs of a problem (Note [cuDNN attention]),
// finalized with the first engine that builds; nullptr: no engine supports
// the graph. The caller holds the handle's lock (Note [cuDNN handle lock],
// cuda/attention_cudnn.cpp).
std::unique_ptr<Plan> build_forward(cudnnHandle_t h, const Problem& pr);
std::unique_ptr<Plan> build_backward(cudnnHandle_t h, const Problem& pr);

}  // namespace kiln::cuda::sdpa::internal
