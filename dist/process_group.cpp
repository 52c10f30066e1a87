// The backend-independent half of ProcessGroup: argument checks, the tensor
// forms of the collectives (on top of the raw ones), Work's polling loop
// against the timeout (Note [Collective timeout]), the world-size-1 "single"
// group, the process-wide default group (init / destroy / abort), and the
// calls that reach the mpi and nccl groups of libkiln_dist through its hooks
// (dist/dist_hooks.h, Note [Package layout] in core/components.h).
#include "dist/process_group.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "autograd/grad_mode.h"
#include "core/components.h"
#include "core/profiler.h"
#include "dist/dist_hooks.h"
#include "dist/mpi_runtime.h"

namespace kiln::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Product: return "product";
  }
  return "?";
}

// ---- Work ------------------------------------------------------------------

Work::Work(std::shared_ptr<ProcessGroup> group, std::string what) : group_(std::move(group)), what_(std::move(what)) {}

Work::~Work() {
  if (done_ || !group_ || group_->is_shut_down()) return;
  // Still in flight: the backend may write into the buffers later, so they are
  // leaked on purpose, and the group cannot be trusted any more.
  if (!keep_.empty()) new std::vector<Tensor>(std::move(keep_));  // NOLINT: intentional leak
  group_->mark_failed("a collective was abandoned before it completed: " + what_);
}

void Work::complete() {
  done_ = true;
  for (auto& fn : finish_) fn();
  finish_.clear();
  keep_.clear();
}

bool Work::test() {
  if (done_) return true;
  KILN_CHECK(!group_->is_shut_down(), what_, ": the process group was destroyed while it was in flight");
  if (poll()) complete();
  return done_;
}

void Work::wait() {
  profiler::RecordScope span("Work::wait", profiler::Category::AllReduce);
  using Clock = std::chrono::steady_clock;
  if (test()) return;
  const double timeout = group_->timeout_seconds();
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  // Busy polling, as a blocking MPI call would do: MPI progresses only inside
  // MPI calls, so sleeping here would slow large transfers down. After the
  // first spins, yield the core to whoever shares it.
  for (int64_t spin = 0;; ++spin) {
    if (test()) return;
    if ((spin & 255) == 0) group_->serve_probes();
    if (Clock::now() >= deadline) {
      std::ostringstream msg;
      msg << what_ << " timed out after " << timeout << " s: " << group_->blame(timeout)
          << " (timeout: ProcessGroupOptions::timeout_seconds or KILN_DIST_TIMEOUT)";
      on_timeout();
      group_->mark_failed(msg.str());
      throw Error(msg.str());
    }
    if (spin > 1000) std::this_thread::yield();
  }
}

namespace {

// A Work that is complete as soon as it is polled (the single group).
class DoneWork final : public Work {
 public:
  DoneWork(std::shared_ptr<ProcessGroup> g, std::string what) : Work(std::move(g), std::move(what)) {}

 protected:
  bool poll() override { return true; }
};

}  // namespace

// ---- ProcessGroup: checks and tensor forms ----------------------------------

