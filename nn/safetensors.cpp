#include "nn/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"

namespace kiln {
namespace {

using json = nlohmann::json;

struct DTypeCode {
  const char* code;
  size_t size;
  std::optional<DType> dtype;
};

// In the order of the Rust reference implementation's Dtype enum, which its
// writer sorts by (descending) to lay out data; sizes never increase down the sort.
constexpr DTypeCode kDTypeCodes[] = {
    {"BOOL", 1, DType::Bool},     {"U8", 1, std::nullopt},      {"I8", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},     {"F16", 2, DType::Float16},   {"BF16", 2, DType::BFloat16},
    {"I32", 4, DType::Int32},     {"U32", 4, std::nullopt},     {"F32", 4, DType::Float32},
    {"F64", 8, DType::Float64},   {"I64", 8, DType::Int64},     {"U64", 8, std::nullopt},
};

const DTypeCode* find_code(const std::string& code) {
  for (const auto& c : kDTypeCodes)
    if (code == c.code) return &c;
  return nullptr;
}

std::string known_codes() {
  std::string out;
  for (const auto& c : kDTypeCodes) {
    if (!out.empty()) out += ' ';
    out += c.code;
  }
  return out;
}

std::string format_dims(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

std::string format_offsets(uint64_t begin, uint64_t end) {
  // (Appended piece by piece: GCC 12 warns, falsely, on `"[" + std::string&&` here.)
  std::string out = "[";
  out += std::to_string(begin);
  out += ", ";
  out += std::to_string(end);
  out += ']';
  return out;
}

// Byte offset of the first invalid UTF-8 sequence, or -1 when valid.
int64_t invalid_utf8_at(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {  // ASCII fast path
      ++i;
      continue;
    }
    utf8proc_int32_t cp;
    const utf8proc_ssize_t len = utf8proc_iterate(s + i, static_cast<utf8proc_ssize_t>(n - i), &cp);
    if (len <= 0) return static_cast<int64_t>(i);
    i += static_cast<size_t>(len);
  }
  return -1;
}

bool is_valid_utf8(const std::string& s) {
  return invalid_utf8_at(reinterpret_cast<const uint8_t*>(s.data()), s.size()) < 0;
}

// A non-negative JSON integer as uint64_t; nullopt for anything else.
std::optional<uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// product(dims) * elem_size, nullopt on overflow of size_t.
std::optional<size_t> byte_count(const std::vector<int64_t>& dims, size_t elem_size) {
  size_t total = elem_size;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(total, static_cast<uint64_t>(d), &total)) return std::nullopt;
  return total;
}

// A JSON value for an error message: its text, cut short when long.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& file) {
  KILN_CHECK(m.is_object(), file, ": __metadata__ must be an object of string to string, got ",
             m.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    KILN_CHECK(value.is_string(), file, ": __metadata__ value for key '", key,
               "' must be a string, got ", value.type_name(), " ", brief(value));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Validates one tensor entry against a data buffer of `buffer_size` bytes.
SafeTensorInfo parse_entry(const std::string& name, const json& v, size_t buffer_size,
                           const std::string& file) {
  const std::string what = file + ": tensor '" + name + "'";
  KILN_CHECK(v.is_object(), what, " must be an object with dtype, shape and data_offsets, got ",
             v.type_name());
  for (const auto& [key, unused] : v.items())
    KILN_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", what,
               " has unexpected key '", key, "' (expected exactly dtype, shape, data_offsets)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    KILN_CHECK(v.contains(key), what, " is missing '", key, "'");

  SafeTensorInfo info;
  info.name = name;
  const json& dtype = v.at("dtype");
  KILN_CHECK(dtype.is_string(), what, ": dtype must be a string, got ", dtype.type_name());
  info.dtype_str = dtype.get<std::string>();
  const DTypeCode* code = find_code(info.dtype_str);
  KILN_CHECK(code, what, ": unknown dtype '", info.dtype_str, "' (known: ", known_codes(), ")");
  info.dtype = code->dtype;

  const json& shape = v.at("shape");
  KILN_CHECK(shape.is_array(), what, ": shape must be an array of integers, got ", shape.type_name());
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& d = shape[i];
    KILN_CHECK(!(d.is_number_integer() && !as_count(d)), what, ": shape[", i, "] is negative (",
               brief(d), ")");
    const std::optional<uint64_t> dim = as_count(d);
    KILN_CHECK(dim, what, ": shape[", i, "] must be a non-negative integer, got ", brief(d));
    KILN_CHECK(*dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what, ": shape[",
               i, "] = ", *dim, " is too large");
    info.shape.push_back(static_cast<int64_t>(*dim));
  }

  const json& offsets = v.at("data_offsets");
  KILN_CHECK(offsets.is_array() && offsets.size() == 2, what,
             ": data_offsets must be an array [begin, end], got ", brief(offsets));
  const std::optional<uint64_t> begin = as_count(offsets[0]), end = as_count(offsets[1]);
  KILN_CHECK(begin && end, what, ": data_offsets must be non-negative integers, got ", brief(offsets));
  KILN_CHECK(*begin <= *end, what, ": data_offsets ", format_offsets(*begin, *end),
             " has begin after end");
  KILN_CHECK(*end <= buffer_size, what, ": data_offsets ", format_offsets(*begin, *end),
             " run past the end of the data buffer (", buffer_size, " bytes)");

  const std::optional<size_t> nbytes = byte_count(info.shape, code->size);
  KILN_CHECK(nbytes, what, ": shape ", format_dims(info.shape), " of ", info.dtype_str,
             " overflows the byte count");
  KILN_CHECK(*nbytes == *end - *begin, what, ": data_offsets ", format_offsets(*begin, *end),
             " but shape ", format_dims(info.shape), " of ", info.dtype_str, " needs ", *nbytes,
             " bytes");
  info.offset = static_cast<size_t>(*begin);
  info.nbytes = *nbytes;
  return info;
}

}  // namespace

