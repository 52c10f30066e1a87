// InMemoryCorpus and the memory-mapped TokenCorpus reader (data/corpus.h).
#include "data/corpus.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/error.h"
#include "core/json_util.h"
#include "data/corpus_format.h"
#include "data/integrity.h"
#include "data/tokenizer/text_tokenizer.h"

namespace kiln::data {
namespace fs = std::filesystem;
namespace cf = corpus_format;

// ---- InMemoryCorpus --------------------------------------------------------

InMemoryCorpus::InMemoryCorpus(const std::vector<std::vector<std::vector<int32_t>>>& documents, size_t vocab_size,
                               SpecialTokenIds special_ids) {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> sentence_starts{0}, document_starts{0};
  for (size_t d = 0; d < documents.size(); ++d) {
    KILN_CHECK(!documents[d].empty(), "InMemoryCorpus: document ", d, " has no sentences");
    for (size_t k = 0; k < documents[d].size(); ++k) {
      const auto& sentence = documents[d][k];
      KILN_CHECK(!sentence.empty(), "InMemoryCorpus: sentence ", k, " of document ", d, " is empty");
      tokens.insert(tokens.end(), sentence.begin(), sentence.end());
      sentence_starts.push_back(tokens.size());
    }
    document_starts.push_back(sentence_starts.size() - 1);
  }
  assign(std::move(tokens), std::move(sentence_starts), std::move(document_starts), vocab_size, special_ids,
         "InMemoryCorpus");
}

InMemoryCorpus::InMemoryCorpus(std::vector<int32_t> tokens, std::vector<uint64_t> sentence_starts,
                               std::vector<uint64_t> document_starts, size_t vocab_size, SpecialTokenIds special_ids) {
  assign(std::move(tokens), std::move(sentence_starts), std::move(document_starts), vocab_size, special_ids,
         "InMemoryCorpus");
}

namespace {

// starts: [0] = 0, strictly increasing, back() = total. Returns "" or the problem.
std::string check_starts(const uint64_t* starts, size_t count, uint64_t total, const char* name) {
  if (count == 0) return std::string(name) + " is empty";
  if (starts[0] != 0) return std::string(name) + "[0] = " + std::to_string(starts[0]) + ", expected 0";
  for (size_t i = 1; i < count; ++i)
    if (starts[i] <= starts[i - 1])
      return std::string(name) + " not strictly increasing at entry " + std::to_string(i) + " (" +
             std::to_string(starts[i - 1]) + ", " + std::to_string(starts[i]) + ")";
  if (starts[count - 1] != total)
    return std::string(name) + " ends at " + std::to_string(starts[count - 1]) + ", expected " + std::to_string(total);
  return {};
}

}  // namespace

void InMemoryCorpus::assign(std::vector<int32_t> tokens, std::vector<uint64_t> sentence_starts,
                            std::vector<uint64_t> document_starts, size_t vocab_size, SpecialTokenIds special_ids,
                            const char* what) {
  KILN_CHECK(vocab_size > 0, what, ": vocab size must be positive");
  std::string problem = check_starts(sentence_starts.data(), sentence_starts.size(), tokens.size(), "sentence_starts");
  if (problem.empty())
    problem =
        check_starts(document_starts.data(), document_starts.size(), sentence_starts.size() - 1, "document_starts");
  KILN_CHECK(problem.empty(), what, ": ", problem);
  for (size_t i = 0; i < tokens.size(); ++i)
    KILN_CHECK(tokens[i] >= 0 && static_cast<size_t>(tokens[i]) < vocab_size, what, ": token ", i, " has id ",
               tokens[i], " outside the vocab [0, ", vocab_size, ")");
  tokens_ = std::move(tokens);
  sentence_starts_ = std::move(sentence_starts);
  document_starts_ = std::move(document_starts);
  vocab_size_ = vocab_size;
  special_ids_ = special_ids;
}

SentenceRange InMemoryCorpus::document(size_t d) const {
  KILN_CHECK(d < num_documents(), "Corpus: document ", d, " out of range [0, ", num_documents(), ")");
  return {document_starts_[d], document_starts_[d + 1] - document_starts_[d]};
}

std::span<const int32_t> InMemoryCorpus::sentence(size_t s) const {
  KILN_CHECK(s < num_sentences(), "Corpus: sentence ", s, " out of range [0, ", num_sentences(), ")");
  return {tokens_.data() + sentence_starts_[s], sentence_starts_[s + 1] - sentence_starts_[s]};
}

// ---- TokenCorpus -----------------------------------------------------------

namespace {

// A read-only private mapping of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    KILN_CHECK(fd >= 0, "TokenCorpus: cannot open shard '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      fail("TokenCorpus: cannot stat shard '", path, "': ", std::strerror(err));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);
      KILN_CHECK(p != MAP_FAILED, "TokenCorpus: cannot mmap shard '", path, "': ", std::strerror(err));
      data_ = static_cast<const unsigned char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

struct Shard {
  std::unique_ptr<MappedFile> file;
  const int32_t* tokens = nullptr;
  const uint64_t* sentence_starts = nullptr;  // [num_sentences + 1]
  const uint64_t* document_starts = nullptr;  // [num_documents + 1]
  uint64_t num_tokens = 0, num_sentences = 0, num_documents = 0;
  uint64_t first_token = 0, first_sentence = 0, first_document = 0;
};

// Integer fields must be JSON integers in T's range: nlohmann's get<T>()
// would convert a float (1e30, -9.2e19) with a cast that is undefined
// behaviour out of range, and wrap an out-of-range integer.
template <typename T>
T json_get(const nlohmann::json& j, const char* key, const std::string& file) {
  KILN_CHECK(j.is_object() && j.contains(key), "TokenCorpus: '", file, "' lacks the field \"", key, "\"");
  const nlohmann::json& v = j.at(key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    KILN_CHECK(v.is_number_integer(), "TokenCorpus: '", file, "': field \"", key, "\" must be an integer, got ",
               v.is_number() ? v.dump() : std::string(v.type_name()));
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                          : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                (std::is_unsigned_v<T> ||
                                 v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max()));
    KILN_CHECK(fits, "TokenCorpus: '", file, "': field \"", key, "\" = ", v.dump(), " is out of range");
    return v.get<T>();
  } else {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception& e) {
      fail("TokenCorpus: '", file, "': field \"", key, "\" has the wrong type (", e.what(), ")");
    }
  }
}

