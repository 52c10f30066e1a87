// The "mpi" process group: CPU collectives over MPI (OpenMPI from Debian),
// each started non-blocking (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather,
// MPI_Ireduce_scatter, MPI_Iallgatherv, MPI_Ibarrier) on the group's own communicator (a duplicate of
// MPI_COMM_WORLD) and completed by Work::wait() polling MPI_Test against the
// timeout (Note [Collective timeout]). MPI errors are returned, not fatal
// (MPI_ERRORS_RETURN), and become kiln::Error naming the collective.
// Also MPI's start-up and shut-down (the contracts of dist/mpi_runtime.h).
//
// Part of libkiln_dist, built with MPI only (KILN_MPI, cmake/KilnDist.cmake):
// it hands libkiln its MPI hooks (dist/dist_hooks.h) as the library loads
// (Note [Package layout] in core/components.h). Without it, asking for the
// mpi group, or starting under mpirun, is a kiln::Error "built without MPI";
// one process ("single") and a one-process NCCL group work as ever.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "dist/dist_hooks.h"
#include "dist/process_group.h"

namespace kiln::dist {
namespace {

bool g_kiln_initialised = false;  // mpi_initialize() called MPI_Init_thread

void mpi_initialize() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) return;
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  KILN_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed with code ", rc);
  g_kiln_initialised = true;
  // Errors come back as codes on every communicator derived from the world.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

bool mpi_is_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

void mpi_finalize() {
  if (g_kiln_initialised && mpi_is_running()) MPI_Finalize();
}

[[noreturn]] void mpi_abort(int code) {
  if (mpi_is_running()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

[[noreturn]] void mpi_fail(int rc, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(what, ": MPI error ", rc, " (", std::string(text, static_cast<size_t>(len)), ")");
}

// MPI counts are int: larger messages are an error naming the collective.
int mpi_count(int64_t count, const std::string& what) {
  KILN_CHECK(count <= INT_MAX, what, ": more than 2^31 - 1 elements in one MPI call; split the tensor");
  return static_cast<int>(count);
}

MPI_Datatype reduce_type(DType t, const std::string& what) {
  switch (t) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    default: break;
  }
  fail(what, ": the mpi backend reduces float32, float64, int32 and int64, not ", dtype_name(t),
       " (convert to float32)");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;  // Avg divides afterwards
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Product: return MPI_PROD;
  }
  return MPI_SUM;
}

template <typename T>
void divide(void* data, int64_t count, int divisor) {
  T* p = static_cast<T*>(data);
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < count; ++i) p[i] = p[i] / d;
}

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<ProcessGroup> g, std::string what, MPI_Request req)
      : Work(std::move(g), std::move(what)), req_(req) {}

 protected:
  bool poll() override {
    int flag = 0;
    const int rc = MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      group_->mark_failed(description() + ": MPI_Test failed");
      mpi_fail(rc, description());
    }
    return flag != 0;
  }

 private:
  MPI_Request req_;
};

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(MPI_Comm comm, MPI_Comm probe_comm, int rank, int size, double timeout)
      : ProcessGroup(rank, size, timeout), comm_(comm), probe_comm_(probe_comm) {}
  std::string backend() const override { return "mpi"; }

  // Note [Naming the lost rank]: answer every ping that has arrived.
  void serve_probes() override {
    if (probe_comm_ == MPI_COMM_NULL) return;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kPing, probe_comm_, &flag, &st) != MPI_SUCCESS || !flag) return;
      int token = 0;
      if (MPI_Recv(&token, 1, MPI_INT, st.MPI_SOURCE, kPing, probe_comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
      MPI_Request req;  // the buffer is static: the send may complete whenever
      if (MPI_Isend(&kToken, 1, MPI_INT, st.MPI_SOURCE, kPong, probe_comm_, &req) == MPI_SUCCESS)
        MPI_Request_free(&req);
    }
  }

  std::optional<std::vector<int>> unresponsive_ranks(double seconds) override {
    if (probe_comm_ == MPI_COMM_NULL) return std::nullopt;
    using Clock = std::chrono::steady_clock;
    const int n = size();
    // Receive buffers outlive the group: a late answer may still land (the job is about to end).
    auto* answers = new std::vector<int>(static_cast<size_t>(n), 0);  // NOLINT: intentional leak
    std::vector<MPI_Request> recv(static_cast<size_t>(n), MPI_REQUEST_NULL);
    std::vector<bool> answered(static_cast<size_t>(n), false);
    for (int r = 0; r < n; ++r) {
      if (r == rank()) continue;
      const auto i = static_cast<size_t>(r);
      if (MPI_Irecv(&(*answers)[i], 1, MPI_INT, r, kPong, probe_comm_, &recv[i]) != MPI_SUCCESS) continue;
      MPI_Request req;
      if (MPI_Isend(&kToken, 1, MPI_INT, r, kPing, probe_comm_, &req) == MPI_SUCCESS) MPI_Request_free(&req);
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    int pending = n - 1;
    while (pending > 0 && Clock::now() < deadline) {
      serve_probes();  // a peer may be probing at the same time
      for (int r = 0; r < n; ++r) {
        const auto i = static_cast<size_t>(r);
        if (r == rank() || answered[i] || recv[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        if (MPI_Test(&recv[i], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
          answered[i] = true;
          --pending;
        }
      }
      std::this_thread::yield();
    }
    std::vector<int> lost;
    for (int r = 0; r < n; ++r)
      if (r != rank() && !answered[static_cast<size_t>(r)]) lost.push_back(r);
    return lost;
  }

 protected:
  WorkPtr start_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, const std::string& what) override {
    const MPI_Datatype type = reduce_type(dtype, what);
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(count, what), type, mpi_op(op), comm_, &req), what);
    auto w = std::make_shared<MpiWork>(shared_from_this(), what, req);
    if (op == ReduceOp::Avg) {
      // Note [Deterministic reductions]: the sum, then one division per element.
      const int n = size();
      w->then([data, count, dtype, n] {
        if (dtype == DType::Float32) divide<float>(data, count, n);
        else divide<double>(data, count, n);
      });
    }
    return w;
  }

  WorkPtr start_broadcast(void* data, int64_t count, DType dtype, int root, const std::string& what) override {
    MPI_Request req;
    const int bytes = mpi_count(count * static_cast<int64_t>(element_size(dtype)), what);
    check(MPI_Ibcast(data, bytes, MPI_BYTE, root, comm_, &req), what);
    return std::make_shared<MpiWork>(shared_from_this(), what, req);
  }

  WorkPtr start_all_gather(const void* in, void* out, int64_t count, DType dtype, const std::string& what) override {
    MPI_Request req;
    const int bytes = mpi_count(count * static_cast<int64_t>(element_size(dtype)), what);
    check(MPI_Iallgather(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, comm_, &req), what);
    return std::make_shared<MpiWork>(shared_from_this(), what, req);
  }

  WorkPtr start_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                               ReduceOp op, const std::string& what) override {
    const MPI_Datatype type = reduce_type(dtype, what);
    // A non-blocking collective reads its count array until it completes: the Work keeps it.
    auto recv = std::make_shared<std::vector<int>>();
    for (int64_t c : counts) recv->push_back(mpi_count(c, what));
    MPI_Request req;
    check(MPI_Ireduce_scatter(in, out, recv->data(), type, mpi_op(op), comm_, &req), what);
    auto w = std::make_shared<MpiWork>(shared_from_this(), what, req);
    w->then([recv] {});
    if (op == ReduceOp::Avg) {
      const int n = size();
      const int64_t mine = counts[static_cast<size_t>(rank())];
      w->then([out, mine, dtype, n] {
        if (dtype == DType::Float32) divide<float>(out, mine, n);
        else divide<double>(out, mine, n);
      });
    }
    return w;
  }

  WorkPtr start_all_gatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                            const std::string& what) override {
    const auto es = static_cast<int64_t>(element_size(dtype));
    auto arrays = std::make_shared<std::vector<int>>();  // byte counts, then displacements
    for (int64_t c : counts) arrays->push_back(mpi_count(c * es, what));
    for (int64_t off : detail::segment_offsets(counts)) arrays->push_back(mpi_count(off * es, what));
    const int* recv = arrays->data();
    const int* displs = arrays->data() + counts.size();
    MPI_Request req;
    check(MPI_Iallgatherv(in, recv[rank()], MPI_BYTE, out, recv, displs, MPI_BYTE, comm_, &req), what);
    auto w = std::make_shared<MpiWork>(shared_from_this(), what, req);
    w->then([arrays] {});
    return w;
  }

  WorkPtr start_barrier(const std::string& what) override {
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), what);
    return std::make_shared<MpiWork>(shared_from_this(), what, req);
  }

  void do_shutdown(bool abandon) override {
    // With a request possibly in flight the communicators are left to MPI_Abort.
    if (!abandon && mpi_is_running()) {
      if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
      if (probe_comm_ != MPI_COMM_NULL) MPI_Comm_free(&probe_comm_);
    }
    comm_ = probe_comm_ = MPI_COMM_NULL;
  }

 private:
  void check(int rc, const std::string& what) {
    if (rc == MPI_SUCCESS) return;
    mark_failed(what + ": could not be started");
    mpi_fail(rc, what);
  }

  static constexpr int kPing = 1, kPong = 2;
  static const int kToken;
  MPI_Comm comm_;
  MPI_Comm probe_comm_;  // Note [Naming the lost rank]
};

