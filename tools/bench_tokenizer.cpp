// `kiln bench tokenizer`: tokens/s of Tokenizer::encode_batch for any
// Hugging Face tokenizer (a tokenizer.json or model directory), on 1 thread
// and on --threads threads. bench/tokenizer_vs_hf.py runs it beside HF
// tokenizers' encode_batch in alternating rounds (docs/performance.md).
//
// Every '\n'-separated line of the files is one text; tokens count the
// post-processor's special tokens (as HF's encode_batch). Prints one line per
// thread count:
//   bench tokenizer threads=T lines=L tokens=N median_s=S tokens_per_s=R
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "core/parallel.h"
#include "data/tokenizer/tokenizer.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct TokenizerBenchOptions {
  std::string tokenizer;
  std::vector<std::string> files;
  int threads = 0;
  int repeat = 5;
};

int run_tokenizer_bench(const TokenizerBenchOptions& o) {
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(o.tokenizer);
  std::vector<std::string> lines;
  for (const std::string& path : o.files) {
    std::ifstream in(path, std::ios::binary);
    KILN_CHECK(in.good(), "bench tokenizer: cannot open '", path, "'");
    for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  }
  const int all = o.threads > 0 ? o.threads : get_num_threads();
  std::vector<int> counts{1};
  if (all > 1) counts.push_back(all);
  for (int t : counts) {
    set_num_threads(t);
    size_t tokens = 0;
    const double s = median_seconds(
        [&] {
          tokens = 0;
          for (const auto& e : tok.encode_batch(lines)) tokens += e.size();
        },
        o.repeat);
    std::printf("bench tokenizer threads=%d lines=%zu tokens=%zu median_s=%.4f tokens_per_s=%.0f\n", t,
                lines.size(), tokens, s, static_cast<double>(tokens) / s);
  }
  return 0;
}

const BenchRegistrar reg("tokenizer", [](CLI::App& bench) {
  auto o = std::make_shared<TokenizerBenchOptions>();
  auto* cmd = bench.add_subcommand("tokenizer", "Tokenizer::encode_batch tokens/s (any HF tokenizer)");
  cmd->add_option("--tokenizer", o->tokenizer, "a tokenizer.json or a model directory")->required();
  cmd->add_option("files", o->files, "text files, one text per line")->required();
  cmd->add_option("--threads", o->threads, "thread count of the second run (default: all)");
  cmd->add_option("--repeat", o->repeat, "timed runs per thread count (median)")->check(CLI::Range(1, 1000));
  return [o] { return run_tokenizer_bench(*o); };
});

}  // namespace
}  // namespace kiln::tools
