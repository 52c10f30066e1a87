// train/metric_log.h: CRC32C vectors, metrics.jsonl round trip, TensorBoard
// event files read back by the tensorboard PyPI package, and the SVG plot
// parsed by Python's xml.etree (tests/reference/read_tensorboard.py, run with
// KILN_PYTHON, default KILN_DEFAULT_PYTHON).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "train/metric_log.h"
#include "test_util.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    path = fs::temp_directory_path() / ("kiln_test_metric_log_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

using testing::env_or;

// Runs read_tensorboard.py MODE ARG; returns its stdout lines (kiln::Error
// when it fails, with the command).
std::vector<std::string> run_reference(const std::string& mode, const fs::path& arg) {
  const std::string cmd = "'" + env_or("KILN_PYTHON", KILN_DEFAULT_PYTHON) + "' '" + KILN_SOURCE_DIR +
                          "/tests/reference/read_tensorboard.py' " + mode + " '" + arg.string() + "'";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) fail("cannot run ", cmd);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("reference script failed: ", cmd);
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(MetricLog, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c(bytes("123456789")), 0xe3069283u);
  EXPECT_EQ(crc32c(bytes(std::string(32, '\0'))), 0x8a9136aau);  // RFC 3720 B.4
  EXPECT_EQ(crc32c({}), 0u);
  EXPECT_EQ(mask_crc32c(0xe3069283u), 0xc78ab0e5u);  // ((c >> 15) | (c << 17)) + 0xa282ead8
  EXPECT_EQ(mask_crc32c(0u), 0xa282ead8u);
}

TEST(MetricLog, JsonlLinesParseBack) {
  ScratchDir dir;
  {
    MetricLog log(dir.path / "run");  // creates the directory
    log.log(0, {{"loss", 10.5}, {"lr", 0.0}});
    log.log(10, {{"loss", 0.1}, {"lr", 2.5e-5}, {"eval/accuracy", 0.875}});
    log.log(20, {{"loss", std::numeric_limits<double>::quiet_NaN()}});
    // Flushed per line: readable before the log is closed.
    EXPECT_EQ(read_lines(log.jsonl_path()).size(), 3u);
  }
  const auto lines = read_lines(dir.path / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], R"({"step":0,"loss":10.5,"lr":0.0})");
  const auto second = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(second.at("step").get<int64_t>(), 10);
  EXPECT_EQ(second.at("loss").get<double>(), 0.1);  // exact round trip
  EXPECT_EQ(second.at("lr").get<double>(), 2.5e-5);
  EXPECT_EQ(second.at("eval/accuracy").get<double>(), 0.875);
  EXPECT_EQ(lines[2], R"({"step":20,"loss":null})");

  const auto series = read_metrics_jsonl(dir.path / "run" / "metrics.jsonl");
  ASSERT_EQ(series.at("loss").steps, (std::vector<int64_t>{0, 10, 20}));
  EXPECT_EQ(series.at("loss").values[1], 0.1);
  EXPECT_TRUE(std::isnan(series.at("loss").values[2]));
  EXPECT_EQ(series.at("eval/accuracy").steps, std::vector<int64_t>{10});
}

TEST(MetricLog, ResumedRunAppendsAndReplacesLaterSteps) {
  ScratchDir dir;
  {
    MetricLog log(dir.path);
    for (int64_t step : {0, 10, 20, 30}) log.log(step, {{"loss", 1.0}});
  }
  // A crash mid-line leaves a torn last line; the next MetricLog cuts it off.
  { std::ofstream(dir.path / "metrics.jsonl", std::ios::app) << R"({"step":40,"lo)"; }
  {
    MetricLog log(dir.path);  // resumed from the step-20 checkpoint
    log.log(20, {{"loss", 2.0}});
    log.log(30, {{"loss", 3.0}});
  }
  EXPECT_EQ(read_lines(dir.path / "metrics.jsonl").size(), 6u);
  const auto loss = read_metrics_jsonl(dir.path / "metrics.jsonl").at("loss");
  EXPECT_EQ(loss.steps, (std::vector<int64_t>{0, 10, 20, 30}));
  EXPECT_EQ(loss.values, (std::vector<double>{1.0, 1.0, 2.0, 3.0}));
  // Two MetricLogs (possibly in the same second) each made their own event file.
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path))
    event_files += entry.path().filename().string().starts_with("events.out.tfevents.");
  EXPECT_EQ(event_files, 2);
}

TEST(MetricLog, Errors) {
  ScratchDir dir;
  MetricLog log(dir.path);
  EXPECT_THROW(log.log(-1, {{"loss", 1.0}}), Error);
  EXPECT_THROW(log.log(1, {{"step", 1.0}}), Error);
  EXPECT_THROW(log.log(1, {{"", 1.0}}), Error);
  { std::ofstream(dir.path / "bad.jsonl") << "{\"step\":1,\"loss\":1}\nnot json\n"; }
  try {
    read_metrics_jsonl(dir.path / "bad.jsonl");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_metrics_jsonl(dir.path / "missing.jsonl"), Error);
  { std::ofstream(dir.path / "file") << "x"; }
  EXPECT_THROW(MetricLog(dir.path / "file"), Error);          // not a directory
  EXPECT_THROW(TensorBoardWriter(log.events_path()), Error);  // exists already
}

