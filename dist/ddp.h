// DistributedDataParallel: data-parallel training of an nn::Module, as
// torch.nn.parallel.DistributedDataParallel. Every rank holds a replica, runs
// forward and backward on its own shard of the batch (data::DistributedSampler),
// and DDP averages the gradients over the ranks, so after
// finish_gradient_sync() every replica holds the gradient of the mean loss
// over the global batch and the optimizer steps keep the replicas identical.
//
// Use (the module's forward is called directly; DDP only watches gradients):
//
//   auto pg = dist::init_process_group();            // mpi under mpirun, else single
//   dist::DistributedDataParallel ddp(model, pg);    // broadcasts rank 0's weights
//   for (...) {
//     for (int micro = 0; micro < accum; ++micro) {
//       auto guard = micro + 1 < accum ? ddp.no_sync() : dist::DistributedDataParallel::NoSync();
//       model.forward(...).loss.backward();          // buckets all-reduced as they fill
//     }
//     ddp.finish_gradient_sync();                    // waits for the buckets; grads averaged
//     optimizer.step(); optimizer.zero_grad();
//   }
//
// Note [Gradient buckets]: the parameters that require grad are packed, in
// reverse registration order (roughly the order backward produces their
// gradients), into buckets of at most bucket_cap_bytes (one dtype per bucket;
// a parameter larger than the cap gets a bucket of its own). A
// post-accumulate-grad hook on each parameter marks it ready; when the last
// parameter of a bucket is ready its gradients are copied into the bucket's
// flat buffer and an asynchronous all_reduce(Avg) starts, while backward goes
// on. Buckets start strictly in index order (a ready bucket waits for the ones
// before it), so every rank issues the same collectives in the same order
// whatever its hook order. finish_gradient_sync() starts any bucket not yet
// started, waits for all of them in order and copies the averaged values back
// into the .grad tensors. On the CPU an MPI collective progresses while the
// hooks poll it; a CUDA version would copy and reduce on a side stream joined
// to the compute stream by events in the same two places (start, finish).
//
// Note [DDP determinism]: each element's result is (MPI's fixed-order sum over
// the ranks) / world_size, independent of which bucket the element travels
// in, so any bucket size gives bitwise the same gradients.
//
// Gradient accumulation: under a no_sync() guard the hooks do nothing and
// gradients accumulate locally; the next backward outside the guard (plus
// finish_gradient_sync) averages the accumulated sums, the same as syncing
// every micro-step but with one all-reduce.
//
// Unused parameters: a parameter that has no .grad when finish_gradient_sync()
// runs is an error naming it (UnusedParameters::Error), or is reduced as zeros
// and ends with a zero .grad on every rank (UnusedParameters::Zero). A
// parameter whose hook did not fire in this backward but that holds a .grad
// from earlier no_sync micro-steps is reduced with that .grad.
//
// Invariants: build DDP after Module::to() (which replaces parameter tensors)
// and before the optimizer steps; every rank builds the same module (checked
// at construction: same parameter names, shapes and dtypes); one
// finish_gradient_sync() per synced backward (a second synced backward before
// it is an error naming the parameter).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dist/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::dist {

enum class UnusedParameters { Error, Zero };

struct DDPOptions {
  int64_t bucket_cap_bytes = int64_t{25} << 20;  // 25 MiB
  bool broadcast_buffers = true;                 // buffers as well as parameters at construction
  UnusedParameters unused_parameters = UnusedParameters::Error;
};

class DistributedDataParallel {
 public:
  // Checks that every rank has the same module, broadcasts rank 0's
  // parameters (and buffers) and registers the gradient hooks.
  DistributedDataParallel(nn::Module& module, ProcessGroupPtr group, const DDPOptions& options = {});
  ~DistributedDataParallel();  // removes the hooks
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() const { return module_; }
  ProcessGroup& process_group() const { return *group_; }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }
  const DDPOptions& options() const { return options_; }

  // RAII: while alive, backward does not all-reduce (gradient accumulation).
  // A default-constructed NoSync does nothing, so a loop can pick either.
  class [[nodiscard]] NoSync {
   public:
    NoSync() = default;
    ~NoSync();
    NoSync(NoSync&& o) noexcept;
    NoSync& operator=(NoSync&&) = delete;
    NoSync(const NoSync&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSync(DistributedDataParallel* ddp);
    DistributedDataParallel* ddp_ = nullptr;
    bool previous_ = true;
  };
  NoSync no_sync();
  bool sync_enabled() const { return sync_; }

  // After each synced backward: starts what is left, waits for every bucket
  // (kiln::Error naming the bucket and collective on a timeout) and writes
  // the averaged gradients into .grad. Does nothing while sync is disabled.
  void finish_gradient_sync();

  // rank 0's parameters (and buffers, when options.broadcast_buffers) to
  // every rank, e.g. after rank 0 loaded a checkpoint. A collective.
  void broadcast_parameters();

  struct BucketInfo {
    std::vector<std::string> names;  // full parameter names, in bucket order
    int64_t numel = 0;
    int64_t bytes = 0;
    DType dtype = DType::Float32;
  };
  std::vector<BucketInfo> buckets() const;

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    int bucket = 0;
    int64_t offset = 0;  // in the bucket's flat buffer
    int hook = 0;
    bool ready = false;  // its hook fired in the current synced backward
  };
  struct Bucket {
    std::vector<int> params;  // indices into params_
    Tensor flat;              // [numel], the bucket's dtype, on the group's device
    int pending = 0;          // params not yet ready
    WorkPtr work;             // its all-reduce once started (buckets < next_launch_)
  };

  void check_same_module_on_all_ranks();
  void build_buckets();
  void on_grad_ready(int index);
  void launch_ready_buckets();
  void launch(int b);
  void reset_backward_state();
  std::string bucket_label(int b) const;

  nn::Module& module_;
  ProcessGroupPtr group_;
  DDPOptions options_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  int next_launch_ = 0;  // buckets before it are launched
  bool sync_ = true;
};

using DDP = DistributedDataParallel;

}  // namespace kiln::dist
