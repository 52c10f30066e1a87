// Helpers for the optimizer loops (internal to optim/): the blocked CPU loops
// of the per-parameter fused updates (SGD, the clipping scale; core/block_loop.h
// cuts every fused loop, the multi-tensor CPU bodies' too, the same way), the
// choice between the fused or multi-tensor paths and the generic one, and the
// bucketing of a group's parameters for the multi-tensor ops (Note
// [Multi-tensor ops], ops/multi_tensor.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/block_loop.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace kiln::optim::detail {

using ::kiln::detail::for_each_block;
using ::kiln::detail::kBlock;
using ::kiln::detail::kChunk;
using ::kiln::detail::sum_blocks;

// True when t is updated by the fused CPU loops: a CPU tensor, and the
// generic path not forced by set_force_generic_update() (optim/optimizer.h,
// Note [Fused and generic updates]).
bool use_fused_update(const Tensor& t);

// True when t is updated (and its gradient measured and checked) by the
// multi-tensor ops (ops/multi_tensor.h): a CPU or CUDA tensor of float32 or
// float64, and the generic path not forced.
bool use_multi_tensor_update(const Tensor& t);

// Items of Optimizer::update_group split into the multi-tensor ones, bucketed
// by (device, dtype) in first-seen order, and the rest, in order. Each
// tensor's update does not depend on the others of its bucket, so bucketing
// changes no result.
template <typename Item>
struct SplitItems {
  std::vector<std::vector<const Item*>> buckets;
  std::vector<const Item*> rest;
};
template <typename Item>
SplitItems<Item> split_items(const std::vector<Item>& items) {
  SplitItems<Item> out;
  for (const Item& it : items) {
    if (!use_multi_tensor_update(it.param)) {
      out.rest.push_back(&it);
      continue;
    }
    auto same = [&](const std::vector<const Item*>& b) {
      return b.front()->param.device() == it.param.device() && b.front()->param.dtype() == it.param.dtype();
    };
    auto b = std::find_if(out.buckets.begin(), out.buckets.end(), same);
    if (b == out.buckets.end()) out.buckets.push_back({&it});
    else b->push_back(&it);
  }
  return out;
}

// One bucket of split_items as the Adam-style multi-tensor ops take it
// (AdamW and LAMB): parameters, gradients, the two moment buffers (created as
// zeros on a parameter's first update, as update() does) and step counts.
// The ops bump the versions of what they write.
struct MomentBucket {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<int64_t> steps;
};
template <typename Item>
MomentBucket gather_moment_bucket(const std::vector<const Item*>& bucket) {
  MomentBucket out;
  for (const Item* it : bucket) {
    auto& st = *it->state;
    if (st.buffers.empty()) {
      st.buffers.push_back(zeros(it->param.sizes(), TensorOptions(it->param.dtype(), it->param.device())));
      st.buffers.push_back(zeros(it->param.sizes(), TensorOptions(it->param.dtype(), it->param.device())));
    }
    out.params.push_back(it->param);
    out.grads.push_back(it->grad);
    out.exp_avgs.push_back(st.buffers[0]);
    out.exp_avg_sqs.push_back(st.buffers[1]);
    out.steps.push_back(st.step);
  }
  return out;
}

// f(TypeTag<T>{}) for T = float or double; other dtypes are a kiln::Error.
template <typename F>
decltype(auto) dispatch_float(DType t, const std::string& op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    default: fail(op, ": parameters must be float32 or float64, got ", dtype_name(t));
  }
}

}  // namespace kiln::optim::detail