TEST(MetricLog, TensorBoardReadsTheEventFile) {
  ScratchDir dir;
  {
    MetricLog log(dir.path);
    EXPECT_TRUE(log.events_path().filename().string().starts_with("events.out.tfevents."));
    log.log(0, {{"loss", 10.5}, {"lr", 0.0}});
    log.log(10, {{"loss", 7.25}, {"lr", 1e-4}, {"tokens_per_s", 1234.5}});
    log.log(20, {{"loss", 6.1}, {"lr", 2e-4}, {"eval/accuracy", 0.875}});
  }
  const auto lines = run_reference("events", dir.path);
  const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  const std::vector<std::tuple<std::string, int64_t, double>> expected = {{"eval/accuracy", 20, 0.875},
                                                                          {"loss", 0, 10.5},
                                                                          {"loss", 10, 7.25},
                                                                          {"loss", 20, f32(6.1)},
                                                                          {"lr", 0, 0.0},
                                                                          {"lr", 10, f32(1e-4)},
                                                                          {"lr", 20, f32(2e-4)},
                                                                          {"tokens_per_s", 10, 1234.5}};
  ASSERT_EQ(lines.size(), expected.size() + 2) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "file_version brain.Event:2");
  EXPECT_EQ(lines[1], "accumulator_version 2.0");
  for (size_t i = 0; i < expected.size(); ++i) {
    std::istringstream in(lines[i + 2]);
    std::string kind, tag, value;
    int64_t step = -1;
    in >> kind >> tag >> step >> value;
    EXPECT_EQ(kind, "scalar") << lines[i + 2];
    EXPECT_EQ(tag, std::get<0>(expected[i])) << lines[i + 2];
    EXPECT_EQ(step, std::get<1>(expected[i])) << lines[i + 2];
    EXPECT_EQ(std::strtod(value.c_str(), nullptr), std::get<2>(expected[i])) << lines[i + 2];
  }
}

TEST(MetricLog, SvgPlotParsesAsXml) {
  ScratchDir dir;
  fs::path svg;
  {
    MetricLog log(dir.path);
    for (int64_t step = 0; step <= 100; step += 10) {
      const double lr = step < 30 ? 1e-4 * step / 30 : 1e-4 * (100 - step) / 70;
      log.log(step, {{"loss", 8.0 / (1.0 + 0.05 * static_cast<double>(step))}, {"lr", lr}});
    }
    svg = log.write_plot();
  }
  EXPECT_EQ(svg, dir.path / "training.svg");
  std::ifstream in(svg);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_TRUE(text.starts_with("<svg")) << text.substr(0, 80);
  for (const auto& entry : fs::directory_iterator(dir.path))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << "left behind: " << entry.path();

  const auto lines = run_reference("svg", svg);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "root svg");
  std::vector<std::string> polylines;
  std::vector<std::string> texts;
  for (const auto& line : lines) {
    if (line.starts_with("polyline ")) polylines.push_back(line);
    if (line.starts_with("text ")) texts.push_back(line.substr(5));
  }
  EXPECT_EQ(polylines, (std::vector<std::string>{"polyline 11", "polyline 11"}));  // loss, lr: 11 points each
  const auto has_text = [&](const std::string& t) { return std::find(texts.begin(), texts.end(), t) != texts.end(); };
  EXPECT_TRUE(has_text("kiln training"));
  EXPECT_TRUE(has_text("loss"));
  EXPECT_TRUE(has_text("learning rate"));
  EXPECT_TRUE(has_text("step"));
  EXPECT_TRUE(has_text("100"));     // an x tick label
  EXPECT_TRUE(has_text("0.0001"));  // a y tick label of the lr panel
}

TEST(MetricLog, SvgPlotEdgeCases) {
  ScratchDir dir;
  fs::create_directories(dir.path);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, ScalarSeries> series;
  series["loss"] = {{0, 1, 2, 3, 4}, {5.0, 4.0, nan, 3.0, 2.0}};  // NaN breaks the line in two
  series["lr"] = {{7}, {0.5}};                                    // one point: a dot
  write_svg_plot(dir.path / "p.svg", series, {"loss", "lr", "grad_norm"}, "a <b> & \"c\"");
  const auto lines = run_reference("svg", dir.path / "p.svg");
  std::vector<std::string> polylines;
  bool no_data = false, title = false;
  for (const auto& line : lines) {
    if (line.starts_with("polyline ")) polylines.push_back(line);
    no_data |= line == "text no data";
    title |= line == "text a <b> & \"c\"";
  }
  EXPECT_EQ(polylines, (std::vector<std::string>{"polyline 2", "polyline 2", "polyline 1"}));
  EXPECT_TRUE(no_data);  // grad_norm has no series
  EXPECT_TRUE(title);    // escaped in the file, unescaped by the parser

  series["bad"] = {{1, 2}, {1.0}};
  EXPECT_THROW(write_svg_plot(dir.path / "q.svg", series), Error);
  EXPECT_THROW(write_svg_plot(dir.path / "missing_dir" / "q.svg", {}), Error);
}

}  // namespace
}  // namespace kiln::train
