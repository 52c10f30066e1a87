// The profiler's recording (Note [Profiler], core/profiler.h): per-thread
// span buffers, the op hooks OpScope calls, RecordScope, start and stop. The
// trace and the table are in core/profiler_report.cpp.
#include "core/profiler.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/memory_summary.h"
#include "cuda/cuda.h"
#include "cuda/stream.h"

namespace kiln {
namespace detail {
std::atomic<bool> g_profiler_active{false};
}  // namespace detail

namespace profiler {
namespace {

using Clock = std::chrono::steady_clock;

struct RawSpan {
  std::string name;
  Category category = Category::User;
  int64_t begin_ns = 0, end_ns = -1;  // -1: still open
  int64_t parent = -1;                // index in the same buffer
  int op_depth = 0;
  int64_t step = -1;
  std::string shapes, dtypes, device;
  int cuda_device = -1;  // the op's CUDA device, where its inputs are
  std::optional<cuda::Event> device_begin, device_end;
};

// What the last memory sample of a device on this thread said (kept only when changed).
struct LastUsage {
  std::size_t allocated = SIZE_MAX, reserved = SIZE_MAX;
};

struct ThreadBuffer {
  std::atomic<bool> busy{false};  // inside an append (Note [Profiler])
  uint32_t session = 0;           // the session `spans` belong to
  std::vector<RawSpan> spans;
  std::vector<int64_t> open;      // indexes of the open spans, innermost last
  std::vector<MemorySample> samples;
  LastUsage cpu_last;
  std::vector<LastUsage> cuda_last;  // by device index; empty: no CUDA op seen
  int registered = 0;                // order of registration

  void reset(uint32_t s) {
    session = s;
    spans.clear();
    open.clear();
    samples.clear();
    cpu_last = {};
    cuda_last.clear();
  }
};

// Process-wide state. The buffers live as long as the process (a thread that
// ended still has its spans read at stop()).
struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::atomic<uint32_t> session{0};
  bool running = false;  // a Profile is between start and stop
  Clock::time_point t0;
  ProfileOptions options;
  ThreadBuffer* owner = nullptr;  // the buffer of the thread that started the profile
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

ThreadBuffer& this_thread_buffer() {
  thread_local ThreadBuffer* tls = nullptr;
  if (tls == nullptr) [[unlikely]] {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    b->registered = static_cast<int>(r.buffers.size());
    r.buffers.push_back(b);
    tls = b.get();
  }
  return *tls;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - registry().t0).count();
}

uint64_t make_token(uint32_t session, size_t index) {
  return (static_cast<uint64_t>(session) << 32) | static_cast<uint64_t>(index + 1);
}

// Marks `b` busy and says whether recording is on (then `b` holds the
// current session's spans). The caller clears busy.
bool enter(ThreadBuffer& b) {
  b.busy.store(true, std::memory_order_seq_cst);
  if (!kiln::detail::g_profiler_active.load(std::memory_order_seq_cst)) return false;
  const uint32_t s = registry().session.load(std::memory_order_relaxed);
  if (b.session != s) b.reset(s);
  return true;
}

void leave(ThreadBuffer& b) { b.busy.store(false, std::memory_order_release); }

// enter() ... leave() for a scope: busy is cleared however the scope ends
// (stop() waits for it; a flag left set would hang it).
class Busy {
 public:
  explicit Busy(ThreadBuffer& b) : b_(b), on_(enter(b)) {}
  ~Busy() { leave(b_); }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;
  bool on() const { return on_; }

 private:
  ThreadBuffer& b_;
  bool on_;
};

// "a, b, ..." of `part(t)` over the tensors ("None" for an undefined one).
template <class Part>
std::string join(const std::vector<Tensor>& ts, Part part) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) s += ", ";
    s += ts[i].defined() ? std::string(part(ts[i])) : "None";
  }
  return s;
}

// The device of the first defined tensor (none when there is none).
std::optional<Device> device_of(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (t.defined()) return t.device();
  return std::nullopt;
}