uint64_t parse_hex64(const std::string& s, const std::string& file) {
  KILN_CHECK(s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos, "TokenCorpus: '", file,
             "': checksum \"", s, "\" is not 16 hex digits");
  return std::stoull(s, nullptr, 16);
}

// The one place the corpus reads JSON (index.json).
// Bounded (Note [Bounded JSON], core/json_util.h): a regular file of at most
// 16 MiB, nesting at most 64 deep, so a hostile index can neither exhaust
// memory nor overflow the stack in nlohmann's recursive copies.
nlohmann::json read_index_json(const std::string& index_path) {
  return read_json_file(index_path, "TokenCorpus: '" + index_path + "'");
}

// Maps and checks one shard against its index entry.
Shard open_shard(const std::string& path, uint64_t vocab_size, const nlohmann::json& entry,
                 const std::string& index_path, bool verify_data) {
  Shard sh;
  sh.file = std::make_unique<MappedFile>(path);
  const MappedFile& f = *sh.file;
  KILN_CHECK(f.size() >= cf::kHeaderBytes, "TokenCorpus: shard '", path, "' is truncated (", f.size(),
             " bytes, less than the ", cf::kHeaderBytes, "-byte header)");
  KILN_CHECK(std::memcmp(f.data(), cf::kMagic, 8) == 0, "TokenCorpus: shard '", path,
             "' has a bad magic (not a kiln token shard)");
  const cf::ShardHeader h = cf::decode_header(f.data());
  KILN_CHECK(h.version == cf::kVersion, "TokenCorpus: shard '", path, "' has format version ", h.version,
             ", this build reads version ", cf::kVersion);
  KILN_CHECK(h.header_bytes == cf::kHeaderBytes, "TokenCorpus: shard '", path, "' has header size ", h.header_bytes,
             ", expected ", cf::kHeaderBytes);
  // Sizes with overflow guards: each count is bounded by the file size first.
  const uint64_t size = f.size();
  KILN_CHECK(h.num_tokens <= size / 4 && h.num_sentences <= size / 8 && h.num_documents <= size / 8,
             "TokenCorpus: shard '", path, "' is truncated or corrupt: header counts (", h.num_tokens, " tokens, ",
             h.num_sentences, " sentences, ", h.num_documents, " documents) exceed the file size ", size);
  const uint64_t token_bytes = cf::padded_token_bytes(h.num_tokens);
  const uint64_t expected = cf::kHeaderBytes + token_bytes + 8 * (h.num_sentences + 1) + 8 * (h.num_documents + 1);
  KILN_CHECK(size >= expected, "TokenCorpus: shard '", path, "' is truncated: ", size, " bytes, expected ", expected);
  KILN_CHECK(size == expected, "TokenCorpus: shard '", path, "' is corrupt: ", size, " bytes, expected ", expected);
  KILN_CHECK(h.vocab_size == vocab_size, "TokenCorpus: shard '", path, "' has vocab size ", h.vocab_size,
             ", the index says ", vocab_size);

  // Note [Corpus integrity]: the whole file's size and CRC-32C, as the index recorded them.
  if (entry.contains("bytes"))
    KILN_CHECK(json_get<uint64_t>(entry, "bytes", index_path) == size, "TokenCorpus: shard '", path, "' is damaged: ",
               size, " bytes, '", index_path, "' says ", json_get<uint64_t>(entry, "bytes", index_path));
  const auto want = [&](const char* key) { return json_get<uint64_t>(entry, key, index_path); };
  KILN_CHECK(want("num_tokens") == h.num_tokens && want("num_sentences") == h.num_sentences &&
                 want("num_documents") == h.num_documents,
             "TokenCorpus: shard '", path, "' holds ", h.num_tokens, " tokens, ", h.num_sentences, " sentences, ",
             h.num_documents, " documents; '", index_path, "' says ", want("num_tokens"), ", ", want("num_sentences"),
             ", ", want("num_documents"));
  KILN_CHECK(parse_hex64(json_get<std::string>(entry, "checksum", index_path), index_path) == h.checksum,
             "TokenCorpus: shard '", path, "' checksum ", cf::hex64(h.checksum), " differs from the index's ",
             json_get<std::string>(entry, "checksum", index_path));

  sh.num_tokens = h.num_tokens;
  sh.num_sentences = h.num_sentences;
  sh.num_documents = h.num_documents;
  sh.tokens = reinterpret_cast<const int32_t*>(f.data() + cf::kHeaderBytes);
  sh.sentence_starts = reinterpret_cast<const uint64_t*>(f.data() + cf::kHeaderBytes + token_bytes);
  sh.document_starts = sh.sentence_starts + h.num_sentences + 1;

  if (verify_data) {
    cf::Fnv1a hash;
    hash.update(f.data() + cf::kHeaderBytes, size - cf::kHeaderBytes);
    KILN_CHECK(hash.value() == h.checksum, "TokenCorpus: shard '", path, "' is corrupt: checksum ",
               cf::hex64(hash.value()), ", header says ", cf::hex64(h.checksum));
    if (entry.contains("crc32c")) {
      const std::string want_crc = json_get<std::string>(entry, "crc32c", index_path);
      KILN_CHECK(parse_crc32c_hex(want_crc).has_value(), "TokenCorpus: '", index_path, "': crc32c \"", want_crc,
                 "\" is not 8 hex digits");
      const std::string got = crc32c_hex(crc32c({f.data(), f.size()}));
      KILN_CHECK(got == want_crc, "TokenCorpus: shard '", path, "' is damaged: its CRC-32C is ", got, ", '", index_path,
                 "' says ", want_crc);
    }
    for (uint64_t i = 0; i < h.num_tokens; ++i)
      KILN_CHECK(sh.tokens[i] >= 0 && static_cast<uint64_t>(sh.tokens[i]) < vocab_size, "TokenCorpus: shard '", path,
                 "' is corrupt: token ", i, " has id ", sh.tokens[i], " outside [0, ", vocab_size, ")");
  }
  std::string problem = check_starts(sh.sentence_starts, h.num_sentences + 1, h.num_tokens, "sentence_starts");
  if (problem.empty())
    problem = check_starts(sh.document_starts, h.num_documents + 1, h.num_sentences, "document_starts");
  KILN_CHECK(problem.empty(), "TokenCorpus: shard '", path, "' is corrupt: ", problem);
  return sh;
}

}  // namespace

