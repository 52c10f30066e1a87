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
// Note [Sharded optimizer state]: with DDPOptions::shard_stage 1 or 2 (ZeRO
// stages 1 and 2; `--shard-optimizer`) each trainable parameter has one owner
// rank, and only its owner keeps optimizer state for it and updates it
// (optim::Optimizer::set_owned, from owned_mask()); gather_parameters() after
// the step sends every updated parameter from its owner to the other ranks
// (all_gatherv per bucket). Owners are assigned over the buckets' parameter
// order by cumulative size (a parameter goes to the rank whose 1/world share
// of the elements holds its middle), so each rank owns about 1/world of the
// elements and, within a bucket, rank r's parameters are one contiguous
// segment. Whole parameters, not slices: LAMB's per-parameter trust ratio and
// every optimizer's per-parameter state stay as they are.
//   stage 1: gradients are all-reduced as without sharding; every rank holds
//     all averaged gradients, and the owner's update is exactly the unsharded
//     one, so training is bitwise that of plain DDP.
//   stage 2: each bucket is reduce-scattered (reduce_scatter_raw with the
//     ranks' segment sizes) instead of all-reduced, so a rank receives only
//     the averaged gradients it owns; the others' .grad are dropped after the
//     bucket completes. Over 2 ranks each element is still a + b (bitwise the
//     all_reduce's); a gradient-norm clip must add the ranks' parts
//     (sharded_grad_norm) and differs from the unsharded norm in rounding.
// Memory per rank: optimizer state (AdamW: 8 bytes per float32 parameter)
// about 1/world of it; with stage 2 also the .grad tensors (the bucket
// buffers stay full size, as plain DDP's).
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
  int shard_stage = 0;  // 0: none; 1, 2: Note [Sharded optimizer state]
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

  // ---- Note [Sharded optimizer state] --------------------------------------
  int shard_stage() const { return options_.shard_stage; }
  // The rank that owns trainable parameter `t` (one of module()'s); every
  // rank owns everything when shard_stage() is 0. kiln::Error for a tensor
  // DDP does not reduce.
  int owner(const Tensor& t) const;
  // For each tensor: true when this rank updates it (not one of DDP's
  // parameters, e.g. frozen: true). For optim::Optimizer::set_owned.
  std::vector<bool> owned_mask(const std::vector<Tensor>& params) const;
  // Elements of the trainable parameters this rank owns (all when unsharded).
  int64_t owned_numel() const;
  // After optimizer.step(): every parameter from its owner to every rank (a
  // collective; nothing when shard_stage() is 0 or the world is one rank).
  void gather_parameters();

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
    int owner = 0;       // Note [Sharded optimizer state]
    int hook = 0;
    bool ready = false;  // its hook fired in the current synced backward
  };
  struct Bucket {
    std::vector<int> params;  // indices into params_
    Tensor flat;              // [numel], the bucket's dtype, on the group's device
    int pending = 0;          // params not yet ready
    WorkPtr work;             // its all-reduce once started (buckets < next_launch_)
    std::vector<int64_t> counts;  // elements each rank owns in it (sharded), in rank order
    Tensor shard;                 // stage 2: this rank's reduce-scattered segment
  };

  void check_same_module_on_all_ranks();
  void build_buckets();
  void on_grad_ready(int index);
  void launch_ready_buckets();
  void launch(int b);
  void reset_backward_state();
  void assign_owners();
  int64_t segment_offset(const Bucket& bucket) const;  // of this rank's segment in the flat buffer
  void copy_out_gradients(Bucket& bucket);
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
