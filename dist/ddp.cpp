// DistributedDataParallel (dist/ddp.h): the module check and broadcast at
// construction, the gradient buckets (Note [Gradient buckets]), the hooks that
// start their all-reduces during backward, and finish_gradient_sync().
#include "dist/ddp.h"

#include <cstdio>
#include <unordered_set>

#include "autograd/grad_mode.h"

namespace kiln::dist {
namespace {

// FNV-1a over the text: a cheap fingerprint of the module's structure.
int64_t fingerprint(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, ProcessGroupPtr group, const DDPOptions& options)
    : module_(module), group_(std::move(group)), options_(options) {
  KILN_CHECK(group_ != nullptr, "DistributedDataParallel: no process group (call dist::init_process_group())");
  KILN_CHECK(options_.bucket_cap_bytes > 0, "DistributedDataParallel: bucket_cap_bytes must be > 0, got ",
             options_.bucket_cap_bytes);
  KILN_CHECK(options_.shard_stage >= 0 && options_.shard_stage <= 2,
             "DistributedDataParallel: shard_stage must be 0, 1 or 2, got ", options_.shard_stage);
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [name, t] : module_.named_parameters()) {
    if (!t.requires_grad() || !seen.insert(t.impl_ptr().get()).second) continue;
    KILN_CHECK(t.is_leaf(), "DistributedDataParallel: parameter '", name, "' is not a leaf tensor");
    KILN_CHECK(t.device() == group_->device(), "DistributedDataParallel: parameter '", name, "' is on ",
               t.device().str(), " but the ", group_->backend(), " process group reduces ", group_->device().str(),
               " tensors");
    params_.push_back(Param{name, t});
  }
  check_same_module_on_all_ranks();
  broadcast_parameters();
  build_buckets();
  assign_owners();
  for (size_t i = 0; i < params_.size(); ++i) {
    const int index = static_cast<int>(i);
    params_[i].hook = params_[i].tensor.register_post_accumulate_grad_hook([this, index](const Tensor&) {
      on_grad_ready(index);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (Param& p : params_) p.tensor.remove_hook(p.hook);
  // Buckets still in flight (a backward without finish_gradient_sync) are
  // completed: the other ranks started them too. After a failure they are
  // dropped instead (Work::~Work).
  for (Bucket& b : buckets_) {
    if (!b.work || !group_->failure().empty() || group_->is_shut_down()) continue;
    try {
      b.work->wait();
    } catch (const Error&) {
    }
  }
}

// ---- construction -------------------------------------------------------------

void DistributedDataParallel::check_same_module_on_all_ranks() {
  std::string text;
  int64_t count = 0;
  auto add = [&](const nn::NamedTensors& tensors) {
    for (auto& [name, t] : tensors) {
      text += name + ":" + shape_str(t.sizes()) + ":" + dtype_name(t.dtype()) + ";";
      ++count;
    }
  };
  add(module_.named_parameters());
  if (options_.broadcast_buffers) add(module_.named_buffers());
  Tensor mine = empty_tensor({2}, DType::Int64, kCPU);
  mine.data_ptr<int64_t>()[0] = count;
  mine.data_ptr<int64_t>()[1] = fingerprint(text);
  // Gathered where the group's collectives run (a GPU for nccl), read on the host.
  Tensor all = group_->all_gather(mine.to(group_->device())).to(kCPU);  // [world, 2]
  const int64_t* a = all.data_ptr<int64_t>();
  for (int r = 1; r < group_->size(); ++r)
    KILN_CHECK(a[2 * r] == a[0] && a[2 * r + 1] == a[1], "DistributedDataParallel: rank ", r, " holds a different module (",
               a[2 * r], " tensors, fingerprint ", a[2 * r + 1], ") than rank 0 (", a[0], " tensors, fingerprint ", a[1],
               "); every rank must build the same model (names, shapes, dtypes)");
}

void DistributedDataParallel::broadcast_parameters() {
  NoGradGuard no_grad;
  std::vector<WorkPtr> works;
  for (auto& [name, t] : module_.named_parameters()) works.push_back(group_->broadcast_async(t, 0));
  if (options_.broadcast_buffers)
    for (auto& [name, t] : module_.named_buffers()) works.push_back(group_->broadcast_async(t, 0));
  for (WorkPtr& w : works) w->wait();
}

void DistributedDataParallel::build_buckets() {
  // Note [Gradient buckets]: reverse registration order, at most the cap each.
  int64_t bytes = 0, numel = 0;
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {
    Param& p = params_[i];
    const int64_t pbytes = p.tensor.numel() * static_cast<int64_t>(p.tensor.element_size());
    const bool fits = !buckets_.empty() && !buckets_.back().params.empty() &&
                      params_[buckets_.back().params[0]].tensor.dtype() == p.tensor.dtype() &&
                      bytes + pbytes <= options_.bucket_cap_bytes;
    if (!fits) {
      buckets_.emplace_back();
      bytes = numel = 0;
    }
    Bucket& b = buckets_.back();
    p.bucket = static_cast<int>(buckets_.size()) - 1;
    p.offset = numel;
    b.params.push_back(i);
    bytes += pbytes;
    numel += p.tensor.numel();
  }
  for (Bucket& b : buckets_) {
    int64_t n = 0;
    for (int i : b.params) n += params_[i].tensor.numel();
    b.flat = empty_tensor({n}, params_[b.params[0]].tensor.dtype(), group_->device());
    b.pending = static_cast<int>(b.params.size());
  }
}

std::vector<DistributedDataParallel::BucketInfo> DistributedDataParallel::buckets() const {
  std::vector<BucketInfo> out;
  for (const Bucket& b : buckets_) {
    BucketInfo info;
    for (int i : b.params) info.names.push_back(params_[i].name);
    info.numel = b.flat.numel();
    info.dtype = b.flat.dtype();
    info.bytes = info.numel * static_cast<int64_t>(element_size(info.dtype));
    out.push_back(std::move(info));
  }
  return out;
}

std::string DistributedDataParallel::bucket_label(int b) const {
  const Bucket& bucket = buckets_[b];
  return kiln::detail::str_cat(b + 1, " of ", buckets_.size(), " (", bucket.params.size(), " parameters, ",
                               mb(bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size())), " ",
                               dtype_name(bucket.flat.dtype()), ")");
}

// ---- during backward ------------------------------------------------------------

void DistributedDataParallel::on_grad_ready(int index) {
  if (!sync_) return;
  Param& p = params_[index];
  KILN_CHECK(!p.ready, "DistributedDataParallel: parameter '", p.name,
             "' received a second gradient before finish_gradient_sync(); call finish_gradient_sync() after every "
             "synced backward (use no_sync() for gradient-accumulation steps)");
  p.ready = true;
  if (--buckets_[p.bucket].pending == 0) launch_ready_buckets();
  // Drive the collectives in flight (MPI progresses only inside MPI calls).
  for (int b = 0; b < next_launch_; ++b)
    if (buckets_[b].work) buckets_[b].work->test();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < static_cast<int>(buckets_.size()) && buckets_[next_launch_].pending == 0)
    launch(next_launch_++);
}

void DistributedDataParallel::launch(int b) {
  Bucket& bucket = buckets_[b];
  if (group_->size() == 1) return;  // the average over one rank is the gradient itself
  NoGradGuard no_grad;
  for (int i : bucket.params) {
    const Param& p = params_[i];
    Tensor slot = bucket.flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.sizes());
    if (p.tensor.grad().defined()) slot.copy_(p.tensor.grad());
    else slot.zero_();
  }
  try {
    if (options_.shard_stage == 2) {  // Note [Sharded optimizer state]
      bucket.shard = empty_tensor({bucket.counts[static_cast<size_t>(group_->rank())]}, bucket.flat.dtype(),
                                  group_->device());
      bucket.work = group_->reduce_scatter_raw(bucket.flat.raw_data(), bucket.shard.raw_data(), bucket.counts,
                                               bucket.flat.dtype(), ReduceOp::Avg);
      bucket.work->keep_alive(bucket.flat);
      bucket.work->keep_alive(bucket.shard);
    } else {
      bucket.work = group_->all_reduce_async(bucket.flat, ReduceOp::Avg);
    }
  } catch (const Error& e) {
    fail("DistributedDataParallel: gradient bucket ", bucket_label(b), ": ", e.what());
  }
}

// ---- after backward ---------------------------------------------------------------

void DistributedDataParallel::finish_gradient_sync() {
  if (!sync_) return;
  // Parameters whose hook did not fire: accumulated earlier (a .grad from
  // no_sync steps), or unused.
  std::vector<std::string> missing;
  for (Param& p : params_) {
    if (p.ready) continue;
    if (!p.tensor.grad().defined() && options_.unused_parameters == UnusedParameters::Error) {
      missing.push_back(p.name);
      continue;
    }
    p.ready = true;
    --buckets_[p.bucket].pending;
  }
  if (!missing.empty()) {
    // Complete what is in flight (the other ranks started it too), then report.
    for (int b = 0; b < next_launch_; ++b) {
      try {
        if (buckets_[b].work) buckets_[b].work->wait();
      } catch (const Error&) {
      }
    }
    reset_backward_state();
    std::string names;
    for (size_t i = 0; i < missing.size() && i < 10; ++i) names += (i ? ", " : "") + missing[i];
    fail("DistributedDataParallel: ", missing.size(), " parameter(s) got no gradient before finish_gradient_sync(): ",
         names, missing.size() > 10 ? ", ..." : "",
         ". Either the loss does not use them on this rank or no backward ran; set DDPOptions::unused_parameters = "
         "UnusedParameters::Zero to reduce them as zeros");
  }
  launch_ready_buckets();
  KILN_CHECK(next_launch_ == static_cast<int>(buckets_.size()), "internal: DistributedDataParallel launched ",
             next_launch_, " of ", buckets_.size(), " buckets");

  NoGradGuard no_grad;
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    Bucket& bucket = buckets_[b];
    if (bucket.work) {
      try {
        bucket.work->wait();
      } catch (const Error& e) {
        reset_backward_state();
        fail("DistributedDataParallel: gradient bucket ", bucket_label(b), ": ", e.what());
      }
    }
    copy_out_gradients(bucket);
  }
  reset_backward_state();
}