ProcessGroup::ProcessGroup(int rank, int size, double timeout_seconds) : rank_(rank), size_(size) {
  KILN_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: rank ", rank, " of world size ", size);
  set_timeout_seconds(timeout_seconds);
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::set_timeout_seconds(double seconds) {
  KILN_CHECK(std::isfinite(seconds) && seconds > 0, "ProcessGroup: timeout must be > 0 seconds, got ", seconds);
  timeout_s_ = seconds;
}

std::optional<std::vector<int>> ProcessGroup::unresponsive_ranks(double) { return std::nullopt; }

// Note [Naming the lost rank]: what a timeout says about the other ranks.
std::string ProcessGroup::blame(double timeout) {
  const double window = std::min(5.0, std::max(1.0, timeout / 10));
  std::optional<std::vector<int>> lost;
  try {
    lost = unresponsive_ranks(window);
  } catch (const Error&) {
  }
  if (!lost) return "another rank is dead, stuck, or called a different collective";
  if (lost->empty())
    return kiln::detail::str_cat("every other rank answered a liveness probe within ", window,
                                 " s: they are alive and waiting in collectives, so one called a different "
                                 "collective (or the same with another size): the ranks' control flow diverged");
  std::string ranks;
  for (size_t i = 0; i < lost->size(); ++i) ranks += (i ? ", " : "") + std::to_string((*lost)[i]);
  return kiln::detail::str_cat(lost->size() == 1 ? "rank " : "ranks ", ranks, " did not answer a liveness probe within ",
                               window, " s (dead, stopped, or busy outside any collective)");
}

void ProcessGroup::mark_failed(const std::string& why) {
  if (failure_.empty()) failure_ = why;
}

void ProcessGroup::shutdown() {
  if (shut_down_) return;
  do_shutdown(!failure_.empty());
  shut_down_ = true;
}

std::string ProcessGroup::describe(const std::string& collective, int64_t count, DType dtype) const {
  return kiln::detail::str_cat(collective, " of ", count * static_cast<int64_t>(element_size(dtype)), " bytes ",
                         dtype_name(dtype), " (", backend(), ", rank ", rank_, " of ", size_, ")");
}

void ProcessGroup::check_usable(const char* collective) const {
  KILN_CHECK(!shut_down_, collective, " (", backend(), "): the process group was destroyed");
  KILN_CHECK(failure_.empty(), collective, " (", backend(), "): the process group is unusable after an earlier failure: ",
             failure_);
}

void ProcessGroup::check_tensor(const Tensor& t, const char* collective) const {
  KILN_CHECK(t.defined(), collective, ": undefined tensor");
  KILN_CHECK(t.device() == device(), collective, ": tensor on ", t.device().str(), " but the ", backend(),
             " process group works on ", device().str(), " tensors");
  KILN_CHECK(!(grad_enabled() && t.requires_grad()), collective,
             ": the tensor requires grad; write into it under NoGradGuard (Note [In-place ops and autograd])");
}

void ProcessGroup::check_reduction(DType dtype, ReduceOp op, const char* collective) const {
  KILN_CHECK(dtype != DType::Bool, collective, ": bool tensors cannot be reduced (use int32)");
  KILN_CHECK(op != ReduceOp::Avg || is_floating(dtype), collective, ": avg needs a floating-point tensor, got ",
             dtype_name(dtype));
}

void ProcessGroup::check_counts(const std::vector<int64_t>& counts, const char* collective) const {
  KILN_CHECK(static_cast<int>(counts.size()) == size_, collective, ": ", counts.size(),
             " counts for a group of size ", size_);
  for (int64_t c : counts) KILN_CHECK(c >= 0, collective, ": negative count ", c);
}

WorkPtr ProcessGroup::all_reduce_raw(void* data, int64_t count, DType dtype, ReduceOp op) {
  check_usable("all_reduce");
  KILN_CHECK(count >= 0, "all_reduce: negative count ", count);
  check_reduction(dtype, op, "all_reduce");
  const std::string what = describe(kiln::detail::str_cat("all_reduce(", reduce_op_name(op), ")"), count, dtype);
  return start_all_reduce(data, count, dtype, op, what);
}

WorkPtr ProcessGroup::broadcast_raw(void* data, int64_t count, DType dtype, int root) {
  check_usable("broadcast");
  KILN_CHECK(count >= 0, "broadcast: negative count ", count);
  KILN_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of a group of size ", size_);
  return start_broadcast(data, count, dtype, root, describe(kiln::detail::str_cat("broadcast(root ", root, ")"), count, dtype));
}

WorkPtr ProcessGroup::all_gather_raw(const void* in, void* out, int64_t count, DType dtype) {
  check_usable("all_gather");
  KILN_CHECK(count >= 0, "all_gather: negative count ", count);
  return start_all_gather(in, out, count, dtype, describe("all_gather", count, dtype));
}

WorkPtr ProcessGroup::reduce_scatter_raw(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                                         ReduceOp op) {
  check_usable("reduce_scatter");
  check_counts(counts, "reduce_scatter");
  check_reduction(dtype, op, "reduce_scatter");
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const std::string what = describe(kiln::detail::str_cat("reduce_scatter(", reduce_op_name(op), ")"), total, dtype);
  return start_reduce_scatter(in, out, counts, dtype, op, what);
}

WorkPtr ProcessGroup::all_gatherv_raw(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype) {
  check_usable("all_gatherv");
  check_counts(counts, "all_gatherv");
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return start_all_gatherv(in, out, counts, dtype, describe("all_gatherv", total, dtype));
}

WorkPtr ProcessGroup::barrier_async() {
  check_usable("barrier");
  return start_barrier(kiln::detail::str_cat("barrier (", backend(), ", rank ", rank_, " of ", size_, ")"));
}

namespace {

// The contiguous buffer a collective works on: t itself, or a copy that is
// written back into t when the collective completes.
Tensor contiguous_buffer(const Tensor& t) {
  NoGradGuard no_grad;
  return t.is_contiguous() ? t : t.contiguous();
}

void finish_in_place(Work& w, const Tensor& t, const Tensor& buf) {
  w.keep_alive(t);
  w.keep_alive(buf);
  if (buf.impl_ptr() == t.impl_ptr()) {
    w.then([t] { t.bump_version(); });
  } else {
    w.then([t, buf] {
      NoGradGuard no_grad;
      Tensor dst = t;
      dst.copy_(buf);
    });
  }
}

}  // namespace

WorkPtr ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op) {
  profiler::RecordScope span("all_reduce", profiler::Category::AllReduce);  // its start; the wait is Work::wait
  check_tensor(t, "all_reduce");
  Tensor buf = contiguous_buffer(t);
  WorkPtr w = all_reduce_raw(buf.raw_data(), buf.numel(), buf.dtype(), op);
  finish_in_place(*w, t, buf);
  return w;
}

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }

