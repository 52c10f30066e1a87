// ProcessGroup: the ranks of a data-parallel job and the collectives between
// them (all_reduce, broadcast, all_gather, reduce_scatter, barrier), as
// torch.distributed.
//
// Backends:
//   "mpi"     CPU tensors over MPI (OpenMPI); rank and size come from mpirun.
//   "single"  one process (world size 1) started without mpirun: every
//             collective is the identity (all_gather copies).
//   "nccl"    CUDA memory over NCCL, its unique id broadcast over the "mpi"
//             (or "single") group; compiled only with CUDA and NCCL
//             (dist/nccl_process_group.cpp), else "built without CUDA".
// init_process_group() picks "mpi" when the process was started by mpirun
// (or another MPI launcher) and "single" otherwise, so the same program runs
// as `kiln pretrain ...` and `mpirun -np 4 kiln pretrain ...`.
//
// Contract of every collective: all ranks of the group call the same
// collectives in the same order with tensors of the same shape and dtype
// (not checked: a mismatch is an MPI error, wrong data or a timeout). Tensors
// must live on device() (cpu for mpi/single). Collectives are called from one
// thread at a time (MPI_THREAD_SERIALIZED).
//
// Note [Collective timeout]: every collective is started non-blocking
// (MPI_Iallreduce, ..., or NCCL on its own stream) and its Work is polled
// against a deadline: a dead, stuck or diverging peer makes wait() throw
// kiln::Error naming the collective, the bytes, the rank and the timeout
// instead of hanging. The timeout is ProcessGroupOptions::timeout_seconds, or
// the environment variable KILN_DIST_TIMEOUT (seconds), or 300 s. After a
// timeout the group is unusable (an abandoned MPI request may still write into
// its buffer): every later collective throws at once, and
// destroy_process_group() aborts the whole MPI job (MPI_Abort) rather than
// finalising, so no rank is left waiting.
//
// Note [Naming the lost rank]: a timeout alone cannot say which peer is at
// fault, so before giving up a rank probes the others: the mpi group keeps a
// second communicator on which every rank, while it waits in a collective
// (Work::wait), answers "ping" messages. The timed-out rank pings every
// other rank and waits min(5, max(1, timeout / 10)) seconds for the answers;
// the error then names the ranks that did not answer (dead, stopped, or busy
// outside any collective, e.g. still computing) or, when all answered, says
// that they are alive but waiting in another collective (diverging control
// flow). A killed process is seen sooner by mpirun, which ends the job and
// names it ("mpirun noticed that process rank 1 ... exited on signal 9").
// The nccl group cannot probe (its errors name only the collective).
//
// Note [Deterministic reductions]: an all_reduce's sum order per element is
// fixed by MPI for a given world size and message size, so the same inputs
// give the same bits on every run. ReduceOp::Avg is a Sum followed by a
// division by size() (not a multiplication by 1/size).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::dist {

enum class ReduceOp { Sum, Avg, Max, Min, Product };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...

class ProcessGroup;

// A collective in flight, returned by the *_async calls. The buffers it reads
// and writes are kept alive until it completes.
class Work {
 public:
  virtual ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Non-blocking: true once the collective has completed on this rank (and
  // its finishing step, e.g. Avg's division, has run). Also drives progress:
  // MPI moves a non-blocking collective forward only inside MPI calls.
  bool test();
  // Blocks until completion; kiln::Error after the group's timeout (Note
  // [Collective timeout]) or when the backend reports a failure.
  void wait();
  bool completed() const { return done_; }
  // "all_reduce(sum) of 4096 bytes float32 (mpi, rank 0 of 2)"
  const std::string& description() const { return what_; }

  // Used by ProcessGroup: tensors to keep alive, a step run once on completion.
  void keep_alive(Tensor t) { keep_.push_back(std::move(t)); }
  void then(std::function<void()> fn) { finish_.push_back(std::move(fn)); }

 protected:
  Work(std::shared_ptr<ProcessGroup> group, std::string what);
  // Backend: has the operation completed? Throws kiln::Error for a backend failure.
  virtual bool poll() = 0;
  // Backend: called once when wait() gives up (e.g. abort the NCCL communicator).
  virtual void on_timeout() {}

  std::shared_ptr<ProcessGroup> group_;

 private:
  void complete();
  std::string what_;
  bool done_ = false;
  std::vector<Tensor> keep_;
  std::vector<std::function<void()>> finish_;
};

using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;  // "mpi", "single", "nccl"
  // Where the tensors of this group's collectives live.
  virtual Device device() const { return kCPU; }
  double timeout_seconds() const { return timeout_s_; }
  void set_timeout_seconds(double seconds);  // > 0

