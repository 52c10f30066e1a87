// safetensors reading (memory-mapped, zero-copy) and writing (atomic).
//
// File layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON
//   { "<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...,
//     "__metadata__": {"<key>": "<value>", ...} (optional) }
// then the data buffer; offsets are relative to the buffer start (byte 8 + N).
//
// Invariants of a SafeTensorsFile once open()/from_bytes()/view_bytes() return
// (anything else throws kiln::Error naming the file and the problem):
//   - open(): the path names a regular file (Note [Bounded input], core/file_util.h);
//   - 8 <= file size, N <= kMaxSafeTensorsHeaderBytes, 8 + N <= file size;
//   - the header is valid UTF-8 JSON, a top-level object without duplicate keys
//     in any object, nested at most kMaxJsonDepth deep (the parse stops there,
//     Note [Bounded JSON] in core/json_util.h);
//   - every tensor entry has exactly the keys dtype (a known code), shape (an
//     array of integers in [0, 2^63)) and data_offsets ([begin, end], begin <= end);
//   - product(shape) * element size == end - begin (computed without overflow);
//   - sorted by (begin, end), each tensor begins where the previous one ended,
//     the first at 0 and the last ends exactly at the buffer size: no gaps, no
//     overlaps, no trailing bytes;
//   - BOOL tensors hold only bytes 0 and 1;
//   - "__metadata__", if present, is an object of string -> string.
// data(info) is a span into the mapping (no copy). It is aligned to the element
// size when the file was written by write_safetensors (or the Python library),
// not necessarily otherwise: copy with memcpy rather than casting when unsure.
// A mapped file must not be truncated by another process while open (SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/core/dtype.h"

namespace kiln {

inline constexpr uint64_t kMaxSafeTensorsHeaderBytes = 100'000'000;

// Known safetensors dtype codes: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16
// I32 U32 F32 F64 I64 U64. Only F32 F64 F16 BF16 I32 I64 BOOL map to a DType.
std::optional<DType> dtype_from_safetensors(const std::string& code);  // nullopt: no kiln DType
std::string safetensors_dtype(DType t);                                 // "F32", "BF16", ...
// Element size in bytes of a known code; nullopt for an unknown code.
std::optional<size_t> safetensors_element_size(const std::string& code);

struct SafeTensorInfo {
  std::string name;
  std::string dtype_str;       // the code as written in the file, e.g. "F32", "U8"
  std::optional<DType> dtype;  // set when kiln has the dtype
  std::vector<int64_t> shape;  // every dim >= 0; empty for a scalar
  size_t offset = 0;           // from the start of the data buffer
  size_t nbytes = 0;           // product(shape) * element size
};

class SafeTensorsFile {
 public:
  // Memory-maps `path` read-only and validates it.
  static SafeTensorsFile open(const std::string& path);
  // Validates an in-memory file; takes ownership of the bytes.
  static SafeTensorsFile from_bytes(std::vector<uint8_t> bytes, std::string name);
  // Validates an in-memory file without copying; `bytes` must outlive the result.
  static SafeTensorsFile view_bytes(std::span<const uint8_t> bytes, std::string name);

  SafeTensorsFile(SafeTensorsFile&&) noexcept;
  SafeTensorsFile& operator=(SafeTensorsFile&&) noexcept;
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;
  ~SafeTensorsFile();  // unmaps

  const std::string& name() const { return name_; }
  // Ordered by data offset (ties: by name).
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
  const SafeTensorInfo* find(const std::string& tensor_name) const;  // nullptr if absent
  // Throws kiln::Error naming the file and the tensor when absent.
  const SafeTensorInfo& at(const std::string& tensor_name) const;
  std::span<const uint8_t> data(const SafeTensorInfo& info) const;  // info from this file
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The kiln DType of a tensor; kiln::Error "unsupported dtype for kiln tensors" otherwise.
  DType kiln_dtype(const SafeTensorInfo& info) const;

 private:
  struct Mapping;
  SafeTensorsFile() = default;
  void parse();

  std::string name_;
  std::unique_ptr<Mapping> mapping_;  // set by open()
  std::vector<uint8_t> owned_;        // set by from_bytes()
  std::span<const uint8_t> bytes_;    // the whole file
  size_t data_start_ = 0;             // 8 + header length
  std::vector<SafeTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

struct SafeTensorEntry {
  std::string name;
  std::string dtype;           // safetensors code; safetensors_dtype(DType) for kiln dtypes
  std::vector<int64_t> shape;  // dims >= 0
  const void* data = nullptr;  // nbytes bytes, read during the call only
  size_t nbytes = 0;           // must equal product(shape) * element size
};

// The bytes of a safetensors file, deterministic for given inputs and in the
// same layout as the Python `safetensors` library writes (byte-identical for
// at most one metadata key): data ordered by dtype, descending in the order
// listed above (U64 I64 F64 F32 ... U8 BOOL, so element sizes never increase
// and each tensor is aligned to its element size), then by name; header keys
// "__metadata__" (omitted when empty, else keys sorted) first, then tensors in
// data order; header padded with spaces to a multiple of 8 bytes.
// Throws kiln::Error (naming `what`) for duplicate or reserved names, unknown
// dtypes, negative dims, size mismatches or non-UTF-8 strings.
std::vector<uint8_t> serialize_safetensors(const std::vector<SafeTensorEntry>& tensors,
                                           const std::map<std::string, std::string>& metadata = {},
                                           const std::string& what = "safetensors");

// Writes serialize_safetensors(...) to `path` atomically (write_file_atomic,
// core/file_util.h).
void write_safetensors(const std::string& path, const std::vector<SafeTensorEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});


}  // namespace kiln
