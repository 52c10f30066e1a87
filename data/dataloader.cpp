#include "data/dataloader.h"

#include <cmath>

namespace kiln::data {

void check_options(const DataLoaderOptions& options) {
  KILN_CHECK(options.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options.num_workers);
  KILN_CHECK(options.prefetch_factor >= 1, "DataLoader: prefetch_factor must be >= 1, got ",
             options.prefetch_factor);
  KILN_CHECK(std::isfinite(options.timeout_seconds) && options.timeout_seconds >= 0,
             "DataLoader: timeout_seconds must be finite and >= 0, got ", options.timeout_seconds);
}

std::map<std::string, int64_t> LoaderState::to_map() const {
  std::map<std::string, int64_t> m{{"epoch", epoch}, {"batches_consumed", batches_consumed}};
  if (epoch_start != 0) m["epoch_start"] = epoch_start;
  return m;
}

LoaderState LoaderState::from_map(const std::map<std::string, int64_t>& map) {
  auto get = [&](const char* key) {
    const auto it = map.find(key);
    KILN_CHECK(it != map.end(), "LoaderState: key \"", key, "\" is missing");
    KILN_CHECK(it->second >= 0, "LoaderState: \"", key, "\" must be >= 0, got ", it->second);
    return it->second;
  };
  LoaderState s{get("epoch"), get("batches_consumed")};
  if (map.count("epoch_start")) s.epoch_start = get("epoch_start");
  return s;
}

namespace detail {

std::string sample_failure_message(size_t index, const std::string& what) {
  return kiln::detail::str_cat("DataLoader: worker failed on sample ", index, ": ", what);
}

std::string collate_failure_message(size_t batch, int64_t epoch, const std::string& what) {
  return kiln::detail::str_cat("DataLoader: collate failed on batch ", batch, " of epoch ", epoch, ": ", what);
}

std::string timeout_message(double seconds, size_t batch, int64_t epoch, int64_t sample) {
  const std::string where = sample >= 0 ? kiln::detail::str_cat("a worker is loading sample ", sample)
                                        : std::string("no worker has started it");
  return kiln::detail::str_cat("DataLoader: timed out after ", seconds, " s (timeout_seconds) waiting for batch ",
                               batch, " of epoch ", epoch, "; ", where);
}

}  // namespace detail
}  // namespace kiln::data