WorkPtr ProcessGroup::broadcast_async(const Tensor& t, int root) {
  check_tensor(t, "broadcast");
  Tensor buf = contiguous_buffer(t);
  WorkPtr w = broadcast_raw(buf.raw_data(), buf.numel(), buf.dtype(), root);
  finish_in_place(*w, t, buf);
  return w;
}

void ProcessGroup::broadcast(const Tensor& t, int root) { broadcast_async(t, root)->wait(); }

Tensor ProcessGroup::all_gather(const Tensor& t) {
  KILN_CHECK(t.defined(), "all_gather: undefined tensor");
  KILN_CHECK(t.device() == device(), "all_gather: tensor on ", t.device().str(), " but the ", backend(),
             " process group works on ", device().str(), " tensors");
  Tensor in = contiguous_buffer(t.detach());
  Shape shape = t.sizes();
  shape.insert(shape.begin(), size_);
  Tensor out = empty_tensor(shape, t.dtype(), device());
  WorkPtr w = all_gather_raw(in.raw_data(), out.raw_data(), in.numel(), in.dtype());
  w->keep_alive(in);
  w->keep_alive(out);
  w->wait();
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& t, ReduceOp op) {
  KILN_CHECK(t.defined(), "reduce_scatter: undefined tensor");
  KILN_CHECK(t.device() == device(), "reduce_scatter: tensor on ", t.device().str(), " but the ", backend(),
             " process group works on ", device().str(), " tensors");
  KILN_CHECK(t.dim() >= 1 && t.size(0) == size_, "reduce_scatter: the tensor must be [", size_,
             ", ...] (one chunk per rank), got ", shape_str(t.sizes()));
  Tensor in = contiguous_buffer(t.detach());
  const Shape shape(t.sizes().begin() + 1, t.sizes().end());
  Tensor out = empty_tensor(shape, t.dtype(), device());
  WorkPtr w = reduce_scatter_raw(in.raw_data(), out.raw_data(), std::vector<int64_t>(size_, out.numel()), in.dtype(), op);
  w->keep_alive(in);
  w->keep_alive(out);
  w->wait();
  return out;
}

void ProcessGroup::barrier() { barrier_async()->wait(); }

std::vector<int64_t> detail::segment_offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

// ---- the single group (world size 1) --------------------------------------

namespace {

class SingleProcessGroup final : public ProcessGroup {
 public:
  explicit SingleProcessGroup(double timeout) : ProcessGroup(0, 1, timeout) {}
  std::string backend() const override { return "single"; }

