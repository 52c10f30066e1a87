// The "nccl" process group: collectives on CUDA memory over NCCL (2.x), for
// builds with the CUDA backend and NCCL (cmake/KilnDist.cmake).
//
// Bootstrap: rank 0 makes the NCCL unique id and broadcasts it over the
// bootstrap group (mpi under mpirun, single otherwise), so `mpirun -H a,b ...`
// is the only launcher. The communicator is non-blocking (config.blocking = 0):
// its initialisation and every collective are polled against the group's
// timeout (Note [Collective timeout]), and a timeout aborts the communicator
// (ncclCommAbort), which also stops its kernels.
//
// Each collective runs on the group's own stream, after the work already
// queued on the calling thread's current kiln stream (cuda/stream.h; an
// event joins the two), and its Work polls an event recorded after it. So
// DDP's bucket all-reduces, started from gradient hooks, run on this side
// stream while backward goes on queueing kernels on the compute stream (Note
// [Data-parallel training] in train/trainer.h). The tensor forms take CUDA
// tensors (ProcessGroup checks device()); the raw forms take device pointers
// (`kiln bench allreduce`).
//
// Part of libkiln_dist, built with CUDA and NCCL only (KILN_NCCL,
// cmake/KilnDist.cmake): it hands libkiln its NCCL hooks (dist/dist_hooks.h)
// as the library loads (Note [Package layout] in core/components.h). Without
// it, new_nccl_group() throws "built without CUDA" (or "built without NCCL"
// in a CUDA build that found no NCCL).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "cuda/cuda_check.h"
#include "cuda/stream.h"
#include "dist/dist_hooks.h"
#include "dist/process_group.h"