// The reduced gradients of a completed bucket into .grad: every parameter's
// (all_reduce), or only this rank's, the others' dropped (stage 2).
void DistributedDataParallel::copy_out_gradients(Bucket& bucket) {
  const bool scattered = options_.shard_stage == 2 && group_->size() > 1;
  const int64_t mine = scattered ? segment_offset(bucket) : 0;
  for (int i : bucket.params) {
    Param& p = params_[i];
    Tensor& grad = p.tensor.mutable_grad();
    if (group_->size() == 1) {
      if (!grad.defined()) grad = zeros_like(p.tensor.detach());  // UnusedParameters::Zero
      continue;
    }
    if (scattered && p.owner != group_->rank()) {
      grad = Tensor();
      continue;
    }
    Tensor slot = scattered ? bucket.shard.narrow(0, p.offset - mine, p.tensor.numel()).view(p.tensor.sizes())
                            : bucket.flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.sizes());
    if (grad.defined()) grad.copy_(slot);
    else grad = slot.clone();
  }
  bucket.shard = Tensor();
}

void DistributedDataParallel::reset_backward_state() {
  for (Param& p : params_) p.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.work.reset();
    b.shard = Tensor();
  }
  next_launch_ = 0;
}

// ---- no_sync -------------------------------------------------------------------------

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() { return NoSync(this); }

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel* ddp) : ddp_(ddp), previous_(ddp->sync_) {
  bool in_progress = false;
  for (const Param& p : ddp->params_) in_progress = in_progress || p.ready;
  KILN_CHECK(!ddp->sync_ || !in_progress,
             "DistributedDataParallel::no_sync: a synced backward is waiting for finish_gradient_sync()");
  ddp->sync_ = false;
}

DistributedDataParallel::NoSync::NoSync(NoSync&& o) noexcept : ddp_(o.ddp_), previous_(o.previous_) {
  o.ddp_ = nullptr;
}

DistributedDataParallel::NoSync::~NoSync() {
  if (ddp_ != nullptr) ddp_->sync_ = previous_;
}

}  // namespace kiln::dist
