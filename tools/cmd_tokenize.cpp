// `kiln tokenize`: BERT WordPiece token ids of each stdin line (see --help).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "tools/command.h"

namespace kiln::tools {
namespace {

struct TokenizeArgs {
  std::string vocab;
  bool cased = false;
  bool pairs = false;
  bool no_special = false;
  bool tokens = false;
  size_t max_length = 0;
  size_t pad_to = 0;
};

constexpr const char* kFooter = R"(Output format:
  Input is read from stdin and split on '\n'; each input line gives one
  output line of space-separated token ids, as HF's tokenizer(text)["input_ids"]:
  [CLS] ids [SEP] (no [CLS]/[SEP] with --no-special). An empty line gives
  "101 102" with the bert-base-uncased vocab.
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

void flush_batch(const data::BertTokenizer& tok, const TokenizeArgs& args,
                 std::vector<std::string>& lines, size_t first_line_number) {
  data::EncodeOptions options;
  options.add_special_tokens = !args.no_special;
  options.max_length = args.max_length;
  options.pad_to = args.pad_to;
  std::vector<data::Encoding> encodings;
  if (args.pairs) {
    std::vector<std::pair<std::string, std::string>> pairs;
    pairs.reserve(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      const size_t tab = lines[i].find('\t');
      KILN_CHECK(tab != std::string::npos, "tokenize --pairs: line ", first_line_number + i,
                 " has no tab separating the two sentences");
      pairs.emplace_back(lines[i].substr(0, tab), lines[i].substr(tab + 1));
    }
    encodings = tok.encode_batch(pairs, options);
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

int run_tokenize(const TokenizeArgs& args) {
  const auto tok = data::BertTokenizer::from_vocab_file(args.vocab, !args.cased);
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
      flush_batch(tok, args, lines, batch_first);
      batch_first = line_number + 1;
    }
  }
  if (!lines.empty()) flush_batch(tok, args, lines, batch_first);
  std::fflush(stdout);
  return 0;
}

const Registrar registrar("tokenize", [](CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "tokenize", "Print BERT WordPiece token ids (Hugging Face-exact) of each stdin line");
  sub->add_option("--vocab", args->vocab, "vocab.txt, one token per line (e.g. bert-base-uncased)")
      ->required();
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
