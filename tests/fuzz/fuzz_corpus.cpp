// Fuzz target: TokenCorpus::open (a `kiln prepare` folder: index.json + token
// shards, data/corpus.h Notes [Token shard format] and [Corpus index]).
//
// Input layout: index.json, then the shards, each starting with its magic
// "KILNTOKS"; the input is split before every "KILNTOKS" and shard k is
// written as shard-0000k.bin (the name `kiln prepare` gives it) into an
// emptied folder. A prepared corpus concatenated (cat index.json shard-*) is
// thus a valid input.
//
// Properties: open() either succeeds or throws kiln::Error, with and without
// verify_data; what verify_data accepts, the structural check accepts too; an
// accepted corpus upholds the Corpus invariants of data/corpus.h (documents
// tile the sentences in order, no empty document or sentence, token counts add
// up, ids inside the vocab when verified), and indices out of range are a
// kiln::Error.
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "data/corpus.h"
#include "data/corpus_format.h"
#include "scratch.h"

namespace {

using kiln::data::TokenCorpus;

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_corpus", what); }

std::shared_ptr<TokenCorpus> open(const std::string& dir, bool verify) {
  try {
    return TokenCorpus::open(dir, {.verify_data = verify});
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return nullptr;  // rejected cleanly
  }
}

void check(const TokenCorpus& c, bool verified) {
  size_t next_sentence = 0;
  uint64_t tokens = 0;
  for (size_t d = 0; d < c.num_documents(); ++d) {
    const kiln::data::SentenceRange r = c.document(d);
    require(r.first == next_sentence && r.count >= 1, "documents tile the sentences in order");
    next_sentence += r.count;
  }
  require(next_sentence == c.num_sentences(), "documents cover every sentence");
  for (size_t s = 0; s < c.num_sentences(); ++s) {
    const auto ids = c.sentence(s);
    require(!ids.empty(), "no empty sentence");
    tokens += ids.size();
    if (verified)
      for (int32_t id : ids) require(id >= 0 && static_cast<size_t>(id) < c.vocab_size(), "ids inside the vocab");
  }
  require(tokens == c.num_tokens(), "sentence lengths add up to num_tokens");
  require(kiln_fuzz::throws_error([&] { (void)c.document(c.num_documents()); }) &&
              kiln_fuzz::throws_error([&] { (void)c.sentence(c.num_sentences()); }),
          "an index out of range is a kiln::Error");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  namespace cf = kiln::data::corpus_format;
  const std::string dir = scratch.fresh_dir();
  const std::string_view magic(cf::kMagic, sizeof cf::kMagic);
  const auto parts = kiln_fuzz::split(kiln_fuzz::as_text(data, size), magic);
  kiln_fuzz::write_file(dir + "/" + cf::kIndexFile, parts[0]);
  for (size_t k = 1; k < parts.size(); ++k)
    kiln_fuzz::write_file(dir + "/" + cf::shard_file_name(k - 1), std::string(magic) + std::string(parts[k]));

  const auto structural = open(dir, false);
  if (structural) check(*structural, false);
  const auto verified = open(dir, true);
  if (verified) {
    require(structural != nullptr, "what verify_data accepts, the structural check accepts");
    require(verified->num_tokens() == structural->num_tokens() &&
                verified->num_documents() == structural->num_documents(),
            "verify_data does not change the counts");
    check(*verified, true);
  }
  return 0;
}
