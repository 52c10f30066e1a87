// The profiler (Note [Profiler]): spans of ops, backward nodes and named
// phases per thread, written as a Chrome trace and summarised as a table,
// in the shape of torch.profiler.
//
//   {
//     kiln::profiler::Profile prof;            // recording from here
//     {
//       kiln::profiler::RecordScope step("step", kiln::profiler::Category::Step);
//       loss.backward(); opt.step();
//     }
//     prof.stop();                              // or the destructor
//     std::cout << prof.key_averages();         // the table
//     prof.export_chrome_trace("trace.json");   // Perfetto, chrome://tracing
//   }
//
// Note [Profiler]
// ~~~~~~~~~~~~~~~
// Recording. While a Profile is active (one at a time per process;
// a second is a kiln::Error) detail::g_profiler_active is true: every OpScope
// (Note [Op observers], core/op_scope.h) calls detail::op_begin / op_end and
// every RecordScope opens a span. When no Profile is active, an OpScope costs
// one relaxed atomic load and a RecordScope the same; nothing else runs.
// Spans go to a buffer per thread, registered once per thread under a mutex;
// appending takes no lock. Each buffer has a `busy` flag set around every
// append (sequentially consistent, against the active flag), so stop() can
// turn recording off, wait until no thread is inside an append, and then
// read every buffer safely. A span that began in one Profile and ends after
// it stopped is dropped at its end (its token names the session); a span
// still open at stop() ends at the stop time, marked "unfinished".
//
// Spans. Each has a name, a Category, its thread, begin and end on the
// steady clock and its parent (the span open on that thread when it began:
// scopes are RAII, so spans nest on every thread). Op spans also carry input
// shapes, dtypes and device (Options::record_shapes) and, for an op whose
// inputs live on a CUDA device, a pair of timing events recorded on the
// current stream, resolved to device milliseconds when the profile stops
// (Options::cuda_events; through cuda::Event, i.e. the CUDA hooks).
//
// Memory. With Options::memory the CPU caching allocator's allocated and
// reserved bytes (and each CUDA device's that an op used) are sampled at
// every span end, kept when they changed: the trace's counter tracks.
//
// Self time. A span's self time is its duration less its direct children's.
// On one thread the self times of a span and all its descendants add up to
// the span's duration exactly (integer nanoseconds), so the table's self
// column over a "step" span's tree is the step time: the step span's own
// self row is the time no recorded scope covered (the "idle" share).
//
// Profiling never changes a computed value: it only reads shapes, dtypes,
// devices and allocator counters, and records events on the streams ops ran on.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>  // chrome_trace(); json.hpp in the files that use it

#include "kiln/core/op_scope.h"

namespace kiln::profiler {

enum class Category { Op, Backward, Loader, Optimizer, AllReduce, Checkpoint, User, Step };
const char* category_name(Category c);  // "op", "backward", "loader", ...

struct ProfileOptions {
  bool record_shapes = true;  // op spans' input shapes, dtypes and device
  bool memory = true;         // allocator counter samples
  bool cuda_events = true;    // device time of ops on CUDA tensors
};

// One recorded span (nanoseconds since the profile started).
struct Event {
  std::string name;
  Category category = Category::User;
  int thread = 0;        // 0: the thread that started the profile; then in order of first event
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  int64_t parent = -1;   // index in Profile::events() of the enclosing span on this thread, or -1
  int op_depth = 0;      // OpRecord::depth for op spans
  bool unfinished = false;
  std::string shapes;    // "[2, 3], [3]" (op and backward spans with record_shapes)
  std::string dtypes;    // "float32, float32"
  std::string device;    // "cpu", "cuda:0" (op spans)
  double device_ms = -1; // CUDA time of the op, -1 where none was measured
  int64_t step = -1;     // a step span's step number, -1 elsewhere
  int64_t duration_ns() const { return end_ns - begin_ns; }
};

// Allocator usage at one moment of the profile.
struct MemorySample {
  int64_t ts_ns = 0;
  std::string device;  // "cpu", "cuda:0"
  std::size_t allocated_bytes = 0;
  std::size_t reserved_bytes = 0;
};

// One row of key_averages(): all spans of one name (and shapes, when grouped).
struct KeyAverage {
  std::string name;
  std::string shapes;  // grouped by shapes only
  Category category = Category::User;
  int64_t calls = 0;
  int64_t total_ns = 0;  // durations (a span nested in a same-named one counts twice)
  int64_t self_ns = 0;
  double device_ms = 0;  // CUDA time summed where measured
};

struct KeyAveragesOptions {
  bool group_by_shapes = false;
  int thread = -1;  // -1: every thread; else only that Event::thread
};

class Profile {
 public:
  explicit Profile(ProfileOptions options = {});
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Ends recording (the destructor calls it); idempotent. The results below
  // are complete only after it.
  void stop();
  bool active() const { return active_; }