 protected:
  // One rank: sum, avg (x / 1), max, min and product of one value is the value.
  WorkPtr start_all_reduce(void*, int64_t, DType, ReduceOp, const std::string& what) override {
    return std::make_shared<DoneWork>(shared_from_this(), what);
  }
  WorkPtr start_broadcast(void*, int64_t, DType, int, const std::string& what) override {
    return std::make_shared<DoneWork>(shared_from_this(), what);
  }
  WorkPtr start_all_gather(const void* in, void* out, int64_t count, DType dtype, const std::string& what) override {
    if (in != out && count > 0) std::memmove(out, in, static_cast<size_t>(count) * element_size(dtype));
    return std::make_shared<DoneWork>(shared_from_this(), what);
  }
  WorkPtr start_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype, ReduceOp,
                               const std::string& what) override {
    return start_all_gather(in, out, counts[0], dtype, what);  // one rank: its own values
  }
  WorkPtr start_all_gatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType dtype,
                            const std::string& what) override {
    return start_all_gather(in, out, counts[0], dtype, what);
  }
  WorkPtr start_barrier(const std::string& what) override { return std::make_shared<DoneWork>(shared_from_this(), what); }
  void do_shutdown(bool) override {}
};

}  // namespace

ProcessGroupPtr new_single_group(double timeout_seconds) {
  return std::make_shared<SingleProcessGroup>(timeout_seconds > 0 ? timeout_seconds : default_timeout_seconds());
}

// ---- environment ------------------------------------------------------------