namespace kiln::dist {
namespace {

[[noreturn]] void nccl_fail(ncclResult_t r, const std::string& what) {
  fail(what, ": NCCL error ", static_cast<int>(r), " (", ncclGetErrorString(r), ")");
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::Bool: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;  // sum, then divide by the world size
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Product: return ncclProd;
  }
  return ncclSum;
}

// Makes `device` current for a scope and, if it had to switch, restores the
// previous device after. Restoring only what was switched matters: setting a
// device creates its context (~0.5 GiB), so a scope on a rank's own GPU must
// not touch GPU 0 on its way out (Note [NCCL device]).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    KILN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      KILN_CUDA_CHECK(cudaSetDevice(device));
      switched_ = true;
    }
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(const ProcessGroupPtr& bootstrap, int device, double timeout);
  ~NcclProcessGroup() override;
  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device(DeviceType::CUDA, device_); }

  // Throws (after marking the group failed) when the communicator reports an
  // asynchronous error; true while an operation is still being set up.
  bool comm_in_progress(const std::string& what);
  void abort_comm() {
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 protected:
  WorkPtr start_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, const std::string& what) override {
    return launch(what, [&] {
      return ncclAllReduce(data, data, static_cast<size_t>(count), nccl_type(dtype), nccl_op(op), comm_, stream_);
    });
  }
  WorkPtr start_broadcast(void* data, int64_t count, DType dtype, int root, const std::string& what) override {
    const size_t bytes = static_cast<size_t>(count) * element_size(dtype);
    return launch(what, [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_); });
  }
  WorkPtr start_all_gather(const void* in, void* out, int64_t count, DType dtype, const std::string& what) override {
    const size_t bytes = static_cast<size_t>(count) * element_size(dtype);
    return launch(what, [&] { return ncclAllGather(in, out, bytes, ncclUint8, comm_, stream_); });
  }
  // Equal counts: one ncclReduceScatter / ncclAllGather; uneven ones: a group
  // of ncclReduce / ncclBroadcast calls, one per rank's segment.
  WorkPtr start_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                               ReduceOp op, const std::string& what) override {
    const size_t es = element_size(dtype);
    const bool equal = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    const std::vector<int64_t> offsets = detail::segment_offsets(counts);
    return launch(what, [&]() -> ncclResult_t {
      if (equal)
        return ncclReduceScatter(in, out, static_cast<size_t>(counts[0]), nccl_type(dtype), nccl_op(op), comm_, stream_);
      ncclResult_t rc = ncclGroupStart();
      for (size_t r = 0; r < counts.size() && rc == ncclSuccess; ++r)
        rc = ncclReduce(static_cast<const char*>(in) + static_cast<size_t>(offsets[r]) * es, out,
                        static_cast<size_t>(counts[r]), nccl_type(dtype), nccl_op(op), static_cast<int>(r), comm_,
                        stream_);
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  WorkPtr start_all_gatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                            const std::string& what) override {
    const size_t es = element_size(dtype);
    const bool equal = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    const std::vector<int64_t> offsets = detail::segment_offsets(counts);
    return launch(what, [&]() -> ncclResult_t {
      if (equal) return ncclAllGather(in, out, static_cast<size_t>(counts[0]) * es, ncclUint8, comm_, stream_);
      ncclResult_t rc = ncclGroupStart();
      for (size_t r = 0; r < counts.size() && rc == ncclSuccess; ++r)
        rc = ncclBroadcast(in, static_cast<char*>(out) + static_cast<size_t>(offsets[r]) * es,
                           static_cast<size_t>(counts[r]) * es, ncclUint8, static_cast<int>(r), comm_, stream_);
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  WorkPtr start_barrier(const std::string& what) override {
    return launch(what, [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }
  void do_shutdown(bool abandon) override;

 private:
  template <typename Enqueue>
  WorkPtr launch(const std::string& what, Enqueue&& enqueue);
  void wait_for_comm(const std::string& what);

  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // one float for barrier()
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<ProcessGroup> g, std::string what, cudaEvent_t done)
      : Work(std::move(g), std::move(what)), done_(done) {}
  ~NcclWork() override { (void)cudaEventDestroy(done_); }

 protected:
  bool poll() override {
    auto& g = static_cast<NcclProcessGroup&>(*group_);
    (void)g.comm_in_progress(description());
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    group_->mark_failed(description() + ": CUDA error");
    cuda_fail(e, "cudaEventQuery", __FILE__, __LINE__);
  }
  void on_timeout() override { static_cast<NcclProcessGroup&>(*group_).abort_comm(); }

 private:
  cudaEvent_t done_;
};

NcclProcessGroup::NcclProcessGroup(const ProcessGroupPtr& bootstrap, int device, double timeout)
    : ProcessGroup(bootstrap->rank(), bootstrap->size(), timeout) {
  int n = 0;
  KILN_CUDA_CHECK(cudaGetDeviceCount(&n));
  KILN_CHECK(n > 0, "nccl process group: no CUDA device");
  device_ = device >= 0 ? device : local_rank() % n;
  KILN_CHECK(device_ < n, "nccl process group: GPU ", device_, " asked for, but there are ", n);
  // Note [NCCL device]: the rank's GPU becomes current before anything else
  // touches the runtime and stays current after the group is built. A scope
  // that restored the previous device here would put every rank back on
  // GPU 0 (cudaGetDevice reports 0 before any device is set) and give each a
  // context there, ~0.5 GiB per rank on GPU 0.
  KILN_CUDA_CHECK(cudaSetDevice(device_));

  // The unique id (128 bytes) travels as 16 int64 over the bootstrap group.
  ncclUniqueId id;
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
  std::memset(&id, 0, sizeof(id));
  if (rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) nccl_fail(r, "ncclGetUniqueId");
  }
  Tensor id_t = empty_tensor({static_cast<int64_t>(sizeof(id) / sizeof(int64_t))}, DType::Int64, kCPU);
  std::memcpy(id_t.raw_data(), &id, sizeof(id));
  bootstrap->broadcast(id_t, 0);
  std::memcpy(&id, id_t.raw_data(), sizeof(id));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
  if (r != ncclSuccess && r != ncclInProgress) nccl_fail(r, "ncclCommInitRankConfig");
  wait_for_comm(describe("ncclCommInitRankConfig", 0, DType::Float32));

  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KILN_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
}

NcclProcessGroup::~NcclProcessGroup() {
  if (!is_shut_down()) {
    try {
      shutdown();
    } catch (...) {
    }
  }
}

bool NcclProcessGroup::comm_in_progress(const std::string& what) {
  KILN_CHECK(comm_ != nullptr, what, ": the NCCL communicator was aborted");
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) state = r;
  if (state == ncclSuccess) return false;
  if (state == ncclInProgress) return true;
  mark_failed(what + ": NCCL reported an error");
  abort_comm();
  nccl_fail(state, what);
}

void NcclProcessGroup::wait_for_comm(const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds()));
  while (comm_in_progress(what)) {
    if (Clock::now() >= deadline) {
      const std::string msg = kiln::detail::str_cat(what, " timed out after ", timeout_seconds(),
                                              " s: another rank is dead, stuck, or called a different collective");
      mark_failed(msg);
      abort_comm();
      throw Error(msg);
    }
    std::this_thread::yield();
  }
}

template <typename Enqueue>
WorkPtr NcclProcessGroup::launch(const std::string& what, Enqueue&& enqueue) {
  KILN_CHECK(comm_ != nullptr, what, ": the NCCL communicator was aborted");
  DeviceScope scope(device_);
  // Run after everything already queued on the current stream (the bucket's copy-in above all).
  cudaEvent_t ready = nullptr, done = nullptr;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  KILN_CUDA_CHECK(cudaEventRecord(ready, static_cast<cudaStream_t>(cuda::current_stream(device_).handle())));
  KILN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
  KILN_CUDA_CHECK(cudaEventDestroy(ready));
  const ncclResult_t r = enqueue();
  if (r == ncclInProgress) {
    wait_for_comm(what);
  } else if (r != ncclSuccess) {
    mark_failed(what + ": could not be started");
    nccl_fail(r, what);
  }
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  KILN_CUDA_CHECK(cudaEventRecord(done, stream_));
  return std::make_shared<NcclWork>(shared_from_this(), what, done);
}

void NcclProcessGroup::do_shutdown(bool abandon) {
  if (comm_ != nullptr) {
    if (abandon) {
      abort_comm();
    } else {
      // Finalize flushes outstanding work; then the communicator is freed.
      ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        try {
          wait_for_comm("ncclCommFinalize");
        } catch (const Error&) {
          comm_ = nullptr;  // aborted by wait_for_comm
        }
      }
      if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
      comm_ = nullptr;
    }
  }
  if (scratch_ != nullptr) (void)cudaFree(scratch_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  scratch_ = nullptr;
  stream_ = nullptr;
}

std::string version_of_nccl() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

class NcclHooksImpl final : public detail::NcclHooks {
 public:
  ProcessGroupPtr new_group(const ProcessGroupPtr& bootstrap, int device, double timeout_seconds) override {
    KILN_CHECK(bootstrap != nullptr, "new_nccl_group: no bootstrap process group");
    return std::make_shared<NcclProcessGroup>(bootstrap, device,
                                              timeout_seconds > 0 ? timeout_seconds : default_timeout_seconds());
  }
  std::string version() override { return version_of_nccl(); }
};

struct Registrar {
  Registrar() { detail::register_nccl_hooks(new NcclHooksImpl); }  // never freed: used until exit
};
const Registrar registrar;

}  // namespace
}  // namespace kiln::dist
