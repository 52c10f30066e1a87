#include "train/metric_log.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "data/integrity.h"
#include "train/tensorboard.pb.h"

namespace kiln::train {

namespace fs = std::filesystem;

// ---- CRC32C + TFRecord ------------------------------------------------------

uint32_t crc32c(std::span<const uint8_t> data) { return data::crc32c(data); }

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

namespace {

template <typename T>
std::array<uint8_t, sizeof(T)> little_endian(T value) {
  std::array<uint8_t, sizeof(T)> bytes{};
  for (size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
  return bytes;
}

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::FILE* create_new_file(const fs::path& file) {
  std::FILE* f = std::fopen(file.c_str(), "wbx");  // "x": fail if it exists
  KILN_CHECK(f != nullptr, "TensorBoardWriter: cannot create ", file, ": ", std::strerror(errno));
  return f;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const fs::path& file) : path_(file), file_(create_new_file(file), &std::fclose) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_file_version("brain.Event:2");
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::add_scalars(int64_t step, const std::map<std::string, double>& scalars, double wall_time) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::write_record(const std::string& data) {
  const auto length = little_endian<uint64_t>(data.size());
  const auto length_crc = little_endian<uint32_t>(mask_crc32c(crc32c(length)));
  const auto data_crc = little_endian<uint32_t>(mask_crc32c(crc32c(as_bytes(data))));
  std::FILE* f = file_.get();
  const bool ok = std::fwrite(length.data(), 1, length.size(), f) == length.size() &&
                  std::fwrite(length_crc.data(), 1, length_crc.size(), f) == length_crc.size() &&
                  std::fwrite(data.data(), 1, data.size(), f) == data.size() &&
                  std::fwrite(data_crc.data(), 1, data_crc.size(), f) == data_crc.size() && std::fflush(f) == 0;
  KILN_CHECK(ok, "TensorBoardWriter: cannot write to ", path_, ": ", std::strerror(errno));
}

// ---- JSONL ------------------------------------------------------------------

std::map<std::string, ScalarSeries> read_metrics_jsonl(const fs::path& path) {
  // Note [Bounded input]: a regular file only (a FIFO would block the open).
  check_regular_file(path.string(), "read_metrics_jsonl: " + path.string());
  std::ifstream in(path);
  KILN_CHECK(in.is_open(), "read_metrics_jsonl: cannot open ", path);
  std::map<std::string, ScalarSeries> series;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    // Note [Bounded JSON]: the depth limit stops the parse of a hostile line.
    const nlohmann::json j =
        parse_json_bounded(line, "read_metrics_jsonl: " + path.string() + " line " + std::to_string(line_no));
    KILN_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer(), "read_metrics_jsonl: ", path,
               " line ", line_no, " is not a JSON object with an integer \"step\"");
    const int64_t step = j["step"].get<int64_t>();
    for (const auto& [name, value] : j.items()) {
      if (name == "step") continue;
      KILN_CHECK(value.is_number() || value.is_null(), "read_metrics_jsonl: ", path, " line ", line_no, ": \"", name,
                 "\" is not a number");
      ScalarSeries& s = series[name];
      const auto keep = std::lower_bound(s.steps.begin(), s.steps.end(), step) - s.steps.begin();
      s.steps.resize(static_cast<size_t>(keep));
      s.values.resize(static_cast<size_t>(keep));
      s.steps.push_back(step);
      s.values.push_back(value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>());
    }
  }
  KILN_CHECK(!in.bad(), "read_metrics_jsonl: error reading ", path);
  return series;
}

// ---- SVG plot ---------------------------------------------------------------

namespace {

constexpr double kSvgWidth = 800, kTitleHeight = 40, kPanelHeight = 280;
constexpr double kLeft = 90, kRight = kSvgWidth - 30, kPanelTop = 32, kPanelBottom = kPanelHeight - 48;
constexpr size_t kMaxPlottedPoints = 4000;  // longer series are thinned to this many

std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

struct Range {
  double lo, hi;
};

// lo < hi always: a single value gets a margin around it.
Range padded_range(double lo, double hi, double margin_fraction) {
  if (lo == hi) {
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    return {lo - pad, hi + pad};
  }
  const double pad = (hi - lo) * margin_fraction;
  return {lo - pad, hi + pad};
}

// About `target` round tick values (1, 2 or 5 times a power of ten) in [lo, hi].
std::vector<double> nice_ticks(Range r, int target) {
  const double raw = (r.hi - r.lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * magnitude;
  std::vector<double> ticks;
  if (!std::isfinite(step) || step <= 0) return ticks;
  const double first = std::ceil(r.lo / step);
  // By index, and bounded: near the end of double precision t += step stalls.
  for (int k = 0; k <= 4 * target; ++k) {
    const double t = (first + k) * step;
    if (t > r.hi + step * 1e-9) break;
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string panel_title(const std::string& name) {
  if (name == "lr") return "learning rate";
  if (name == "tokens_per_s") return "tokens/s";
  return name;
}

// Polylines of the finite points (a non-finite value breaks the line) and
// the axes, ticks and labels of one panel whose top edge is at y0.
void draw_panel(std::ostringstream& svg, const std::string& name, const ScalarSeries* series, double y0,
                const char* color) {
  const double top = y0 + kPanelTop, bottom = y0 + kPanelBottom;
  svg << "<text x=\"" << kSvgWidth / 2 << "\" y=\"" << y0 + 20
      << "\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(panel_title(name))
      << "</text>\n";
  svg << "<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << kRight - kLeft << "\" height=\"" << bottom - top
      << "\" fill=\"none\" stroke=\"#444\"/>\n";

  std::vector<size_t> finite;
  if (series != nullptr)
    for (size_t i = 0; i < series->values.size(); ++i)
      if (std::isfinite(series->values[i])) finite.push_back(i);
  if (finite.empty()) {
    svg << "<text x=\"" << (kLeft + kRight) / 2 << "\" y=\"" << (top + bottom) / 2
        << "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n";
    return;
  }
  double xmin = static_cast<double>(series->steps[finite.front()]), xmax = xmin;
  double ymin = series->values[finite.front()], ymax = ymin;
  for (const size_t i : finite) {
    xmin = std::min(xmin, static_cast<double>(series->steps[i]));
    xmax = std::max(xmax, static_cast<double>(series->steps[i]));
    ymin = std::min(ymin, series->values[i]);
    ymax = std::max(ymax, series->values[i]);
  }
  const Range xr = padded_range(xmin, xmax, 0.0), yr = padded_range(ymin, ymax, 0.05);
  const auto px = [&](double x) { return kLeft + (x - xr.lo) / (xr.hi - xr.lo) * (kRight - kLeft); };
  const auto py = [&](double y) { return bottom - (y - yr.lo) / (yr.hi - yr.lo) * (bottom - top); };

  for (const double t : nice_ticks(xr, 8)) {
    svg << "<line x1=\"" << fmt("%.2f", px(t)) << "\" y1=\"" << bottom << "\" x2=\"" << fmt("%.2f", px(t)) << "\" y2=\""
        << bottom + 5 << "\" stroke=\"#444\"/><text x=\"" << fmt("%.2f", px(t)) << "\" y=\"" << bottom + 19
        << "\" text-anchor=\"middle\" font-size=\"11\">" << fmt("%.0f", t) << "</text>\n";
  }
  for (const double t : nice_ticks(yr, 5)) {
    svg << "<line x1=\"" << kLeft - 5 << "\" y1=\"" << fmt("%.2f", py(t)) << "\" x2=\"" << kRight << "\" y2=\""
        << fmt("%.2f", py(t)) << "\" stroke=\"#ddd\"/><text x=\"" << kLeft - 8 << "\" y=\"" << fmt("%.2f", py(t) + 4)
        << "\" text-anchor=\"end\" font-size=\"11\">" << fmt("%.4g", t) << "</text>\n";
  }
  svg << "<text x=\"" << (kLeft + kRight) / 2 << "\" y=\"" << bottom + 38
      << "\" text-anchor=\"middle\" font-size=\"12\">step</text>\n";

  const size_t stride = (series->values.size() + kMaxPlottedPoints - 1) / kMaxPlottedPoints;
  std::string points;
  const auto flush_line = [&] {
    if (!points.empty())
      svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"" << points << "\"/>\n";
    points.clear();
  };
  for (size_t i = 0; i < series->values.size(); ++i) {
    const bool last = i + 1 == series->values.size();
    if (!std::isfinite(series->values[i])) {
      flush_line();
      continue;
    }
    if (i % stride != 0 && !last) continue;
    points += fmt("%.2f", px(static_cast<double>(series->steps[i]))) + "," + fmt("%.2f", py(series->values[i])) + " ";
  }
  flush_line();
  if (finite.size() == 1) {
    const size_t i = finite.front();
    svg << "<circle cx=\"" << fmt("%.2f", px(static_cast<double>(series->steps[i]))) << "\" cy=\""
        << fmt("%.2f", py(series->values[i])) << "\" r=\"3\" fill=\"" << color << "\"/>\n";
  }
}

}  // namespace

void write_svg_plot(const fs::path& path, const std::map<std::string, ScalarSeries>& series,
                    const std::vector<std::string>& panels, const std::string& title) {
  KILN_CHECK(!panels.empty(), "write_svg_plot: no panels requested for ", path);
  for (const auto& [name, s] : series)
    KILN_CHECK(s.steps.size() == s.values.size(), "write_svg_plot: series \"", name, "\" has ", s.steps.size(),
               " steps but ", s.values.size(), " values");
  static constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  const double height = kTitleHeight + kPanelHeight * static_cast<double>(panels.size());
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kSvgWidth << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << kSvgWidth << " " << height << "\" font-family=\"sans-serif\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kSvgWidth / 2 << "\" y=\"26\" text-anchor=\"middle\" font-size=\"18\">" << xml_escape(title)
      << "</text>\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const auto it = series.find(panels[p]);
    draw_panel(svg, panels[p], it == series.end() ? nullptr : &it->second,
               kTitleHeight + kPanelHeight * static_cast<double>(p), kColors[p % std::size(kColors)]);
  }
  svg << "</svg>\n";

  const fs::path temp = fs::path(path.string() + ".tmp." + std::to_string(getpid()));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(out.is_open(), "write_svg_plot: cannot create ", temp);
    out << svg.str();
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      fail("write_svg_plot: cannot write ", temp);
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    fail("write_svg_plot: cannot rename ", temp, " to ", path, ": ", ec.message());
  }
}

// ---- MetricLog --------------------------------------------------------------

namespace {

fs::path created_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec && fs::is_directory(dir), "MetricLog: cannot create output directory ", dir, ": ",
             ec ? ec.message() : "not a directory");
  return dir;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

fs::path new_event_file(const fs::path& dir) {
  const std::string base =
      "events.out.tfevents." + std::to_string(static_cast<int64_t>(unix_seconds())) + "." + host_name();
  fs::path file = dir / base;
  for (int n = 1; fs::exists(file); ++n) file = dir / (base + "." + std::to_string(n));
  return file;
}

// A crash while appending can leave a last line without its newline; cut it
// off so the lines appended next stay whole JSON objects.
void drop_torn_last_line(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec || size == 0) return;  // no file yet: nothing to repair
  std::ifstream in(file, std::ios::binary);
  KILN_CHECK(in.is_open(), "MetricLog: cannot read ", file);
  std::string content(size, '\0');
  in.read(content.data(), static_cast<std::streamsize>(size));
  KILN_CHECK(in.gcount() == static_cast<std::streamsize>(size), "MetricLog: cannot read ", file);
  if (content.back() == '\n') return;
  const size_t last_newline = content.rfind('\n');
  const size_t keep = last_newline == std::string::npos ? 0 : last_newline + 1;
  fs::resize_file(file, keep, ec);
  KILN_CHECK(!ec, "MetricLog: cannot truncate the incomplete last line of ", file, ": ", ec.message());
}

fs::path prepared_jsonl(const fs::path& dir) {
  fs::path file = dir / "metrics.jsonl";
  drop_torn_last_line(file);
  return file;
}

}  // namespace

