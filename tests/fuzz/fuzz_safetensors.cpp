// Fuzz target: SafeTensorsFile::view_bytes on arbitrary bytes.
//
// Properties: parsing either succeeds or throws kiln::Error (anything else —
// a crash, a sanitizer report, another exception — is a bug); an accepted file
// upholds the invariants of nn/safetensors.h (tensors tile the data buffer, every
// data() span lies inside the input), and serializing it again yields a file
// that parses to the same tensors, bytes and metadata.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/safetensors.h"

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_safetensors: property violated: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  std::optional<kiln::SafeTensorsFile> file;
  try {
    file.emplace(kiln::SafeTensorsFile::view_bytes(input, "fuzz.safetensors"));
  } catch (const kiln::Error&) {
    return 0;  // rejected cleanly
  }

  size_t covered = 0;
  std::vector<kiln::SafeTensorEntry> entries;
  for (const kiln::SafeTensorInfo& info : file->tensors()) {
    const std::span<const uint8_t> bytes = file->data(info);
    require(bytes.size() == info.nbytes, "data() size is nbytes");
    require(info.nbytes == 0 || (bytes.data() >= data && bytes.data() + bytes.size() <= data + size),
            "data() lies inside the input");
    require(info.offset == covered, "tensors tile the buffer in order");
    covered += info.nbytes;
    require(file->find(info.name) == &info, "find() returns the listed tensor");
    for (int64_t d : info.shape) require(d >= 0, "dims are non-negative");
    bool converted = true;
    try {
      (void)file->kiln_dtype(info);
    } catch (const kiln::Error&) {
      converted = false;
    }
    require(converted == info.dtype.has_value(), "kiln_dtype() succeeds exactly for kiln dtypes");
    entries.push_back({info.name, info.dtype_str, info.shape, bytes.data(), bytes.size()});
  }

  // Round trip: what kiln wrote, kiln reads back identically.
  std::vector<uint8_t> again;
  try {
    again = kiln::serialize_safetensors(entries, file->metadata(), "roundtrip");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "an accepted file serializes again");
  }
  try {
    const kiln::SafeTensorsFile back = kiln::SafeTensorsFile::from_bytes(std::move(again), "roundtrip");
    require(back.metadata() == file->metadata(), "metadata round-trips");
    require(back.tensors().size() == file->tensors().size(), "tensor count round-trips");
    for (const kiln::SafeTensorInfo& info : file->tensors()) {
      const kiln::SafeTensorInfo* b = back.find(info.name);
      require(b && b->dtype_str == info.dtype_str && b->shape == info.shape, "tensor header round-trips");
      const auto x = file->data(info), y = back.data(*b);
      require(x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0),
              "tensor bytes round-trip");
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "a serialized file parses");
  }
  return 0;
}