struct TokenCorpus::Impl {
  std::string dir;
  std::vector<Shard> shards;
  std::vector<uint64_t> shard_first_sentence;  // [num_shards]
  std::vector<uint64_t> shard_first_document;  // [num_shards]
  uint64_t num_tokens = 0, num_sentences = 0, num_documents = 0;
  size_t vocab_size = 0;
  uint64_t vocab_fingerprint = 0;
  bool lowercase = true;
  SpecialTokenIds special;

  // The shard holding global item `i`, given each shard's first item.
  static size_t find_shard(const std::vector<uint64_t>& firsts, uint64_t i) {
    return static_cast<size_t>(std::upper_bound(firsts.begin(), firsts.end(), i) - firsts.begin()) - 1;
  }
};

TokenCorpus::TokenCorpus(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenCorpus::~TokenCorpus() = default;

std::shared_ptr<TokenCorpus> TokenCorpus::open(const std::string& dir, const TokenCorpusOptions& options) {
  const std::string index_path = (fs::path(dir) / cf::kIndexFile).string();
  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), "TokenCorpus: corpus folder '", dir, "' does not exist");
  KILN_CHECK(fs::exists(index_path, ec), "TokenCorpus: '", index_path,
             "' is missing (not a prepared corpus, or its preparation did not finish)");
  const nlohmann::json index = read_index_json(index_path);
  KILN_CHECK(index.is_object() && index.contains("format") && index["format"].is_string() &&
                 index["format"].get<std::string>() == cf::kIndexFormat,
             "TokenCorpus: '", index_path, "' is not a kiln token corpus index (\"format\" is not \"", cf::kIndexFormat,
             "\")");
  const auto version = json_get<uint32_t>(index, "version", index_path);
  KILN_CHECK(version == cf::kVersion, "TokenCorpus: '", index_path, "' has version ", version,
             ", this build reads version ", cf::kVersion);

  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->vocab_size = json_get<size_t>(index, "vocab_size", index_path);
  KILN_CHECK(impl->vocab_size > 0 && impl->vocab_size < static_cast<size_t>(INT32_MAX), "TokenCorpus: '", index_path,
             "' has vocab size ", impl->vocab_size);
  impl->vocab_fingerprint = parse_hex64(json_get<std::string>(index, "vocab_fingerprint", index_path), index_path);
  impl->lowercase = json_get<bool>(index, "lowercase", index_path);
  {
    const auto sp = json_get<nlohmann::json>(index, "special_ids", index_path);
    impl->special = {json_get<int32_t>(sp, "pad", index_path), json_get<int32_t>(sp, "unk", index_path),
                     json_get<int32_t>(sp, "cls", index_path), json_get<int32_t>(sp, "sep", index_path),
                     json_get<int32_t>(sp, "mask", index_path)};
    for (const int32_t id : {impl->special.pad, impl->special.unk, impl->special.cls, impl->special.sep,
                             impl->special.mask})
      KILN_CHECK(id >= -1 && id < static_cast<int64_t>(impl->vocab_size), "TokenCorpus: '", index_path,
                 "': special token id ", id, " is outside the vocab [0, ", impl->vocab_size, ")");
  }
  const auto shards = json_get<nlohmann::json>(index, "shards", index_path);
  KILN_CHECK(shards.is_array(), "TokenCorpus: '", index_path, "': \"shards\" is not an array");
  for (const auto& entry : shards) {
    const std::string file = json_get<std::string>(entry, "file", index_path);
    KILN_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..", "TokenCorpus: '",
               index_path, "' names an invalid shard file \"", file, "\"");
    Shard sh = open_shard((fs::path(dir) / file).string(), impl->vocab_size, entry, index_path, options.verify_data);
    KILN_CHECK(json_get<uint64_t>(entry, "first_token", index_path) == impl->num_tokens &&
                   json_get<uint64_t>(entry, "first_sentence", index_path) == impl->num_sentences &&
                   json_get<uint64_t>(entry, "first_document", index_path) == impl->num_documents,
               "TokenCorpus: '", index_path, "': the offsets of shard \"", file,
               "\" do not follow the shards before it");
    sh.first_token = impl->num_tokens;
    sh.first_sentence = impl->num_sentences;
    sh.first_document = impl->num_documents;
    impl->num_tokens += sh.num_tokens;
    impl->num_sentences += sh.num_sentences;
    impl->num_documents += sh.num_documents;
    impl->shard_first_sentence.push_back(sh.first_sentence);
    impl->shard_first_document.push_back(sh.first_document);
    impl->shards.push_back(std::move(sh));
  }
  KILN_CHECK(json_get<uint64_t>(index, "num_tokens", index_path) == impl->num_tokens &&
                 json_get<uint64_t>(index, "num_sentences", index_path) == impl->num_sentences &&
                 json_get<uint64_t>(index, "num_documents", index_path) == impl->num_documents,
             "TokenCorpus: '", index_path, "': totals differ from the sum over its shards (", impl->num_tokens,
             " tokens, ", impl->num_sentences, " sentences, ", impl->num_documents, " documents)");
  return std::shared_ptr<TokenCorpus>(new TokenCorpus(std::move(impl)));
}

