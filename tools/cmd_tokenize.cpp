// `kiln tokenize`: token ids of each stdin line, Hugging Face-exact, with a
// BERT vocab.txt (--vocab) or any HF tokenizer (--tokenizer: a tokenizer.json
// or a model directory); --decode turns ids back into text (see --help).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "data/tokenizer/tokenizer.h"
#include "tools/command.h"

namespace kiln::tools {
namespace {

struct TokenizeArgs {
  std::string vocab;
  std::string tokenizer;
  bool decode = false;
  bool keep_special = false;
  bool cased = false;
  bool pairs = false;
  bool no_special = false;
  bool tokens = false;
  size_t max_length = 0;
  size_t pad_to = 0;
};

constexpr const char* kFooter = R"(Output format:
  Input is read from stdin and split on '\n'; each input line gives one
  output line of space-separated token ids, as HF's tokenizer(text)["input_ids"]
  (Tokenizer.encode(line).ids): the post-processor's special tokens included
  ([CLS] ids [SEP] for BERT; none with --no-special). An empty line gives
  "101 102" with the bert-base-uncased vocab.
  --tokenizer PATH: a tokenizer.json, or a model directory (its
  tokenizer.json, else vocab.json + merges.txt, a SentencePiece .model or
  vocab.txt); truncation and padding come from the tokenizer.json unless
  --max-length / --pad-to say otherwise.
  --decode: each input line holds space-separated ids; prints HF's
  decode(ids, skip_special_tokens=True) (--keep-special: False). An id
  outside the vocabulary is skipped, as HF does; a word that is not an id is
  an error naming the line. A decoded text is printed as it is: one holding
  a newline spans more than one output line.
  --pairs: each line is "A<TAB>B" (split at the first tab; B keeps any later
  tabs). It gives two output lines: the ids of [CLS] A [SEP] B [SEP], then
  the token_type_ids (0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding).
  A line without a tab is an error naming the line.
  --tokens prints the WordPiece strings instead of ids.
  Invalid UTF-8 bytes are dropped (HF on the text decoded with U+FFFD replacement).
  Lines are encoded in batches of 4096 on all cores (KILN_NUM_THREADS), so
  output appears per batch.
)";

void append_ids(std::string& out, const std::vector<int32_t>& ids, const data::BertTokenizer* tok) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += tok ? tok->id_to_token(ids[i]) : std::to_string(ids[i]);
  }
  out += '\n';
}

// Splits `lines` into pairs at the first tab (--pairs).
std::vector<std::pair<std::string, std::string>> split_pairs(const std::vector<std::string>& lines,
                                                             size_t first_line_number) {
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t tab = lines[i].find('\t');
    KILN_CHECK(tab != std::string::npos, "tokenize --pairs: line ", first_line_number + i,
               " has no tab separating the two sentences");
    pairs.emplace_back(lines[i].substr(0, tab), lines[i].substr(tab + 1));
  }
  return pairs;
}

void flush_batch(const data::BertTokenizer& tok, const TokenizeArgs& args,
                 std::vector<std::string>& lines, size_t first_line_number) {
  data::EncodeOptions options;
  options.add_special_tokens = !args.no_special;
  options.max_length = args.max_length;
  options.pad_to = args.pad_to;
  std::vector<data::Encoding> encodings;
  if (args.pairs) {
    encodings = tok.encode_batch(split_pairs(lines, first_line_number), options);
  } else {
    encodings = tok.encode_batch(lines, options);
  }
  std::string out;
  for (const data::Encoding& e : encodings) {
    append_ids(out, e.ids, args.tokens ? &tok : nullptr);
    if (args.pairs) append_ids(out, e.type_ids, nullptr);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  lines.clear();
}

void append_hf(std::string& out, const std::vector<int32_t>& ids, const data::Tokenizer* tok) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += tok ? tok->id_to_token(ids[i]).value_or("") : std::to_string(ids[i]);
  }
  out += '\n';
}

std::vector<int32_t> parse_ids(const std::string& line, size_t line_number) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i == line.size()) break;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    const std::string word = line.substr(i, j - i);
    int64_t v = -1;
    const bool digits = word.size() <= 10 && word.find_first_not_of("0123456789") == std::string::npos;
    if (digits) v = std::stoll(word);
    KILN_CHECK(digits && v <= INT32_MAX, "tokenize --decode: line ", line_number, ": \"", word,
               "\" is not a token id (a non-negative integer below 2^31)");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