std::optional<DType> dtype_from_safetensors(const std::string& code) {
  const DTypeCode* c = find_code(code);
  return c ? c->dtype : std::nullopt;
}

std::string safetensors_dtype(DType t) {
  for (const auto& c : kDTypeCodes)
    if (c.dtype == t) return c.code;
  fail("safetensors_dtype: no safetensors code for dtype ", dtype_name(t));
}

std::optional<size_t> safetensors_element_size(const std::string& code) {
  const DTypeCode* c = find_code(code);
  return c ? std::optional<size_t>(c->size) : std::nullopt;
}

// ---- reading -------------------------------------------------------------

struct SafeTensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) munmap(addr, size);
  }
};

SafeTensorsFile::SafeTensorsFile(SafeTensorsFile&&) noexcept = default;
SafeTensorsFile& SafeTensorsFile::operator=(SafeTensorsFile&&) noexcept = default;
SafeTensorsFile::~SafeTensorsFile() = default;

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  SafeTensorsFile f;
  f.name_ = path;
  uint64_t file_size = 0;
  const int fd = open_regular_file(path, path, kNoByteLimit, &file_size);  // Note [Bounded input]
  const size_t size = static_cast<size_t>(file_size);
  if (size < 8) {
    ::close(fd);
    fail(path, ": file is ", size, " bytes, too short for the 8-byte header length");
  }
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  KILN_CHECK(addr != MAP_FAILED, path, ": cannot mmap ", size, " bytes: ", std::strerror(err));
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->addr = addr;
  f.mapping_->size = size;
  f.bytes_ = std::span<const uint8_t>(static_cast<const uint8_t*>(addr), size);
  f.parse();
  return f;
}

SafeTensorsFile SafeTensorsFile::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  SafeTensorsFile f;
  f.name_ = std::move(name);
  f.owned_ = std::move(bytes);
  f.bytes_ = std::span<const uint8_t>(f.owned_.data(), f.owned_.size());
  f.parse();
  return f;
}

SafeTensorsFile SafeTensorsFile::view_bytes(std::span<const uint8_t> bytes, std::string name) {
  SafeTensorsFile f;
  f.name_ = std::move(name);
  f.bytes_ = bytes;
  f.parse();
  return f;
}

