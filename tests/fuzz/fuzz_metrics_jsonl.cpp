// Fuzz target: read_metrics_jsonl, then write_svg_plot of what it read
// (train/metric_log.h). kiln reads metrics.jsonl back at the end of training
// (MetricLog::write_plot draws OUTPUT/training.svg from the whole file, lines
// of earlier resumed processes included).
//
// Input: the metrics.jsonl itself, written to a scratch file.
//
// Properties: reading either succeeds or throws kiln::Error; each series read
// has as many values as steps, strictly increasing steps (a step not after
// the last one replaces the points from it on); plotting the series (the
// default "loss" and "lr" panels, then every series read, at most 8 panels)
// never throws and writes a file that ends in "</svg>\n".
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "scratch.h"
#include "train/metric_log.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_metrics_jsonl", what); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  const std::string dir = scratch.fresh_dir();
  kiln_fuzz::write_file(dir + "/metrics.jsonl", kiln_fuzz::as_text(data, size));
  std::map<std::string, kiln::train::ScalarSeries> series;
  try {
    series = kiln::train::read_metrics_jsonl(dir + "/metrics.jsonl");
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return 0;  // rejected cleanly
  }

  std::vector<std::string> panels = {"loss", "lr"};
  for (const auto& [name, s] : series) {
    require(s.steps.size() == s.values.size() && !s.steps.empty(), "one value per step, no empty series");
    for (size_t i = 1; i < s.steps.size(); ++i) require(s.steps[i - 1] < s.steps[i], "steps strictly increase");
    if (panels.size() < 8) panels.push_back(name);
  }
  const std::string svg_path = dir + "/training.svg";
  try {
    kiln::train::write_svg_plot(svg_path, series, panels);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "plotting what was read does not throw");
  }
  std::ifstream in(svg_path, std::ios::binary);
  const std::string svg{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  require(svg.size() >= 7 && svg.compare(svg.size() - 7, 7, "</svg>\n") == 0, "the plot is a whole SVG file");
  return 0;
}
