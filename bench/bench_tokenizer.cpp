// bench_tokenizer: BERT WordPiece throughput (tokens/s) of kiln's
// BertTokenizer::encode_batch, on one thread and on all threads.
//
// usage: bench_tokenizer VOCAB FILE... [--repeat N] [--threads N]
// Every '\n'-separated line of the files is one text; tokens include
// [CLS]/[SEP] (as HF's encode_batch counts them). Prints one line per thread
// count: "kiln threads=T lines=L tokens=N best_s=S tokens_per_s=R".
// bench/tokenizer_vs_hf.py runs this beside HF tokenizers on the same input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "data/tokenizer/bert_tokenizer.h"

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "bench_tokenizer: cannot open '", path, "'");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> positional;
    int repeat = 5, all_threads = kiln::get_num_threads();
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--repeat" && i + 1 < argc) {
        repeat = std::atoi(argv[++i]);
      } else if (a == "--threads" && i + 1 < argc) {
        all_threads = std::atoi(argv[++i]);
      } else {
        positional.push_back(a);
      }
    }
    if (positional.size() < 2 || repeat < 1 || all_threads < 1) {
      std::fprintf(stderr, "usage: bench_tokenizer VOCAB FILE... [--repeat N] [--threads N]\n");
      return 2;
    }
    const auto tok = kiln::data::BertTokenizer::from_vocab_file(positional[0]);
    std::vector<std::string> texts;
    for (size_t f = 1; f < positional.size(); ++f)
      for (auto& line : read_lines(positional[f])) texts.push_back(std::move(line));

    std::vector<int> thread_counts = {1};
    if (all_threads > 1) thread_counts.push_back(all_threads);
    for (int threads : thread_counts) {
      kiln::set_num_threads(threads);
      double best = 1e30;
      size_t tokens = 0;
      tok.encode_batch(texts);  // warm-up: thread pool, scratch buffers, page faults
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto encodings = tok.encode_batch(texts);
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
        tokens = 0;
        for (const auto& e : encodings) tokens += e.size();
      }
      std::printf("kiln threads=%d lines=%zu tokens=%zu best_s=%.4f tokens_per_s=%.0f\n", threads,
                  texts.size(), tokens, best, static_cast<double>(tokens) / best);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