  const std::vector<Event>& events() const { return events_; }
  const std::vector<MemorySample>& memory_samples() const { return memory_; }
  // Sum of the durations of the "step" spans on `thread` (0: the profile's);
  // the profile's wall time when there is none.
  int64_t step_ns(int thread = 0) const;
  int64_t wall_ns() const { return wall_ns_; }

  // Rows sorted by self time, descending.
  std::vector<KeyAverage> key_average_rows(const KeyAveragesOptions& o = {}) const;
  // The rows as a table (calls, self, total, average, % of step), like
  // torch.profiler's key_averages().table(); at most `row_limit` rows (0: all).
  std::string key_averages(const KeyAveragesOptions& o = {}, size_t row_limit = 0) const;
  // The Chrome trace-event format: "X" spans, "M" thread names, "C" memory counters.
  nlohmann::json chrome_trace() const;
  // Writes chrome_trace() to `path` (atomically; an existing file is replaced).
  void export_chrome_trace(const std::string& path) const;

 private:
  ProfileOptions options_;
  bool active_ = false;
  uint32_t session_ = 0;
  int64_t wall_ns_ = 0;
  std::vector<Event> events_;
  std::vector<MemorySample> memory_;
};

// A named span on this thread while a Profile is active; nothing otherwise.
class RecordScope {
 public:
  explicit RecordScope(const char* name, Category category = Category::User) {
    if (kiln::detail::g_profiler_active.load(std::memory_order_relaxed)) [[unlikely]]
      begin(name, category, nullptr);
  }
  explicit RecordScope(const std::string& name, Category category = Category::User)
      : RecordScope(name.c_str(), category) {}
  // A "step" span of training step `step` (its number in the trace's arguments).
  RecordScope(const char* name, Category category, int64_t step) {
    if (kiln::detail::g_profiler_active.load(std::memory_order_relaxed)) [[unlikely]]
      begin(name, category, nullptr, step);
  }
  // With the shapes and dtypes of `tensors` as the span's arguments (backward nodes).
  RecordScope(const char* name, Category category, const std::vector<Tensor>& tensors) {
    if (kiln::detail::g_profiler_active.load(std::memory_order_relaxed)) [[unlikely]]
      begin(name, category, &tensors);
  }
  ~RecordScope() {
    if (token_ != 0) [[unlikely]] end();
  }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  void begin(const char* name, Category category, const std::vector<Tensor>* tensors, int64_t step = -1);
  void end();
  uint64_t token_ = 0;
};

// Writes `profile`'s Chrome trace to <dir>/<stem>.json and its key_averages
// table to <dir>/<stem>.txt, creating `dir`. Never replaces a file: when
// either exists, the stem gets a suffix (-2, -3, ...). Returns the trace's path.
std::string save_profile(const Profile& profile, const std::string& dir, const std::string& stem);

// Whether a Profile is recording now.
inline bool is_active() { return kiln::detail::g_profiler_active.load(std::memory_order_relaxed); }

}  // namespace kiln::profiler

namespace kiln::profiler::detail {

// Called by OpScope while the profiler is on (detail::g_profiler_active): an
// op starts on this thread (record has its name, inputs and depth; no outputs
// yet). Returns a token handed back to op_end (0: not recorded).
uint64_t op_begin(const OpRecord& record);
// The op ended (record now has its outputs; none if it threw).
void op_end(const OpRecord& record, uint64_t token);

}  // namespace kiln::profiler::detail
