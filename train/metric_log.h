// Training metrics on disk: JSON Lines, TensorBoard event files, SVG plot.
//
// MetricLog(output_dir) writes, for every log(step, scalars) call:
//   output_dir/metrics.jsonl  one JSON object per line, {"step": s, "<name>": value, ...},
//                             appended (a resumed run continues the file) and
//                             flushed per line, so a crash loses nothing logged.
//                             JSON has no NaN/inf: such values are written as null.
//   output_dir/events.out.tfevents.<unix seconds>.<hostname>[.<n>]
//                             a new TensorBoard event file per MetricLog (".<n>"
//                             added if the name exists): TFRecords of tensorflow.Event
//                             protos (train/tensorboard.proto), first
//                             {file_version: "brain.Event:2"}, then one event per
//                             log() with a simple_value per scalar, tagged by name.
// TFRecord framing: uint64 length (little-endian), uint32 masked CRC32C of those
// 8 bytes, the data, uint32 masked CRC32C of the data;
// mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
//
// write_svg_plot draws one panel per series (by default "loss" and "lr"),
// value against step with tick-labelled axes, and replaces the file atomically
// (temporary file + rename). Non-finite values are left out of the plot.
//
// Every file error is a kiln::Error naming the file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::train {

// CRC-32C (Castagnoli, reflected, init and final xor 0xffffffff):
// crc32c("123456789") == 0xe3069283.
uint32_t crc32c(std::span<const uint8_t> data);
// TFRecord's masking of a CRC (see above).
uint32_t mask_crc32c(uint32_t crc);

// Appends TFRecord-framed tensorflow.Event records to a new file.
class TensorBoardWriter {
 public:
  // Creates `file` (kiln::Error if it exists or cannot be created) and writes
  // the file_version event.
  explicit TensorBoardWriter(const std::filesystem::path& file);
  // One Event{wall_time, step, summary{value{tag, simple_value (float32)}...}}.
  void add_scalars(int64_t step, const std::map<std::string, double>& scalars, double wall_time);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
};

// Points of one scalar, in logging order.
struct ScalarSeries {
  std::vector<int64_t> steps;
  std::vector<double> values;
};

// Reads a metrics.jsonl back into one series per name (null values read as
// NaN). When a step is not after the series' last one (a run resumed from an
// earlier checkpoint into the same file), the points from that step on are
// dropped first, so the later run's values replace them.
// kiln::Error naming the file and line for a line that is not such an object.
std::map<std::string, ScalarSeries> read_metrics_jsonl(const std::filesystem::path& path);

// An SVG with one panel per name in `panels` that has a series in `series`
// (a missing or empty one shows "no data"), titled `title`.
void write_svg_plot(const std::filesystem::path& path, const std::map<std::string, ScalarSeries>& series,
                    const std::vector<std::string>& panels = {"loss", "lr"},
                    const std::string& title = "kiln training");

class MetricLog {
 public:
  // Creates output_dir if needed.
  explicit MetricLog(const std::filesystem::path& output_dir);

  // step >= 0; names non-empty and not "step". Writes both files.
  void log(int64_t step, const std::map<std::string, double>& scalars);

  const std::filesystem::path& jsonl_path() const { return jsonl_path_; }
  const std::filesystem::path& events_path() const { return events_.path(); }

  // write_svg_plot(path, read_metrics_jsonl(jsonl_path()), {"loss", "lr"}):
  // the whole run, including what earlier processes of a resumed run logged.
  // Default path: output_dir/training.svg. Returns the path written.
  std::filesystem::path write_plot(const std::filesystem::path& path = {}) const;

 private:
  std::filesystem::path output_dir_;
  std::filesystem::path jsonl_path_;
  std::ofstream jsonl_;
  TensorBoardWriter events_;
};

}  // namespace kiln::train
