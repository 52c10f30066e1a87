// Note [Word cache]: the cache BPE and Unigram keep of their words' results
// (data/tokenizer/word_cache.h), directly and through the models.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/tokenizer/json_util.h"
#include "kiln/data/tokenizer/pipeline.h"
#include "kiln/data/tokenizer/word_cache.h"

namespace {

using namespace kiln::data::tok;

// Note [Word cache]: a thread's table of recent words is shared by every
// model the thread runs; each entry names its cache, so models never see
// each other's words, not even a new model at a freed one's address.
TEST(TokModels, WordCachesOfModelsInOneThreadStayApart) {
  const auto bpe = [](bool merge) {
    return model_from_json(Json::parse(std::string(R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                                                     "merges": )") +
                                       (merge ? R"(["a b"]})" : "[]}")),
                           "model");
  };
  const auto ids = [](const Model& m, const std::string& text) {
    std::vector<Token> out;
    m.tokenize(text, out);
    std::vector<int32_t> v;
    for (const Token& t : out) v.push_back(t.id);
    return v;
  };
  const std::vector<int32_t> merged{2}, apart{0, 1};
  for (int round = 0; round < 50; ++round) {
    auto a = bpe(true);
    auto b = bpe(false);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(ids(*a, "ab"), merged);
      EXPECT_EQ(ids(*b, "ab"), apart);
    }
    a.reset();
    auto c = bpe(false);  // may reuse a's memory
    EXPECT_EQ(ids(*c, "ab"), apart);
  }
}

// Note [Word cache]: what a WordCache returns is what was inserted for that
// word, through generations rolling over (a tiny capacity), words promoted
// from the previous generation, words too long for the per-thread table,
// empty item lists, and threads sharing slots.
TEST(TokModels, WordCacheReturnsWhatWasInsertedThroughGenerations) {
  using Cache = WordCache<uint64_t>;
  const auto word = [](size_t i) {
    std::string w = kiln::detail::str_cat("w", i);
    if (i % 7 == 0) w += std::string(40 + i % 200, 'x');  // past the per-thread table
    return w.substr(0, Cache::kMaxWordBytes - 1);
  };
  const auto items = [](size_t i) {
    std::vector<uint64_t> v(i % 9);  // 0 to 8 items
    for (size_t k = 0; k < v.size(); ++k) v[k] = i * 1000 + k;
    return v;
  };
  for (const size_t capacity : {size_t{1}, size_t{5}, size_t{64}}) {
    Cache cache(capacity);
    std::atomic<size_t> wrong{0}, found{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 20; ++t)  // more threads than slots
      threads.emplace_back([&, t] {
        Cache::Local local;
        std::vector<uint64_t> out;
        for (size_t round = 0; round < 3; ++round)
          for (size_t i = static_cast<size_t>(t); i < 400; ++i) {
            const std::string w = word(i);
            if (cache.find(local, w, out)) {
              ++found;
              wrong += out != items(i);
            } else {
              const std::vector<uint64_t> v = items(i);
              cache.insert(local, w, v.data(), v.size());
              // (Threads sharing the slot may have pushed it out since.)
              if (cache.find(local, w, out)) wrong += out != v;
            }
          }
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0u) << "capacity " << capacity;
    EXPECT_GT(found.load(), 0u) << "capacity " << capacity;
  }
}

}  // namespace