double default_timeout_seconds() {
  const char* env = std::getenv("KILN_DIST_TIMEOUT");
  if (env == nullptr || *env == '\0') return 300.0;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  KILN_CHECK(end != env && *end == '\0' && std::isfinite(v) && v > 0, "KILN_DIST_TIMEOUT='", env,
             "': expected a number of seconds > 0");
  return v;
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

// ---- the mpi and nccl groups of libkiln_dist ------------------------------------

namespace detail {
namespace {

using kiln::detail::Component;

std::atomic<MpiHooks*> g_mpi{nullptr};
std::atomic<NcclHooks*> g_nccl{nullptr};

// The hooks of `c` (Mpi or Nccl), loading libkiln_dist on the first call
// when this kiln was built with c; nullptr when there are none.
template <typename Hooks>
Hooks* hooks_of(std::atomic<Hooks*>& registered, Component c) {
  if (Hooks* h = registered.load(std::memory_order_acquire)) return h;
  if (!kiln::detail::component_built(c)) return nullptr;
  (void)kiln::detail::load_component(c);
  return registered.load(std::memory_order_acquire);
}
MpiHooks* mpi_hooks() { return hooks_of(g_mpi, Component::Mpi); }
NcclHooks* nccl_hooks() { return hooks_of(g_nccl, Component::Nccl); }

// Why there are no hooks of `c`, given that this kiln was built with it.
std::string load_failure(Component c, const char* what) {
  const std::string err = kiln::detail::load_component(c);
  if (!err.empty()) return kiln::detail::str_cat("kiln was built with ", what, ", but libkiln_dist.so did not load: ", err);
  return kiln::detail::str_cat("libkiln_dist.so loaded but registered no ", what,
                               " process group (is it from another kiln build?)");
}

MpiHooks& require_mpi() {
  if (MpiHooks* h = mpi_hooks()) return *h;
  if (!kiln::detail::component_built(Component::Mpi))
    fail("this kiln was built without MPI (KILN_MPI=OFF): the mpi process group and runs under mpirun are "
         "unavailable; rebuild with -DKILN_MPI=ON (libopenmpi-dev)");
  fail(load_failure(Component::Mpi, "MPI"));
}

// "built without NCCL" / "built without CUDA", or why libkiln_dist did not load.
std::string nccl_missing() {
  if (!kiln::detail::component_built(Component::Nccl))
    return kiln::detail::component_built(Component::Cuda) ? "built without NCCL" : "built without CUDA";
  return load_failure(Component::Nccl, "NCCL");
}

}  // namespace

void register_mpi_hooks(MpiHooks* hooks) { g_mpi.store(hooks, std::memory_order_release); }
void register_nccl_hooks(NcclHooks* hooks) { g_nccl.store(hooks, std::memory_order_release); }

// Shutting down and aborting never load libkiln_dist: if it is not loaded, kiln did not start MPI.
void mpi_initialize() { require_mpi().initialize(); }
void mpi_finalize() {
  if (MpiHooks* h = g_mpi.load(std::memory_order_acquire)) h->finalize();
}
void mpi_abort(int code) {
  if (MpiHooks* h = g_mpi.load(std::memory_order_acquire)) h->abort(code);
  std::_Exit(code);
}
bool mpi_is_running() {
  MpiHooks* h = g_mpi.load(std::memory_order_acquire);
  return h != nullptr && h->is_running();
}

}  // namespace detail

ProcessGroupPtr new_mpi_group(double timeout_seconds) { return detail::require_mpi().new_group(timeout_seconds); }
bool built_with_mpi() { return detail::mpi_hooks() != nullptr; }

ProcessGroupPtr new_nccl_group(const ProcessGroupPtr& bootstrap, int device, double timeout_seconds) {
  detail::NcclHooks* h = detail::nccl_hooks();
  if (!h) fail("nccl process group: ", detail::nccl_missing());
  return h->new_group(bootstrap, device, timeout_seconds);
}
bool nccl_built() { return detail::nccl_hooks() != nullptr; }
std::string nccl_version() {
  detail::NcclHooks* h = detail::nccl_hooks();
  return h ? h->version() : "";
}

// ---- the default group --------------------------------------------------------

namespace {

std::mutex g_mutex;
ProcessGroupPtr g_default;    // what init_process_group returned
ProcessGroupPtr g_bootstrap;  // nccl: the group its unique id came over
bool g_at_exit_registered = false;

void destroy_locked() {
  std::string failure;
  for (const ProcessGroupPtr& g : {g_default, g_bootstrap})
    if (g && failure.empty()) failure = g->failure();
  if (!failure.empty() && detail::mpi_is_running()) {
    // A collective may still be in flight on some rank: finalising could hang,
    // so end the whole job (Note [Collective timeout]).
    std::fprintf(stderr, "kiln: process group failed (%s); aborting the MPI job\n", failure.c_str());
    std::fflush(stderr);
    detail::mpi_abort(1);
  }
  if (g_default) g_default->shutdown();
  if (g_bootstrap) g_bootstrap->shutdown();
  g_default.reset();
  g_bootstrap.reset();
  detail::mpi_finalize();
}

void destroy_at_exit() {
  std::lock_guard<std::mutex> lock(g_mutex);
  try {
    destroy_locked();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: shutting the process group down at exit: %s\n", e.what());
  }
}

}  // namespace

ProcessGroupPtr init_process_group(const ProcessGroupOptions& options) {
  std::lock_guard<std::mutex> lock(g_mutex);
  KILN_CHECK(!g_default, "init_process_group: already initialised (", g_default->backend(), ", rank ",
             g_default->rank(), " of ", g_default->size(), "); call destroy_process_group() first");
  const double timeout = options.timeout_seconds > 0 ? options.timeout_seconds : default_timeout_seconds();
  std::string backend = options.backend;
  if (backend == "auto") backend = launched_by_mpi() ? "mpi" : "single";
  if (backend == "mpi") {
    detail::mpi_initialize();
    g_default = new_mpi_group(timeout);
  } else if (backend == "single") {
    g_default = new_single_group(timeout);
  } else if (backend == "nccl") {
    KILN_CHECK(nccl_built(), "init_process_group: backend nccl: ", detail::nccl_missing());
    ProcessGroupPtr bootstrap;
    if (launched_by_mpi()) {
      detail::mpi_initialize();
      bootstrap = new_mpi_group(timeout);
    } else {
      bootstrap = new_single_group(timeout);
    }
    g_default = new_nccl_group(bootstrap, options.device, timeout);
    g_bootstrap = bootstrap;
  } else {
    fail("init_process_group: unknown backend '", options.backend, "': expected auto, mpi, single or nccl");
  }
  if (!g_at_exit_registered) {
    std::atexit(destroy_at_exit);
    g_at_exit_registered = true;
  }
  return g_default;
}

ProcessGroupPtr default_process_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_default;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  destroy_locked();
}

void abort_process_group(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (detail::mpi_is_running()) detail::mpi_abort(exit_code);
  std::_Exit(exit_code);
}

}  // namespace kiln::dist
