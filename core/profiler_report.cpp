// The profiler's outputs (Note [Profiler], core/profiler.h): the Chrome trace
// and the key_averages table.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/file_util.h"  // write_file_atomic
#include "core/profiler.h"

namespace kiln::profiler {
namespace {

double us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Self time of every event: its duration less its direct children's.
std::vector<int64_t> self_times(const std::vector<Event>& events) {
  std::vector<int64_t> self(events.size());
  for (size_t i = 0; i < events.size(); ++i) self[i] = events[i].duration_ns();
  for (const Event& e : events)
    if (e.parent >= 0) self[static_cast<size_t>(e.parent)] -= e.duration_ns();
  return self;
}

std::string format_ms(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", ns / 1e6);
  return buf;
}

std::string pad(std::string s, size_t width, bool left) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return left ? s + fill : fill + s;
}

}  // namespace

int64_t Profile::step_ns(int thread) const {
  int64_t total = 0;
  bool any = false;
  for (const Event& e : events_) {
    if (e.category != Category::Step || e.thread != thread) continue;
    total += e.duration_ns();
    any = true;
  }
  return any ? total : wall_ns_;
}

std::vector<KeyAverage> Profile::key_average_rows(const KeyAveragesOptions& o) const {
  const std::vector<int64_t> self = self_times(events_);
  std::map<std::tuple<std::string, std::string, Category>, KeyAverage> rows;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    if (o.thread >= 0 && e.thread != o.thread) continue;
    const std::string shapes = o.group_by_shapes ? e.shapes : "";
    KeyAverage& r = rows[{e.name, shapes, e.category}];
    r.name = e.name;
    r.shapes = shapes;
    r.category = e.category;
    ++r.calls;
    r.total_ns += e.duration_ns();
    r.self_ns += self[i];
    if (e.device_ms >= 0) r.device_ms += e.device_ms;
  }
  std::vector<KeyAverage> out;
  for (auto& [key, r] : rows) out.push_back(std::move(r));
  std::stable_sort(out.begin(), out.end(),
                   [](const KeyAverage& a, const KeyAverage& b) { return a.self_ns > b.self_ns; });
  return out;
}

std::string Profile::key_averages(const KeyAveragesOptions& o, size_t row_limit) const {
  const std::vector<KeyAverage> rows = key_average_rows(o);
  const double step = static_cast<double>(std::max<int64_t>(step_ns(o.thread < 0 ? 0 : o.thread), 1));
  size_t name_w = 4;
  for (const KeyAverage& r : rows) name_w = std::max(name_w, r.name.size());
  name_w = std::min<size_t>(name_w, 48);
  const bool shapes = o.group_by_shapes;
  const bool device = std::any_of(rows.begin(), rows.end(), [](const KeyAverage& r) { return r.device_ms > 0; });
  std::string s;
  auto line = [&](const std::vector<std::string>& cells) {
    static const size_t kWidth[] = {0, 10, 8, 14, 8, 14, 12};
    std::string l = pad(cells[0], name_w, true);
    for (size_t i = 1; i < 7; ++i) l += "  " + pad(cells[i], kWidth[i], i == 1);
    if (device) l += "  " + pad(cells[7], 12, false);
    if (shapes) l += "  " + cells[8];
    s += l + "\n";
  };
  line({"Name", "Category", "Calls", "Self ms", "Self %", "Total ms", "Avg ms", "Device ms", "Input shapes"});
  int64_t self_sum = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const KeyAverage& r = rows[i];
    self_sum += r.self_ns;
    if (row_limit > 0 && i >= row_limit) continue;
    char share[16];
    std::snprintf(share, sizeof share, "%.2f%%", 100.0 * static_cast<double>(r.self_ns) / step);
    char dev[32];
    std::snprintf(dev, sizeof dev, "%.3f", r.device_ms);
    line({r.name.substr(0, name_w), category_name(r.category), std::to_string(r.calls),
          format_ms(static_cast<double>(r.self_ns)), share, format_ms(static_cast<double>(r.total_ns)),
          format_ms(static_cast<double>(r.total_ns) / static_cast<double>(r.calls)), dev, r.shapes});
  }
  if (row_limit > 0 && rows.size() > row_limit)
    s += "... " + std::to_string(rows.size() - row_limit) + " more rows\n";
  char foot[160];
  std::snprintf(foot, sizeof foot, "Self time of all rows: %s ms; profiled step time: %s ms%s\n",
                format_ms(static_cast<double>(self_sum)).c_str(), format_ms(step).c_str(),
                o.thread < 0 ? " (rows from every thread; the step on thread 0)" : "");
  s += foot;
  return s;
}

nlohmann::json Profile::chrome_trace() const {
  using nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "kiln"}}}});
  int threads = 1;
  for (const Event& e : events_) threads = std::max(threads, e.thread + 1);
  for (int t = 0; t < threads; ++t)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", t},
                      {"args", {{"name", t == 0 ? std::string("profiled thread") : "thread " + std::to_string(t)}}}});
  // Per thread in begin order, an enclosing span before the spans it encloses.
  std::vector<size_t> order(events_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = events_[a], &y = events_[b];
    return std::tuple(x.thread, x.begin_ns, -x.end_ns) < std::tuple(y.thread, y.begin_ns, -y.end_ns);
  });
  for (size_t i : order) {
    const Event& e = events_[i];
    json args = json::object();
    if (!e.shapes.empty()) args["input_shapes"] = e.shapes;
    if (!e.dtypes.empty()) args["input_dtypes"] = e.dtypes;
    if (!e.device.empty()) args["device"] = e.device;
    if (e.device_ms >= 0) args["device_ms"] = e.device_ms;
    if (e.category == Category::Op) args["op_depth"] = e.op_depth;
    if (e.step >= 0) args["step"] = e.step;
    if (e.unfinished) args["unfinished"] = true;
    events.push_back({{"name", e.name},
                      {"cat", category_name(e.category)},
                      {"ph", "X"},
                      {"ts", us(e.begin_ns)},
                      {"dur", us(e.duration_ns())},
                      {"pid", 1},
                      {"tid", e.thread},
                      {"args", std::move(args)}});
  }
  for (const MemorySample& m : memory_)
    events.push_back({{"name", "memory " + m.device},
                      {"ph", "C"},
                      {"ts", us(m.ts_ns)},
                      {"pid", 1},
                      {"args", {{"allocated", m.allocated_bytes}, {"reserved", m.reserved_bytes}}}});
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void Profile::export_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace().dump() + "\n";
  write_file_atomic(path, text);
}

std::string save_profile(const Profile& profile, const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  fs::path trace, table;
  for (int n = 1;; ++n) {
    const std::string name = n == 1 ? stem : stem + "-" + std::to_string(n);
    trace = fs::path(dir) / (name + ".json");
    table = fs::path(dir) / (name + ".txt");
    if (!fs::exists(trace) && !fs::exists(table)) break;
  }
  profile.export_chrome_trace(trace.string());
  const std::string text = profile.key_averages();
  write_file_atomic(table.string(), text);
  return trace.string();
}

}  // namespace kiln::profiler