size_t TokenCorpus::num_documents() const { return impl_->num_documents; }
size_t TokenCorpus::num_sentences() const { return impl_->num_sentences; }
uint64_t TokenCorpus::num_tokens() const { return impl_->num_tokens; }
size_t TokenCorpus::vocab_size() const { return impl_->vocab_size; }
SpecialTokenIds TokenCorpus::special_ids() const { return impl_->special; }
const std::string& TokenCorpus::directory() const { return impl_->dir; }
size_t TokenCorpus::num_shards() const { return impl_->shards.size(); }
bool TokenCorpus::lowercase() const { return impl_->lowercase; }

SentenceRange TokenCorpus::document(size_t d) const {
  KILN_CHECK(d < impl_->num_documents, "Corpus: document ", d, " out of range [0, ", impl_->num_documents, ")");
  const Shard& sh = impl_->shards[Impl::find_shard(impl_->shard_first_document, d)];
  const uint64_t local = d - sh.first_document;
  return {static_cast<size_t>(sh.first_sentence + sh.document_starts[local]),
          static_cast<size_t>(sh.document_starts[local + 1] - sh.document_starts[local])};
}

std::span<const int32_t> TokenCorpus::sentence(size_t s) const {
  KILN_CHECK(s < impl_->num_sentences, "Corpus: sentence ", s, " out of range [0, ", impl_->num_sentences, ")");
  const Shard& sh = impl_->shards[Impl::find_shard(impl_->shard_first_sentence, s)];
  const uint64_t local = s - sh.first_sentence;
  return {sh.tokens + sh.sentence_starts[local],
          static_cast<size_t>(sh.sentence_starts[local + 1] - sh.sentence_starts[local])};
}

