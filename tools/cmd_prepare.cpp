// `kiln prepare`: tokenizes raw text into memory-mapped token shards with an
// index (data/corpus.h), on all cores, for `kiln pretrain --train-file DIR`.
#include <cstdio>

#include "data/corpus.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "data/tokenizer/pipeline_tokenizer.h"
#include "kiln.h"
#include "tools/command.h"

namespace kiln::tools {
namespace {

struct PrepareCmd {
  std::vector<std::string> inputs;
  std::string vocab, tokenizer, output_dir;
  bool cased = false;
  uint64_t shard_tokens = uint64_t{1} << 24;
  size_t max_sentences_per_document = 0;
};

int run_prepare(const PrepareCmd& o) {
  KILN_CHECK(o.vocab.empty() != o.tokenizer.empty(),
             "prepare: give one of --vocab (a BERT vocab.txt) or --tokenizer (a tokenizer.json or model directory)");
  // Note [Choosing a tokenizer] (data/tokenizer/pipeline_tokenizer.h).
  const std::unique_ptr<data::TextTokenizer> tok =
      o.vocab.empty() ? data::open_text_tokenizer(o.tokenizer, o.cased)
                      : std::make_unique<data::BertTokenizer>(data::BertTokenizer::from_vocab_file(o.vocab, !o.cased));
  data::PrepareOptions opts;
  opts.shard_tokens = o.shard_tokens;
  opts.max_sentences_per_document = o.max_sentences_per_document;
  const data::PrepareStats s = data::prepare_corpus(o.inputs, *tok, o.output_dir, opts);
  std::printf("kiln prepare: %zu files, %zu lines -> %zu documents, %zu sentences, %llu tokens (%llu [UNK]) in %zu "
              "shards at %s\n",
              s.files, s.lines, s.documents, s.sentences, static_cast<unsigned long long>(s.tokens),
              static_cast<unsigned long long>(s.unk_tokens), s.shards, o.output_dir.c_str());
  return 0;
}

const Registrar reg("prepare", [](CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "prepare",
      "Tokenize raw text (one sentence per line, blank lines between documents; plain text accepted) into "
      "token shards with an index");
  auto o = std::make_shared<PrepareCmd>();
  cmd->add_option("inputs", o->inputs, "input text files")->required()->check(CLI::ExistingFile);
  cmd->add_option("--vocab", o->vocab, "WordPiece vocab.txt")->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer", o->tokenizer,
                  "a tokenizer.json or a Hugging Face model directory (any tokenizer family)")
      ->check(CLI::ExistingPath);
  cmd->add_option("--output-dir", o->output_dir, "directory for the shards and index.json")->required();
  cmd->add_flag("--cased", o->cased, "keep case and accents of a BERT WordPiece vocabulary (default: uncased)");
  cmd->add_option("--shard-tokens", o->shard_tokens, "tokens per shard (closed at a document end)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-sentences-per-document", o->max_sentences_per_document,
                  "also end a document after this many sentences (0: only blank lines end documents)");
  return [o] { return run_prepare(*o); };
});

}  // namespace
}  // namespace kiln::tools