void SafeTensorsFile::parse() {
  const std::string& file = name_;
  KILN_CHECK(bytes_.size() >= 8, file, ": file is ", bytes_.size(),
             " bytes, too short for the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(bytes_[i]) << (8 * i);
  KILN_CHECK(header_len <= kMaxSafeTensorsHeaderBytes, file, ": header length ", header_len,
             " exceeds the limit of ", kMaxSafeTensorsHeaderBytes, " bytes");
  KILN_CHECK(header_len <= bytes_.size() - 8, file, ": header length ", header_len,
             " runs past the end of the file (", bytes_.size(), " bytes)");
  data_start_ = 8 + static_cast<size_t>(header_len);
  const size_t buffer_size = bytes_.size() - data_start_;

  const uint8_t* header = bytes_.data() + 8;
  const int64_t bad = invalid_utf8_at(header, header_len);
  KILN_CHECK(bad < 0, file, ": header is not valid UTF-8 (byte ", bad, " of the header)");
  // nlohmann stops at a NUL byte as if the input ended there; JSON text never holds one.
  const void* nul = std::memchr(header, 0, header_len);
  KILN_CHECK(!nul, file, ": header is not valid JSON: NUL byte at byte ",
             static_cast<const uint8_t*>(nul) - header, " of the header");
  // Note [Bounded JSON]: the depth limit stops the parse, duplicate keys are errors.
  JsonLimits limits;
  limits.max_bytes = kMaxSafeTensorsHeaderBytes;
  const json j = parse_json_bounded(
      std::string_view(reinterpret_cast<const char*>(header), static_cast<size_t>(header_len)),
      file + ": header", limits);
  KILN_CHECK(j.is_object(), file, ": header must be a JSON object, got ", j.type_name());

  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__")
      metadata_ = parse_metadata(value, file);
    else
      tensors_.push_back(parse_entry(key, value, buffer_size, file));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const SafeTensorInfo& a, const SafeTensorInfo& b) {
    return std::tie(a.offset, a.nbytes, a.name) < std::tie(b.offset, b.nbytes, b.name);
  });
  size_t covered = 0;
  const SafeTensorInfo* previous = nullptr;
  for (const SafeTensorInfo& t : tensors_) {
    const std::string where = file + ": tensor '" + t.name + "' data_offsets " +
                              format_offsets(t.offset, t.offset + t.nbytes);
    KILN_CHECK(t.offset >= covered, where, " overlap tensor '", previous ? previous->name : "",
               "' which ends at ", covered);
    KILN_CHECK(t.offset == covered, where, " leave a gap of ", t.offset - covered,
               " bytes after offset ", covered);
    covered = t.offset + t.nbytes;
    previous = &t;
  }
  KILN_CHECK(covered == buffer_size, file, ": the data buffer has ", buffer_size,
             " bytes but the tensors cover only ", covered);

  for (size_t i = 0; i < tensors_.size(); ++i) {
    const SafeTensorInfo& t = tensors_[i];
    index_.emplace(t.name, i);
    if (t.dtype_str != "BOOL") continue;
    const std::span<const uint8_t> d = data(t);
    for (size_t k = 0; k < d.size(); ++k)
      KILN_CHECK(d[k] <= 1, file, ": tensor '", t.name, "' (BOOL) holds byte ", int(d[k]),
                 " at element ", k, "; booleans must be 0 or 1");
  }
}