void TokenCorpus::check_tokenizer(const TextTokenizer& tokenizer) const {
  KILN_CHECK(tokenizer.vocab_size() == impl_->vocab_size && vocab_fingerprint(tokenizer) == impl_->vocab_fingerprint,
             "TokenCorpus: the corpus in '", impl_->dir, "' was prepared with a different vocabulary (",
             impl_->vocab_size, " tokens, fingerprint ", cf::hex64(impl_->vocab_fingerprint),
             ") than the tokenizer's (", tokenizer.vocab_size(), " tokens, fingerprint ",
             cf::hex64(vocab_fingerprint(tokenizer)), ")");
  KILN_CHECK(tokenizer.lowercase() == impl_->lowercase, "TokenCorpus: the corpus in '", impl_->dir,
             "' was prepared with lowercase=", impl_->lowercase,
             ", the tokenizer has lowercase=", tokenizer.lowercase());
  const SpecialTokenIds& sp = impl_->special;
  const auto same = [&](const char* name, int32_t recorded, int32_t now) {
    KILN_CHECK(recorded == now, "TokenCorpus: '", (fs::path(impl_->dir) / cf::kIndexFile).string(),
               "' records special token id ", recorded, " for ", name, ", the tokenizer's is ", now,
               " (a damaged index, or a corpus prepared with another vocabulary)");
  };
  same("[PAD]", sp.pad, tokenizer.pad_id());
  same("[UNK]", sp.unk, tokenizer.unk_id());
  same("[CLS]", sp.cls, tokenizer.cls_id());
  same("[SEP]", sp.sep, tokenizer.sep_id());
  same("[MASK]", sp.mask, tokenizer.mask_id());
}

uint64_t vocab_fingerprint(const TextTokenizer& tokenizer) {
  cf::Fnv1a hash;
  for (const std::string& token : tokenizer.tokens()) {
    hash.update(token.data(), token.size());
    hash.update("\n", 1);
  }
  const std::map<std::string, std::string> files = tokenizer.files();
  if (const auto it = files.find("tokenizer.json"); it != files.end())
    hash.update(it->second.data(), it->second.size());
  return hash.value();
}

}  // namespace kiln::data