  // ---- collectives on tensors (contiguous or not; in place) ---------------
  // A tensor that requires grad is written only under NoGradGuard (as an
  // optimizer step; Note [In-place ops and autograd]).
  // Every rank's t becomes op over all ranks' t. Sum/Max/Min/Product/Avg on
  // float32/float64/int32/int64 (Avg: floating only). The mpi backend has no
  // float16/bfloat16 reductions (convert to float32).
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  WorkPtr all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  // Every rank's t becomes root's t (any dtype).
  void broadcast(const Tensor& t, int root = 0);
  WorkPtr broadcast_async(const Tensor& t, int root = 0);
  // [size(), *t.sizes()]: row r is rank r's t (any dtype).
  Tensor all_gather(const Tensor& t);
  // t is [size(), *rest] on every rank; returns [*rest]: op over all ranks'
  // t[rank()] (torch.distributed.reduce_scatter_tensor). Same dtypes and ops
  // as all_reduce. With a Sum over 2 ranks each element is a + b, as in
  // all_reduce (bitwise equal); over more ranks MPI may add in another order.
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  // Returns when every rank has entered the barrier.
  void barrier();

  // ---- the same over raw memory on device() --------------------------------
  // `count` elements of `dtype` at `data`; the caller keeps the memory alive
  // until the Work completes. For memory kiln tensors do not hold yet (CUDA
  // buffers in `kiln bench allreduce`) and for the tensor forms above.
  WorkPtr all_reduce_raw(void* data, int64_t count, DType dtype, ReduceOp op);
  WorkPtr broadcast_raw(void* data, int64_t count, DType dtype, int root);
  WorkPtr all_gather_raw(const void* in, void* out, int64_t count, DType dtype);
  // Uneven forms (MPI_Reduce_scatter, MPI_Allgatherv; NCCL: grouped
  // ncclReduce/ncclBroadcast, or ncclReduceScatter/ncclAllGather when the
  // counts are equal). counts has size() entries >= 0, the same on every rank.
  // reduce_scatter: `in` holds sum(counts) elements; rank r's `out` receives
  // counts[r] elements, op over all ranks of in[offset_r, offset_r + counts[r]).
  // all_gatherv: `in` holds counts[rank()] elements; `out` (sum(counts))
  // receives every rank's `in` at its offset.
  WorkPtr reduce_scatter_raw(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                             ReduceOp op);
  WorkPtr all_gatherv_raw(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype);
  WorkPtr barrier_async();

  // Note [Naming the lost rank]: answers peers' liveness probes (called by
  // Work::wait while it polls); after a timeout, the other ranks that did not
  // answer a probe within `seconds`, or nullopt when the backend cannot probe.
  virtual void serve_probes() {}
  virtual std::optional<std::vector<int>> unresponsive_ranks(double seconds);

  // Empty while usable; else why not (a timeout, a backend error). The first
  // failure is kept.
  const std::string& failure() const { return failure_; }
  void mark_failed(const std::string& why);
  // Releases the backend's resources (communicators); later collectives throw.
  // After a failure a collective may still be in flight: its resources are
  // then left alone (the process is about to end) rather than freed.
  void shutdown();
  bool is_shut_down() const { return shut_down_; }

