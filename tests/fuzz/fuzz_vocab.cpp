// Fuzz target: a vocab.txt (Vocab::from_file, BertTokenizer::from_vocab_file),
// then tokenizing with that vocabulary.
//
// Input: the file itself, written to a scratch file.
//
// Properties: loading either succeeds or throws kiln::Error; an accepted vocab
// has one token per line (std::getline's lines: a last line without '\n'
// counts), token(i) is line i without trailing whitespace, find() of a token
// gives the last line holding it, [UNK] is present; encoding a fixed sample
// and the file's own text never throws, gives ids inside the vocab, and
// decodes without throwing.
#include <cstdint>
#include <string>
#include <string_view>
#include <optional>
#include <vector>
#include <cstdio>

#include "core/error.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "scratch.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_vocab", what); }

void check_ids(const kiln::data::BertTokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) require(id >= 0 && static_cast<size_t>(id) < tok.vocab_size(), "ids inside the vocab");
  try {
    (void)tok.decode(ids, true);
    (void)tok.decode(ids, false);
  } catch (const kiln::Error&) {
    require(false, "decode of encoded ids does not throw");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  const std::string_view text = kiln_fuzz::as_text(data, size);
  const std::string path = scratch.fresh_dir() + "/vocab.txt";
  kiln_fuzz::write_file(path, text);
  const bool lowercase = size % 2 == 0;
  std::optional<kiln::data::BertTokenizer> tok;
  try {
    tok.emplace(kiln::data::BertTokenizer::from_vocab_file(path, lowercase));
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return 0;  // rejected cleanly
  }

  // The lines as std::getline splits them, trailing whitespace removed.
  const auto lines = kiln_fuzz::split(text, "\n");
  const size_t count = lines.size() - (lines.back().empty() ? 1 : 0);
  const kiln::data::Vocab& vocab = tok->vocab();
  require(vocab.size() == count, "one token per line");
  for (size_t i = 0; i < count; ++i) {
    std::string_view line = lines[i];
    while (!line.empty() && std::string_view(" \t\r\n\v\f").find(line.back()) != std::string_view::npos)
      line.remove_suffix(1);
    require(vocab.token(static_cast<int32_t>(i)) == line, "token(i) is line i without trailing whitespace");
    const int32_t found = vocab.find(line);
    require(found >= static_cast<int32_t>(i) && vocab.token(found) == line, "find() gives the last such line");
  }
  require(tok->unk_id() >= 0 && vocab.token(tok->unk_id()) == "[UNK]", "[UNK] is present");

  try {
    check_ids(*tok, tok->encode_ids("Hello, [MASK] world! unaffable ##ing 中文 café [SEP][CLS] x"));
    check_ids(*tok, tok->encode_ids(text));
    kiln::data::EncodeOptions options;
    options.add_special_tokens = tok->cls_id() >= 0 && tok->sep_id() >= 0;
    options.max_length = 16;
    options.pad_to = tok->pad_id() >= 0 ? 20 : 0;
    check_ids(*tok, tok->encode(text.substr(0, 64), std::string_view("the pair"), options).ids);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "encoding with an accepted vocab does not throw");
  }
  return 0;
}