uint64_t begin_span(const char* name, Category category, const std::vector<Tensor>* tensors, int op_depth,
                    int64_t step = -1) {
  ThreadBuffer& b = this_thread_buffer();
  const Busy busy(b);
  if (!busy.on()) return 0;
  const ProfileOptions& o = registry().options;
  const size_t index = b.spans.size();
  RawSpan& sp = b.spans.emplace_back();
  sp.name = name;
  sp.category = category;
  sp.op_depth = op_depth;
  sp.step = step;
  sp.parent = b.open.empty() ? -1 : b.open.back();
  if (tensors != nullptr) {
    if (o.record_shapes) {
      sp.shapes = join(*tensors, [](const Tensor& t) { return shape_str(t.sizes()); });
      sp.dtypes = join(*tensors, [](const Tensor& t) { return dtype_name(t.dtype()); });
    }
    if (const std::optional<Device> d = device_of(*tensors)) {
      if (o.record_shapes) sp.device = d->str();
      if (d->is_cuda()) {
        sp.cuda_device = d->index;
        if (b.cuda_last.size() <= static_cast<size_t>(d->index)) b.cuda_last.resize(d->index + 1);
        if (o.cuda_events) {
          try {
            sp.device_begin.emplace(/*timing=*/true);
            sp.device_begin->record(cuda::current_stream(d->index));
            sp.device_end.emplace(/*timing=*/true);
          } catch (const Error&) {  // no device time for this span; the op itself runs on
            sp.device_begin.reset();
            sp.device_end.reset();
          }
        }
      }
    }
  }
  b.open.push_back(static_cast<int64_t>(index));
  sp.begin_ns = now_ns();  // last: the recording itself counts to the parent
  return make_token(b.session, index);
}

void sample(ThreadBuffer& b, int64_t ts, const std::string& device, LastUsage& last, std::size_t allocated,
            std::size_t reserved) {
  if (allocated == last.allocated && reserved == last.reserved) return;
  last = {allocated, reserved};
  b.samples.push_back(MemorySample{ts, device, allocated, reserved});
}

void sample_memory(ThreadBuffer& b, int64_t ts) {
  const auto [allocated, reserved] = kiln::detail::cpu_memory_usage();
  sample(b, ts, "cpu", b.cpu_last, allocated, reserved);
  for (size_t d = 0; d < b.cuda_last.size(); ++d) {
    const memory::AllocatorStats s = cuda::memory_stats(static_cast<int>(d));
    sample(b, ts, "cuda:" + std::to_string(d), b.cuda_last[d], s.allocated_bytes, s.reserved_bytes);
  }
}

// Runs in destructors (OpScope, RecordScope): must not throw.
void end_span(uint64_t token) noexcept {
  const Clock::time_point now = Clock::now();  // first: the recording itself counts to the parent
  ThreadBuffer& b = this_thread_buffer();
  const Busy busy(b);
  if (!busy.on() || b.session != static_cast<uint32_t>(token >> 32)) return;  // ended since: dropped
  const int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(now - registry().t0).count();
  const auto index = static_cast<int64_t>(token & 0xffffffffu) - 1;
  RawSpan& sp = b.spans[static_cast<size_t>(index)];
  sp.end_ns = t;
  while (!b.open.empty()) {  // RAII scopes end innermost first; this is robust to any that did not
    const int64_t top = b.open.back();
    b.open.pop_back();
    if (top == index) break;
  }
  if (sp.device_end) {
    try {
      sp.device_end->record(cuda::current_stream(sp.cuda_device));
    } catch (...) {
      sp.device_end.reset();  // no device time for this span
    }
  }
  if (registry().options.memory) {
    try {
      sample_memory(b, t);
    } catch (...) {  // a CUDA device's stats unreadable: the sample is skipped
    }
  }
}

// Device milliseconds of a span's events, -1 if they cannot be read.
double device_ms(RawSpan& sp) {
  if (!sp.device_begin || !sp.device_end) return -1;
  try {
    if (!sp.device_end->recorded()) return -1;
    sp.device_end->synchronize();
    return sp.device_begin->elapsed_ms(*sp.device_end);
  } catch (const Error&) {
    return -1;
  }
}

}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::Op: return "op";
    case Category::Backward: return "backward";
    case Category::Loader: return "loader";
    case Category::Optimizer: return "optimizer";
    case Category::AllReduce: return "allreduce";
    case Category::Checkpoint: return "checkpoint";
    case Category::User: return "user";
    case Category::Step: return "step";
  }
  return "?";
}