 protected:
  ProcessGroup(int rank, int size, double timeout_seconds);
  // Backends: start the operation and return its Work (arguments checked).
  virtual WorkPtr start_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, const std::string& what) = 0;
  virtual WorkPtr start_broadcast(void* data, int64_t count, DType dtype, int root, const std::string& what) = 0;
  virtual WorkPtr start_all_gather(const void* in, void* out, int64_t count, DType dtype,
                                   const std::string& what) = 0;
  virtual WorkPtr start_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                                       ReduceOp op, const std::string& what) = 0;
  virtual WorkPtr start_all_gatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                                    const std::string& what) = 0;
  virtual WorkPtr start_barrier(const std::string& what) = 0;
  virtual void do_shutdown(bool abandon) = 0;
  // "<collective> of <bytes> bytes <dtype> (<backend>, rank r of n)"
  std::string describe(const std::string& collective, int64_t count, DType dtype) const;
  void check_usable(const char* collective) const;
  friend class Work;
  std::string blame(double timeout);  // Note [Naming the lost rank]

 private:
  void check_tensor(const Tensor& t, const char* collective) const;
  void check_counts(const std::vector<int64_t>& counts, const char* collective) const;
  void check_reduction(DType dtype, ReduceOp op, const char* collective) const;
  int rank_, size_;
  double timeout_s_;
  std::string failure_;
  bool shut_down_ = false;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

struct ProcessGroupOptions {
  // "auto": "mpi" under an MPI launcher, else "single"; or "mpi", "single", "nccl".
  std::string backend = "auto";
  double timeout_seconds = 0;  // <= 0: KILN_DIST_TIMEOUT, else 300
  int device = -1;             // nccl: the GPU; -1: local rank modulo the GPU count
};

// KILN_DIST_TIMEOUT (seconds, > 0) when set, else 300; kiln::Error for a bad value.
double default_timeout_seconds();
// True when an MPI launcher started this process (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set).
bool launched_by_mpi();
// This process's rank on its node under mpirun (OMPI_COMM_WORLD_LOCAL_RANK...), else 0.
int local_rank();

// Creates the process-wide default group (MPI initialised once); a second
// call is a kiln::Error. MPI is finalised by destroy_process_group() or at exit.
ProcessGroupPtr init_process_group(const ProcessGroupOptions& options = {});
// The group init_process_group() made; nullptr before (or after destroy).
ProcessGroupPtr default_process_group();
// Shuts the default group (and its bootstrap group) down and finalises MPI;
// after a failed collective it calls MPI_Abort instead (Note [Collective timeout]).
void destroy_process_group();
// Ends the whole job now: MPI_Abort(exit_code) under MPI, std::_Exit otherwise.
// For a rank that leaves with an error while its peers may sit in a collective.
[[noreturn]] void abort_process_group(int exit_code = 1);

// A new group: "mpi" needs MPI initialised by init_process_group (or by the
// caller); "single" is world size 1.
ProcessGroupPtr new_mpi_group(double timeout_seconds);
ProcessGroupPtr new_single_group(double timeout_seconds);
// NCCL on GPU `device` (-1: local rank modulo the GPU count) for the ranks of
// `bootstrap`, over which the NCCL unique id is broadcast. kiln::Error "built
// without CUDA" (or "built without NCCL") when this build has no NCCL.
// The group makes its GPU the calling thread's current device and leaves it so
// (as torch.distributed does with a device id): the rank's kernels, tensors
// and streams then land on that GPU and no context is made on GPU 0.
ProcessGroupPtr new_nccl_group(const ProcessGroupPtr& bootstrap, int device, double timeout_seconds);
bool nccl_built();
// NCCL's version as the loaded library reports it ("2.27.7"); "" without NCCL.
std::string nccl_version();
// False in a build made with KILN_MPI=OFF: the mpi group and mpirun runs are
// then a kiln::Error "built without MPI".
bool built_with_mpi();

namespace detail {
// Element offsets of the segments of an uneven collective: offsets[r] = sum of counts[0, r).
std::vector<int64_t> segment_offsets(const std::vector<int64_t>& counts);
}  // namespace detail

}  // namespace kiln::dist