MetricLog::MetricLog(const fs::path& output_dir)
    : output_dir_(created_dir(output_dir)),
      jsonl_path_(prepared_jsonl(output_dir_)),
      jsonl_(jsonl_path_, std::ios::app),
      events_(new_event_file(output_dir_)) {
  KILN_CHECK(jsonl_.is_open(), "MetricLog: cannot open ", jsonl_path_, " for appending");
}

void MetricLog::log(int64_t step, const std::map<std::string, double>& scalars) {
  KILN_CHECK(step >= 0, "MetricLog::log: negative step ", step);
  nlohmann::ordered_json line;
  line["step"] = step;
  for (const auto& [name, value] : scalars) {
    KILN_CHECK(!name.empty() && name != "step", "MetricLog::log: invalid metric name \"", name, "\"");
    line[name] = value;  // nlohmann writes NaN / inf as null
  }
  jsonl_ << line.dump() << '\n' << std::flush;
  KILN_CHECK(jsonl_.good(), "MetricLog::log: cannot write to ", jsonl_path_);
  events_.add_scalars(step, scalars, unix_seconds());
}

fs::path MetricLog::write_plot(const fs::path& path) const {
  const fs::path target = path.empty() ? output_dir_ / "training.svg" : path;
  write_svg_plot(target, read_metrics_jsonl(jsonl_path_), {"loss", "lr"});
  return target;
}

}  // namespace kiln::train