const SafeTensorInfo* SafeTensorsFile::find(const std::string& tensor_name) const {
  const auto it = index_.find(tensor_name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafeTensorInfo& SafeTensorsFile::at(const std::string& tensor_name) const {
  const SafeTensorInfo* info = find(tensor_name);
  KILN_CHECK(info, name_, ": no tensor named '", tensor_name, "' (", tensors_.size(),
             " tensors in the file)");
  return *info;
}

std::span<const uint8_t> SafeTensorsFile::data(const SafeTensorInfo& info) const {
  KILN_CHECK(info.offset <= bytes_.size() - data_start_ &&
                 info.nbytes <= bytes_.size() - data_start_ - info.offset,
             name_, ": tensor '", info.name, "' is not from this file");
  return bytes_.subspan(data_start_ + info.offset, info.nbytes);
}

DType SafeTensorsFile::kiln_dtype(const SafeTensorInfo& info) const {
  KILN_CHECK(info.dtype, name_, ": tensor '", info.name, "' has dtype ", info.dtype_str,
             ", unsupported dtype for kiln tensors (supported: F32 F64 F16 BF16 I32 I64 BOOL)");
  return *info.dtype;
}

// ---- writing -------------------------------------------------------------

namespace {

struct PreparedFile {
  std::string header;                             // padded JSON, without the length prefix
  std::vector<const SafeTensorEntry*> data_order;  // entries in data order
};

PreparedFile prepare(const std::vector<SafeTensorEntry>& tensors,
                     const std::map<std::string, std::string>& metadata, const std::string& what) {
  std::set<std::string> names;
  for (const SafeTensorEntry& t : tensors) {
    const std::string where = what + ": tensor '" + t.name + "'";
    KILN_CHECK(is_valid_utf8(t.name), what, ": a tensor name is not valid UTF-8");
    KILN_CHECK(t.name != "__metadata__", where, ": the name is reserved for metadata");
    KILN_CHECK(names.insert(t.name).second, where, ": duplicate tensor name");
    const DTypeCode* code = find_code(t.dtype);
    KILN_CHECK(code, where, ": unknown dtype '", t.dtype, "' (known: ", known_codes(), ")");
    for (int64_t d : t.shape)
      KILN_CHECK(d >= 0, where, ": negative dimension in shape ", format_dims(t.shape));
    const std::optional<size_t> nbytes = byte_count(t.shape, code->size);
    KILN_CHECK(nbytes, where, ": shape ", format_dims(t.shape), " overflows the byte count");
    KILN_CHECK(*nbytes == t.nbytes, where, ": shape ", format_dims(t.shape), " of ", t.dtype,
               " needs ", *nbytes, " bytes but ", t.nbytes, " were given");
    KILN_CHECK(t.data || t.nbytes == 0, where, ": data is null");
  }
  for (const auto& [key, value] : metadata)
    KILN_CHECK(is_valid_utf8(key) && is_valid_utf8(value), what,
               ": metadata keys and values must be valid UTF-8");

  PreparedFile out;
  for (const SafeTensorEntry& t : tensors) out.data_order.push_back(&t);
  std::sort(out.data_order.begin(), out.data_order.end(),
            [](const SafeTensorEntry* a, const SafeTensorEntry* b) {
              const DTypeCode* ca = find_code(a->dtype);
              const DTypeCode* cb = find_code(b->dtype);
              return ca != cb ? ca > cb : a->name < b->name;
            });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafeTensorEntry* t : out.data_order) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = t->dtype;
    entry["shape"] = t->shape;
    entry["data_offsets"] = {offset, offset + t->nbytes};
    header[t->name] = std::move(entry);
    offset += t->nbytes;
  }
  out.header = header.dump();
  out.header.resize((out.header.size() + 7) / 8 * 8, ' ');
  return out;
}

std::array<uint8_t, 8> length_prefix(uint64_t n) {
  std::array<uint8_t, 8> out{};
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  return out;
}

std::vector<std::span<const uint8_t>> chunks_of(const PreparedFile& p,
                                                const std::array<uint8_t, 8>& prefix) {
  std::vector<std::span<const uint8_t>> chunks;
  chunks.emplace_back(prefix.data(), prefix.size());
  chunks.emplace_back(reinterpret_cast<const uint8_t*>(p.header.data()), p.header.size());
  for (const SafeTensorEntry* t : p.data_order)
    chunks.emplace_back(static_cast<const uint8_t*>(t->data), t->nbytes);
  return chunks;
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<SafeTensorEntry>& tensors,
                                           const std::map<std::string, std::string>& metadata,
                                           const std::string& what) {
  const PreparedFile p = prepare(tensors, metadata, what);
  const auto prefix = length_prefix(p.header.size());
  std::vector<uint8_t> out;
  for (const auto& chunk : chunks_of(p, prefix)) out.insert(out.end(), chunk.begin(), chunk.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const PreparedFile p = prepare(tensors, metadata, path);
  const auto prefix = length_prefix(p.header.size());
  write_file_atomic(path, chunks_of(p, prefix));
}

}  // namespace kiln
