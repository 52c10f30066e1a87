// DistributedDataParallel's sharded optimizer state (Note [Sharded optimizer
// state] in dist/ddp.h): who owns each parameter, and the all-gather of the
// updated parameters after the step. The stage-2 reduce-scatter of the
// gradients is in ddp.cpp's launch() and copy_out_gradients().
#include <algorithm>

#include "autograd/grad_mode.h"
#include "dist/ddp.h"

namespace kiln::dist {

void DistributedDataParallel::assign_owners() {
  const int world = group_->size();
  int64_t total = 0;
  for (const Param& p : params_) total += p.tensor.numel();
  int64_t before = 0;  // elements ahead of the parameter in bucket order
  for (Bucket& bucket : buckets_) {
    bucket.counts.assign(static_cast<size_t>(world), 0);
    for (int i : bucket.params) {
      Param& p = params_[i];
      const int64_t n = p.tensor.numel();
      // The rank whose share [r T / world, (r + 1) T / world) holds the middle (x2 to stay in integers).
      const int64_t middle2 = 2 * before + n;
      p.owner = options_.shard_stage == 0 || total == 0
                    ? group_->rank()
                    : static_cast<int>(std::min<int64_t>(world - 1, middle2 * world / (2 * total)));
      bucket.counts[static_cast<size_t>(options_.shard_stage == 0 ? 0 : p.owner)] += n;
      before += n;
    }
  }
}

int64_t DistributedDataParallel::segment_offset(const Bucket& bucket) const {
  int64_t off = 0;
  for (int r = 0; r < group_->rank(); ++r) off += bucket.counts[static_cast<size_t>(r)];
  return off;
}

int DistributedDataParallel::owner(const Tensor& t) const {
  for (const Param& p : params_)
    if (p.tensor.impl_ptr() == t.impl_ptr()) return p.owner;
  fail("DistributedDataParallel::owner: ", t.str(), " is not a trainable parameter of the module");
}

std::vector<bool> DistributedDataParallel::owned_mask(const std::vector<Tensor>& params) const {
  std::vector<bool> out;
  for (const Tensor& t : params) {
    auto it = std::find_if(params_.begin(), params_.end(),
                           [&](const Param& p) { return p.tensor.impl_ptr() == t.impl_ptr(); });
    out.push_back(it == params_.end() || it->owner == group_->rank());
  }
  return out;
}

int64_t DistributedDataParallel::owned_numel() const {
  int64_t n = 0;
  for (const Param& p : params_)
    if (p.owner == group_->rank()) n += p.tensor.numel();
  return n;
}

void DistributedDataParallel::gather_parameters() {
  if (options_.shard_stage == 0 || group_->size() == 1) return;
  NoGradGuard no_grad;
  std::vector<std::pair<int, WorkPtr>> works;
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    Bucket& bucket = buckets_[b];
    Tensor mine = empty_tensor({bucket.counts[static_cast<size_t>(group_->rank())]}, bucket.flat.dtype(),
                               group_->device());
    const int64_t off = segment_offset(bucket);
    for (int i : bucket.params) {
      const Param& p = params_[i];
      if (p.owner == group_->rank())
        mine.narrow(0, p.offset - off, p.tensor.numel()).copy_(p.tensor.detach().reshape({-1}));
    }
    try {
      WorkPtr w = group_->all_gatherv_raw(mine.raw_data(), bucket.flat.raw_data(), bucket.counts, bucket.flat.dtype());
      w->keep_alive(mine);
      w->keep_alive(bucket.flat);
      works.emplace_back(b, std::move(w));
    } catch (const Error& e) {
      fail("DistributedDataParallel: gathering the parameters of bucket ", bucket_label(b), ": ", e.what());
    }
  }
  for (auto& [b, w] : works) {
    try {
      w->wait();
    } catch (const Error& e) {
      fail("DistributedDataParallel: gathering the parameters of bucket ", bucket_label(b), ": ", e.what());
    }
    const Bucket& bucket = buckets_[b];
    for (int i : bucket.params) {
      Param& p = params_[i];
      if (p.owner == group_->rank()) continue;
      Tensor dst = p.tensor;
      dst.copy_(bucket.flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.sizes()));
    }
  }
}

}  // namespace kiln::dist