Profile::Profile(ProfileOptions options) : options_(options) {
  Registry& r = registry();
  ThreadBuffer& mine = this_thread_buffer();
  std::lock_guard<std::mutex> lock(r.mutex);
  KILN_CHECK(!r.running, "kiln::profiler::Profile: another profile is already recording in this process "
             "(profiles do not nest; stop the first one before starting another)");
  r.running = true;
  r.options = options_;
  r.owner = &mine;
  r.t0 = Clock::now();
  session_ = r.session.fetch_add(1, std::memory_order_relaxed) + 1;
  active_ = true;
  kiln::detail::g_profiler_active.store(true, std::memory_order_seq_cst);
  if (options_.memory) {  // the starting point of the counters
    mine.busy.store(true, std::memory_order_seq_cst);
    mine.reset(session_);
    sample_memory(mine, 0);
    mine.busy.store(false, std::memory_order_release);
  }
}

Profile::~Profile() { stop(); }

void Profile::stop() {
  if (!active_) return;
  active_ = false;
  Registry& r = registry();
  kiln::detail::g_profiler_active.store(false, std::memory_order_seq_cst);
  const int64_t stop_ns = now_ns();
  std::lock_guard<std::mutex> lock(r.mutex);
  wall_ns_ = stop_ns;
  // Thread ids: the starting thread first, then the others in registration order.
  std::vector<ThreadBuffer*> order;
  order.push_back(r.owner);
  for (const auto& b : r.buffers)
    if (b.get() != r.owner) order.push_back(b.get());
  int thread = 0;
  for (ThreadBuffer* b : order) {
    while (b->busy.load(std::memory_order_acquire)) std::this_thread::yield();
    if (b->session != session_ || (b->spans.empty() && b->samples.empty())) {
      if (b == r.owner) ++thread;  // thread 0 stays the starter's even when it recorded nothing
      continue;
    }
    const auto offset = static_cast<int64_t>(events_.size());
    for (RawSpan& sp : b->spans) {
      Event e;
      e.name = std::move(sp.name);
      e.category = sp.category;
      e.thread = thread;
      e.begin_ns = sp.begin_ns;
      e.unfinished = sp.end_ns < 0;
      e.end_ns = e.unfinished ? stop_ns : sp.end_ns;
      e.parent = sp.parent < 0 ? -1 : sp.parent + offset;
      e.op_depth = sp.op_depth;
      e.step = sp.step;
      e.shapes = std::move(sp.shapes);
      e.dtypes = std::move(sp.dtypes);
      e.device = std::move(sp.device);
      e.device_ms = device_ms(sp);
      events_.push_back(std::move(e));
    }
    memory_.insert(memory_.end(), b->samples.begin(), b->samples.end());
    b->reset(0);
    ++thread;
  }
  if (options_.memory) {  // the end point: what the allocators hold at stop()
    const auto [allocated, reserved] = kiln::detail::cpu_memory_usage();
    memory_.push_back(MemorySample{stop_ns, "cpu", allocated, reserved});
    std::vector<std::string> cuda_devices;
    for (const MemorySample& m : memory_)
      if (m.device != "cpu" && std::find(cuda_devices.begin(), cuda_devices.end(), m.device) == cuda_devices.end())
        cuda_devices.push_back(m.device);
    for (const std::string& d : cuda_devices) {
      const memory::AllocatorStats s = cuda::memory_stats(Device::parse(d).index);
      memory_.push_back(MemorySample{stop_ns, d, s.allocated_bytes, s.reserved_bytes});
    }
  }
  std::stable_sort(memory_.begin(), memory_.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.ts_ns < b.ts_ns; });
  r.running = false;
  r.owner = nullptr;
}

void RecordScope::begin(const char* name, Category category, const std::vector<Tensor>* tensors, int64_t step) {
  token_ = begin_span(name, category, tensors, 0, step);
}

void RecordScope::end() { end_span(token_); }

namespace detail {
uint64_t op_begin(const OpRecord& record) {
  return begin_span(record.name, Category::Op, &record.inputs, record.depth);
}
void op_end(const OpRecord&, uint64_t token) {
  if (token != 0) end_span(token);
}
}  // namespace detail

}  // namespace profiler
}  // namespace kiln