const int MpiProcessGroup::kToken = 1;

ProcessGroupPtr make_mpi_group(double timeout_seconds) {
  KILN_CHECK(mpi_is_running(), "new_mpi_group: MPI is not initialised (call init_process_group first)");
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) mpi_fail(rc, "new_mpi_group: MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm probe = MPI_COMM_NULL;  // Note [Naming the lost rank]
  rc = MPI_Comm_dup(MPI_COMM_WORLD, &probe);
  if (rc != MPI_SUCCESS) mpi_fail(rc, "new_mpi_group: MPI_Comm_dup");
  MPI_Comm_set_errhandler(probe, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::make_shared<MpiProcessGroup>(comm, probe, rank, size,
                                           timeout_seconds > 0 ? timeout_seconds : default_timeout_seconds());
}

class MpiHooksImpl final : public detail::MpiHooks {
 public:
  void initialize() override { mpi_initialize(); }
  void finalize() override { mpi_finalize(); }
  [[noreturn]] void abort(int code) override { mpi_abort(code); }
  bool is_running() override { return mpi_is_running(); }
  ProcessGroupPtr new_group(double timeout_seconds) override { return make_mpi_group(timeout_seconds); }
};

struct Registrar {
  Registrar() { detail::register_mpi_hooks(new MpiHooksImpl); }  // never freed: used until exit
};
const Registrar registrar;

}  // namespace
}  // namespace kiln::dist
