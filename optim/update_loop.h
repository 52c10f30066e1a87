// Helpers for the fused optimizer loops (internal to optim/).
//
// for_each_block(n, fn) splits [0, n) into parallel chunks of kChunk elements
// and each chunk into blocks of kBlock elements (small enough that a block of
// every operand stays in L1 between the statements of a fused update). Block
// boundaries are multiples of kBlock whatever the thread count, so a loop
// whose result per element depends only on that element's data is
// bit-identical for any thread count, and sum_blocks() adds block partials in
// a fixed order (Note [Deterministic chunking]).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace kiln::optim::detail {

inline constexpr int64_t kBlock = 2048;
inline constexpr int64_t kChunk = 32 * kBlock;

// fn(begin, end) for every block of [0, n).
template <typename Fn>
void for_each_block(int64_t n, const Fn& fn) {
  parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i += kBlock) fn(i, std::min(e, i + kBlock));
  });
}

// Sum over the blocks of [0, n) of fn(begin, end) -> R, in block order
// (R: double, or any type with R{} as zero and operator+).
template <typename R = double, typename Fn>
R sum_blocks(int64_t n, const Fn& fn) {
  return parallel_reduce(
      n, kChunk, R{},
      [&](int64_t b, int64_t e) {
        R acc{};
        for (int64_t i = b; i < e; i += kBlock) acc = acc + fn(i, std::min(e, i + kBlock));
        return acc;
      },
      [](const R& a, const R& c) { return a + c; });
}

// Sum of x[i]^2 over [0, n) in float64 with eight interleaved accumulators
// combined in a fixed order: deterministic, and vectorisable without fast-math.
template <typename T>
double sum_squares(const T* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double v = static_cast<double>(x[i + k]);
      acc[k] += v * v;
    }
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// True when t is updated by the fused CPU loops: a CPU tensor, and the
// generic path not forced by set_force_generic_update() (optim/optimizer.h,
// Note [Fused and generic updates]).
bool use_fused_update(const Tensor& t);

// True when t is updated by the multi-tensor CUDA kernels (cuda/optim_kernels.cu):
// a CUDA tensor of float32 or float64, and the generic path not forced.
bool use_multi_tensor_update(const Tensor& t);

// Items of Optimizer::update_group split into the multi-tensor ones, bucketed
// by (device, dtype) in first-seen order, and the rest, in order.
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

// One bucket of split_items as the Adam-style multi-tensor kernels take it
// (AdamW and LAMB): parameters, gradients, the two moment buffers (created as
// zeros on a parameter's first update, as update() does) and step counts.
struct MomentBucket {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<int64_t> steps;
  // After the kernel wrote the buffers.
  void bump_buffer_versions() {
    for (size_t i = 0; i < exp_avgs.size(); ++i) {
      exp_avgs[i].bump_version();
      exp_avg_sqs[i].bump_version();
    }
  }
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
