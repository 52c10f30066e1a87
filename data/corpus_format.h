// Internal to data/corpus*.cpp: the byte layout of Note [Token shard format]
// and Note [Corpus index] (data/corpus.h), shared by the writer and the reader.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

namespace kiln::data::corpus_format {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; a big-endian host would need byte swapping");

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'T', 'O', 'K', 'S'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderBytes = 64;
inline constexpr const char* kIndexFile = "index.json";
inline constexpr const char* kIndexFormat = "kiln-token-corpus";

struct ShardHeader {
  uint32_t version = kVersion;
  uint32_t header_bytes = kHeaderBytes;
  uint64_t num_tokens = 0;
  uint64_t num_sentences = 0;
  uint64_t num_documents = 0;
  uint64_t vocab_size = 0;
  uint64_t checksum = 0;
};

inline void encode_header(const ShardHeader& h, unsigned char out[kHeaderBytes]) {
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, kMagic, 8);
  std::memcpy(out + 8, &h.version, 4);
  std::memcpy(out + 12, &h.header_bytes, 4);
  std::memcpy(out + 16, &h.num_tokens, 8);
  std::memcpy(out + 24, &h.num_sentences, 8);
  std::memcpy(out + 32, &h.num_documents, 8);
  std::memcpy(out + 40, &h.vocab_size, 8);
  std::memcpy(out + 48, &h.checksum, 8);
}

// Fields only; the caller checks the magic.
inline ShardHeader decode_header(const unsigned char in[kHeaderBytes]) {
  ShardHeader h;
  std::memcpy(&h.version, in + 8, 4);
  std::memcpy(&h.header_bytes, in + 12, 4);
  std::memcpy(&h.num_tokens, in + 16, 8);
  std::memcpy(&h.num_sentences, in + 24, 8);
  std::memcpy(&h.num_documents, in + 32, 8);
  std::memcpy(&h.vocab_size, in + 40, 8);
  std::memcpy(&h.checksum, in + 48, 8);
  return h;
}

// Bytes of the token section including its padding to a multiple of 8.
inline uint64_t padded_token_bytes(uint64_t num_tokens) { return (num_tokens * 4 + 7) / 8 * 8; }

// FNV-1a 64, fed incrementally.
class Fnv1a {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t h = hash_;
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 0x100000001b3ull;
    }
    hash_ = h;
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

inline std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 15];
  return s;
}

inline std::string shard_file_name(size_t index) {
  std::string n = std::to_string(index);
  if (n.size() < 5) n.insert(0, 5 - n.size(), '0');
  return "shard-" + n + ".bin";
}

}  // namespace kiln::data::corpus_format
