// Checksums of the files kiln writes: CRC-32C (ISA-L's crc32_iscsi) and
// sizes, recorded when a file is written and checked when it is read back
// (checkpoint manifests, train/checkpoint.h; corpus indexes, data/corpus.h).
//
//   Crc32c c;  c.update(bytes, n);  c.value()   // incremental
//   FileDigest d = file_digest("model.safetensors");   // {bytes, crc32c}
//   crc32c_hex(d.crc32c) == "e3069283"
//
// CRC-32C catches torn writes, truncation and bit rot, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace kiln::data {

// CRC-32C (Castagnoli, reflected, init and final xor 0xffffffff), fed
// incrementally: Crc32c of "123456789" is 0xe3069283.
class Crc32c {
 public:
  void update(const void* data, size_t n);
  uint32_t value() const { return state_ ^ 0xffffffffu; }

 private:
  uint32_t state_ = 0xffffffffu;
};

uint32_t crc32c(std::span<const uint8_t> data);

struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  bool operator==(const FileDigest&) const = default;
};

// Size and CRC-32C of a regular file, read once sequentially; kiln::Error
// naming the file when it is missing, not a regular file or unreadable.
FileDigest file_digest(const std::string& path);

// Eight lower-case hex digits, and back (nullopt unless exactly that).
std::string crc32c_hex(uint32_t crc);
std::optional<uint32_t> parse_crc32c_hex(const std::string& hex);

}  // namespace kiln::data