void flush_batch_hf(const data::Tokenizer& tok, const TokenizeArgs& args,
                    std::vector<std::string>& lines, size_t first_line_number) {
  std::string out;
  if (args.decode) {
    std::vector<std::vector<int32_t>> ids;
    ids.reserve(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) ids.push_back(parse_ids(lines[i], first_line_number + i));
    for (const std::string& text : tok.decode_batch(ids, !args.keep_special)) {
      out += text;
      out += '\n';
    }
  } else {
    const std::vector<data::tok::Encoding> encodings =
        args.pairs ? tok.encode_batch(split_pairs(lines, first_line_number), !args.no_special)
                   : tok.encode_batch(lines, !args.no_special);
    for (const data::tok::Encoding& e : encodings) {
      append_hf(out, e.ids, args.tokens ? &tok : nullptr);
      if (args.pairs) append_hf(out, e.type_ids, nullptr);
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  lines.clear();
}

template <typename Flush>
void for_each_batch(Flush flush) {
  std::ios::sync_with_stdio(false);
  constexpr size_t kBatch = 4096;
  std::vector<std::string> lines;
  size_t line_number = 0, batch_first = 1;
  std::string line;
  while (std::getline(std::cin, line)) {
    ++line_number;
    lines.push_back(std::move(line));
    line.clear();
    if (lines.size() == kBatch) {
      flush(lines, batch_first);
      batch_first = line_number + 1;
    }
  }
  if (!lines.empty()) flush(lines, batch_first);
  std::fflush(stdout);
}

int run_tokenize(const TokenizeArgs& args) {
  KILN_CHECK(args.vocab.empty() != args.tokenizer.empty(),
             "tokenize: give exactly one of --vocab (a BERT vocab.txt) or --tokenizer (a "
             "tokenizer.json or model directory)");
  if (!args.tokenizer.empty()) {
    KILN_CHECK(!args.cased, "tokenize: --cased is for --vocab; a tokenizer.json says its own case");
    data::Tokenizer tok = data::Tokenizer::from_pretrained(args.tokenizer);
    if (args.max_length > 0) {
      data::TruncationParams t = tok.truncation().value_or(data::TruncationParams{});
      t.max_length = args.max_length;
      tok.set_truncation(t);
    }
    if (args.pad_to > 0) {
      data::PaddingParams p = tok.padding().value_or(data::PaddingParams{});
      p.fixed_length = args.pad_to;
      tok.set_padding(p);
    }
    for_each_batch([&](std::vector<std::string>& lines, size_t first) {
      flush_batch_hf(tok, args, lines, first);
    });
    return 0;
  }
  KILN_CHECK(!args.decode, "tokenize --decode needs --tokenizer (with a BERT vocab.txt, give "
                           "its directory or file as --tokenizer)");
  const auto tok = data::BertTokenizer::from_vocab_file(args.vocab, !args.cased);
  for_each_batch([&](std::vector<std::string>& lines, size_t first) {
    flush_batch(tok, args, lines, first);
  });
  return 0;
}

const Registrar registrar("tokenize", [](CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "Print the token ids (Hugging Face-exact) of each stdin line, or decode ids");
  sub->add_option("--vocab", args->vocab, "BERT vocab.txt, one token per line (e.g. bert-base-uncased)");
  sub->add_option("--tokenizer", args->tokenizer,
                  "a tokenizer.json or a Hugging Face model directory (any tokenizer family)");
  sub->add_flag("--decode", args->decode, "lines hold ids: print their decoded text (--tokenizer)");
  sub->add_flag("--keep-special", args->keep_special, "--decode: keep special tokens");
  sub->add_flag("--cased", args->cased,
                "keep case and accents (default: lowercase + strip accents)");
  sub->add_flag("--pairs", args->pairs, "lines are tab-separated sentence pairs");
  sub->add_flag("--no-special", args->no_special, "omit [CLS]/[SEP]");
  sub->add_flag("--tokens", args->tokens, "print token strings instead of ids");
  sub->add_option("--max-length", args->max_length,
                  "truncate to this many ids incl. specials, longest_first (0: off)");
  sub->add_option("--pad-to", args->pad_to, "pad with [PAD] to this length (0: off)");
  sub->footer(kFooter);
  return [args] { return run_tokenize(*args); };
});

}  // namespace
}  // namespace kiln::tools
