// Pretraining data (data/pretraining.h, data/synthetic_corpus.h): masking
// statistics and whole-word groups, determinism, packing bounds and order,
// next-sentence pairs, the dataset + collate, and the synthetic language.
// Data from KILN_DATA (default ../shared/data); a missing file fails.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "data/pretraining.h"
#include "data/synthetic_corpus.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "test_util.h"

namespace kiln::data {
namespace {
namespace fs = std::filesystem;

using ::kiln::testing::data_file;  // KILN_DATA/rel, an error when missing

const BertTokenizer& bert() {
  static const BertTokenizer tok = BertTokenizer::from_vocab_file(data_file("vocab/bert-base-uncased-vocab.txt"));
  return tok;
}

// WikiText-2 valid as one token stream (ids of its non-blank lines, in order).
const std::vector<int32_t>& wikitext_ids() {
  static const std::vector<int32_t> ids = [] {
    std::ifstream in(data_file("wikitext-2/valid.txt"), std::ios::binary);
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line))
      if (line.find_first_not_of(" \t\r\xEF\xBB\xBF") != std::string::npos) lines.push_back(line);
    std::vector<int32_t> all;
    for (const auto& ids : bert().encode_ids_batch(lines)) all.insert(all.end(), ids.begin(), ids.end());
    return all;
  }();
  return ids;
}

// Sequence k: [CLS] + 126 WikiText tokens + [SEP].
std::vector<int32_t> wiki_sequence(size_t k) {
  const auto& all = wikitext_ids();
  const size_t begin = (k * 126) % (all.size() - 126);
  std::vector<int32_t> seq{bert().cls_id()};
  seq.insert(seq.end(), all.begin() + static_cast<std::ptrdiff_t>(begin),
             all.begin() + static_cast<std::ptrdiff_t>(begin + 126));
  seq.push_back(bert().sep_id());
  return seq;
}

// ---- masking ---------------------------------------------------------------

TEST(Masking, RatesMatchBertsScheme) {
  const MaskingVocab vocab = MaskingVocab::from_tokenizer(bert());
  EXPECT_TRUE(vocab.is_special[static_cast<size_t>(bert().unk_id())]);
  EXPECT_TRUE(vocab.is_continuation[static_cast<size_t>(bert().token_to_id("##s"))]);
  size_t candidates = 0, chosen = 0, as_mask = 0, unchanged = 0, random = 0;
  for (size_t k = 0; k < 2000; ++k) {
    std::vector<int32_t> ids = wiki_sequence(k);
    ids[5] = bert().unk_id();  // specials anywhere are never masked
    Generator rng(1000 + k);
    const MaskedExample m = mask_tokens(ids, vocab, {}, rng);
    ASSERT_EQ(m.input_ids.size(), ids.size());
    size_t labelled = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (vocab.is_special[static_cast<size_t>(ids[i])]) {
        ASSERT_EQ(m.labels[i], kIgnoreIndex) << "special masked at " << i;
        ASSERT_EQ(m.input_ids[i], ids[i]);
        continue;
      }
      ++candidates;
      if (m.labels[i] == kIgnoreIndex) {
        ASSERT_EQ(m.input_ids[i], ids[i]);
        continue;
      }
      ASSERT_EQ(m.labels[i], ids[i]);
      ++labelled;
      if (m.input_ids[i] == vocab.mask_id)
        ++as_mask;
      else if (m.input_ids[i] == ids[i])
        ++unchanged;
      else {
        ++random;
        ASSERT_FALSE(vocab.is_special[static_cast<size_t>(m.input_ids[i])]);
      }
    }
    ASSERT_EQ(labelled, m.num_predictions);
    chosen += labelled;
  }
  const double rate = static_cast<double>(chosen) / static_cast<double>(candidates);
  EXPECT_NEAR(rate, 0.15, 0.005);
  EXPECT_NEAR(static_cast<double>(as_mask) / static_cast<double>(chosen), 0.8, 0.015);
  EXPECT_NEAR(static_cast<double>(random) / static_cast<double>(chosen), 0.1, 0.01);
  EXPECT_NEAR(static_cast<double>(unchanged) / static_cast<double>(chosen), 0.1, 0.01);
}

TEST(Masking, WholeWordGroupsAreMaskedTogether) {
  const MaskingVocab vocab = MaskingVocab::from_tokenizer(bert());
  MaskingOptions opt;
  opt.whole_word = true;
  size_t candidates = 0, chosen = 0, multi_piece_words_chosen = 0;
  for (size_t k = 0; k < 1000; ++k) {
    const std::vector<int32_t> ids = wiki_sequence(k);
    Generator rng(7 + k);
    const MaskedExample m = mask_tokens(ids, vocab, opt, rng);
    for (size_t i = 1; i + 1 < ids.size(); ++i) {
      ++candidates;
      chosen += m.labels[i] != kIgnoreIndex;
      if (vocab.is_continuation[static_cast<size_t>(ids[i])] && i > 1 &&
          !vocab.is_special[static_cast<size_t>(ids[i - 1])]) {
        ASSERT_EQ(m.labels[i] != kIgnoreIndex, m.labels[i - 1] != kIgnoreIndex)
            << "sequence " << k << ": piece " << i << " (" << bert().id_to_token(ids[i])
            << ") masked apart from its word";
        if (m.labels[i] != kIgnoreIndex) ++multi_piece_words_chosen;
      }
    }
  }
  EXPECT_GT(multi_piece_words_chosen, 500u);
  EXPECT_NEAR(static_cast<double>(chosen) / static_cast<double>(candidates), 0.15, 0.01);
}

TEST(Masking, DeterministicForTheSameGeneratorState) {
  const MaskingVocab vocab = MaskingVocab::from_tokenizer(bert());
  const std::vector<int32_t> ids = wiki_sequence(3);
  for (bool whole_word : {false, true}) {
    MaskingOptions opt;
    opt.whole_word = whole_word;
    Generator a(99), b(99), c(100);
    const MaskedExample ma = mask_tokens(ids, vocab, opt, a), mb = mask_tokens(ids, vocab, opt, b),
                        mc = mask_tokens(ids, vocab, opt, c);
    EXPECT_EQ(ma.input_ids, mb.input_ids);
    EXPECT_EQ(ma.labels, mb.labels);
    EXPECT_NE(ma.labels, mc.labels);
    EXPECT_EQ(a.state().offset, 1u);  // one generator call per sequence
  }
}

TEST(Masking, EdgeCasesAndErrors) {
  const MaskingVocab vocab = MaskingVocab::from_tokenizer(bert());
  Generator rng(1);
  // Only specials: nothing to predict.
  const std::vector<int32_t> specials{bert().cls_id(), bert().pad_id(), bert().sep_id()};
  EXPECT_EQ(mask_tokens(specials, vocab, {}, rng).num_predictions, 0u);
  // A short sequence still gets one prediction; never_mask is honoured.
  const std::vector<int32_t> two{bert().token_to_id("hello"), bert().token_to_id("world")};
  EXPECT_EQ(mask_tokens(two, vocab, {}, rng).num_predictions, 1u);
  const std::vector<uint8_t> keep_first{1, 0};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(mask_tokens(two, vocab, {}, rng, keep_first).labels[0], kIgnoreIndex);
  MaskingOptions none;
  none.mlm_probability = 0;
  EXPECT_EQ(mask_tokens(two, vocab, none, rng).num_predictions, 0u);
  MaskingOptions capped;
  capped.max_predictions = 5;
  EXPECT_EQ(mask_tokens(wiki_sequence(1), vocab, capped, rng).num_predictions, 5u);
  MaskingOptions all_mask;
  all_mask.mlm_probability = 1;
  all_mask.mask_token_fraction = 1;
  all_mask.random_token_fraction = 0;
  const MaskedExample m = mask_tokens(two, vocab, all_mask, rng);
  EXPECT_EQ(m.input_ids, (std::vector<int32_t>{bert().mask_id(), bert().mask_id()}));

  MaskingOptions bad;
  bad.mlm_probability = 1.5;
  EXPECT_KILN_ERROR(mask_tokens(two, vocab, bad, rng), "mlm_probability");
  bad = {};
  bad.random_token_fraction = 0.5;
  EXPECT_KILN_ERROR(mask_tokens(two, vocab, bad, rng), "sum <= 1");
  const std::vector<int32_t> outside{5, 999999};
  EXPECT_KILN_ERROR(mask_tokens(outside, vocab, {}, rng), "999999", "outside the vocab");
  EXPECT_KILN_ERROR(mask_tokens(two, vocab, {}, rng, std::vector<uint8_t>{1}), "never_mask");
}

// ---- packing ---------------------------------------------------------------

std::vector<int32_t> content_of(const PackedSequence& p) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < p.ids.size(); ++i)
    if (!p.special[i]) out.push_back(p.ids[i]);
  return out;
}

TEST(Packing, GreedyChunksOfSentences) {
  const SpecialTokenIds sp{0, 1, 2, 3, 4};
  // doc 0: sentences of 3, 4 and 10 tokens; doc 1: 2 tokens. Budget 6.
  const InMemoryCorpus c({{{10, 11, 12}, {13, 14, 15, 16}, {20, 21, 22, 23, 24, 25, 26, 27, 28, 29}}, {{30, 31}}}, 40,
                         sp);
  const PackingPlan plan(c, {8, false});
  ASSERT_EQ(plan.num_examples(), 5u);
  Generator rng(0);
  const std::vector<std::vector<int32_t>> want = {{2, 10, 11, 12, 3},
                                                  {2, 13, 14, 15, 16, 3},
                                                  {2, 20, 21, 22, 23, 24, 25, 3},
                                                  {2, 26, 27, 28, 29, 3},
                                                  {2, 30, 31, 3}};
  for (size_t i = 0; i < want.size(); ++i) {
    const PackedSequence p = make_packed_example(c, plan, i, rng);
    EXPECT_EQ(p.ids, want[i]) << "example " << i;
    EXPECT_EQ(p.type_ids, std::vector<int32_t>(want[i].size(), 0));
    EXPECT_EQ(p.next_sentence_label, -1);
  }
  EXPECT_EQ(rng.state().offset, 0u);  // packing without NSP draws nothing
  EXPECT_KILN_ERROR(make_packed_example(c, plan, 5, rng), "out of range");
  const InMemoryCorpus other({{{10}}}, 40, sp);
  EXPECT_KILN_ERROR(make_packed_example(other, plan, 0, rng), "built for a corpus");
  EXPECT_KILN_ERROR(PackingPlan(c, {2, false}), "max_seq_length 2");
  EXPECT_KILN_ERROR(PackingPlan(other, {16, true}), "at least 2 documents");
  EXPECT_KILN_ERROR(PackingPlan(InMemoryCorpus({{{10}}}, 40, SpecialTokenIds{}), {16, false}), "[CLS]");
}

// Every token once, in corpus order, within max_seq_length; packing is
// greedy: an example is followed in its document by one whose first segment
// would not have fitted.
void expect_packing_covers(const Corpus& c, size_t max_seq_length) {
  const PackingPlan plan(c, {max_seq_length, false});
  std::vector<int32_t> corpus_tokens, packed_tokens;
  for (size_t s = 0; s < c.num_sentences(); ++s) {
    const auto span = c.sentence(s);
    corpus_tokens.insert(corpus_tokens.end(), span.begin(), span.end());
  }
  Generator rng(0);
  const auto& chunks = plan.chunks();
  for (size_t i = 0; i < plan.num_examples(); ++i) {
    if (i + 1 < chunks.size() && chunks[i + 1].document == chunks[i].document) {
      const PackingPlan::Segment& next = plan.segments()[chunks[i + 1].first_segment];
      ASSERT_GT(chunks[i].num_tokens + (next.end - next.begin), plan.budget()) << "example " << i;
    }
    const PackedSequence p = make_packed_example(c, plan, i, rng);
    ASSERT_LE(p.ids.size(), max_seq_length);
    ASSERT_GT(p.ids.size(), 2u);
    ASSERT_EQ(p.ids.front(), c.special_ids().cls);
    ASSERT_EQ(p.ids.back(), c.special_ids().sep);
    const auto content = content_of(p);
    packed_tokens.insert(packed_tokens.end(), content.begin(), content.end());
  }
  EXPECT_EQ(packed_tokens, corpus_tokens);
}

TEST(Packing, WikiTextNeverExceedsMaxLengthAndKeepsOrder) {
  std::vector<std::vector<std::vector<int32_t>>> docs(1);
  std::ifstream in(data_file("wikitext-2/valid.txt"), std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  const auto ids = bert().encode_ids_batch(lines);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!ids[i].empty()) {
      docs.back().push_back(ids[i]);
    } else if (!docs.back().empty()) {
      docs.emplace_back();
    }
  }
  if (docs.back().empty()) docs.pop_back();
  const InMemoryCorpus c(docs, bert().vocab_size(),
                         {bert().pad_id(), bert().unk_id(), bert().cls_id(), bert().sep_id(), bert().mask_id()});
  for (size_t length : {16, 64, 128, 512}) expect_packing_covers(c, length);
}

TEST(Packing, SyntheticCorpusNeverExceedsMaxLengthAndKeepsOrder) {
  SyntheticCorpusOptions opt;
  opt.num_documents = 200;
  const SyntheticCorpus c(opt);
  for (size_t length : {3, 8, 32, 128}) expect_packing_covers(c, length);
}

// NSP on a corpus whose documents hold disjoint, consecutive ids: document d
// is ids base(d), base(d)+1, ... so continuity and provenance are visible.
TEST(Packing, NextSentencePairs) {
  std::vector<std::vector<std::vector<int32_t>>> docs;
  uint64_t lcg = 12345;
  const auto next = [&](uint64_t n) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (lcg >> 33) % n;
  };
  for (int d = 0; d < 40; ++d) {
    docs.emplace_back();
    int32_t id = 10 + 100 * d;
    const size_t sentences = 1 + next(6);
    for (size_t s = 0; s < sentences; ++s) {
      docs.back().emplace_back();
      const size_t length = 1 + next(14);
      for (size_t k = 0; k < length; ++k) docs.back().back().push_back(id++);
    }
  }
  const InMemoryCorpus c(docs, 10 + 100 * 40, {0, 1, 2, 3, 4});
  const size_t max_len = 24;
  const PackingPlan plan(c, {max_len, true});
  size_t random_next = 0, total = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    for (size_t i = 0; i < plan.num_examples(); ++i) {
      Generator rng(seed * 100003 + i);
      const PackedSequence p = make_packed_example(c, plan, i, rng);
      ASSERT_LE(p.ids.size(), max_len);
      ASSERT_EQ(p.ids.front(), 2);
      ASSERT_EQ(p.ids.back(), 3);
      const size_t first_sep = static_cast<size_t>(std::find(p.ids.begin() + 1, p.ids.end(), 3) - p.ids.begin());
      ASSERT_LT(first_sep + 1, p.ids.size() - 1) << "B is empty";
      ASSERT_GT(first_sep, 1u) << "A is empty";
      for (size_t k = 0; k < p.ids.size(); ++k) ASSERT_EQ(p.type_ids[k], k <= first_sep ? 0 : 1);
      const std::vector<int32_t> a(p.ids.begin() + 1, p.ids.begin() + static_cast<std::ptrdiff_t>(first_sep));
      const std::vector<int32_t> b(p.ids.begin() + static_cast<std::ptrdiff_t>(first_sep) + 1, p.ids.end() - 1);
      const auto doc_of = [](int32_t id) { return (id - 10) / 100; };
      for (size_t k = 1; k < a.size(); ++k) ASSERT_EQ(a[k], a[k - 1] + 1);
      for (size_t k = 1; k < b.size(); ++k) ASSERT_EQ(b[k], b[k - 1] + 1);
      ASSERT_EQ(static_cast<uint64_t>(doc_of(a[0])), plan.chunks()[i].document);
      if (p.next_sentence_label == 0) {
        ASSERT_EQ(b.front(), a.back() + 1) << "actual next must continue A";
      } else {
        ASSERT_EQ(p.next_sentence_label, 1);
        ASSERT_NE(doc_of(b.front()), doc_of(a.front())) << "random next from the same document";
        ++random_next;
      }
      ++total;
    }
  }
  EXPECT_NEAR(static_cast<double>(random_next) / static_cast<double>(total), 0.5, 0.02);
}

TEST(Packing, NextSentenceLabelsBalancedOnSyntheticCorpus) {
  SyntheticCorpusOptions opt;
  opt.num_documents = 1000;
  const SyntheticCorpus c(opt);
  const PackingPlan plan(c, {64, true});
  EXPECT_GT(plan.num_examples(), 1000u);
  size_t random_next = 0, total = 0;
  for (uint64_t epoch = 0; epoch < 2; ++epoch)
    for (size_t i = 0; i < plan.num_examples(); ++i) {
      Generator rng(example_seed(3, static_cast<int64_t>(epoch), i));
      const PackedSequence p = make_packed_example(c, plan, i, rng);
      EXPECT_LE(p.ids.size(), 64u);
      random_next += p.next_sentence_label == 1;
      ++total;
    }
  EXPECT_NEAR(static_cast<double>(random_next) / static_cast<double>(total), 0.5, 0.04);
}

// ---- dataset and collate ---------------------------------------------------

TEST(PretrainingDataset, ExamplesAreDeterministicAndCollate) {
  SyntheticCorpusOptions opt;
  opt.num_documents = 100;
  auto corpus = std::make_shared<SyntheticCorpus>(opt);
  MaskingOptions masking;
  masking.whole_word = true;
  const PretrainingDataset ds(corpus, corpus->masking_vocab(), {32, true}, masking);
  ASSERT_GT(ds.size(), 4u);
  Generator g1(5), g2(5);
  const PretrainingExample e1 = ds.get(3, g1), e2 = ds.get(3, g2);
  EXPECT_EQ(e1.input_ids, e2.input_ids);
  EXPECT_EQ(e1.labels, e2.labels);
  EXPECT_EQ(e1.next_sentence_label, e2.next_sentence_label);

  std::vector<PretrainingExample> examples;
  for (size_t i = 0; i < 4; ++i) {
    Generator rng(example_seed(11, 0, i));
    examples.push_back(ds.get(i, rng));
    EXPECT_EQ(examples.back().input_ids.front(), 2);  // [CLS] never masked
  }
  size_t longest = 0;
  for (const auto& e : examples) longest = std::max(longest, e.input_ids.size());
  const PretrainingBatch batch = collate_pretraining(examples, 0);
  EXPECT_EQ(batch.input_ids.sizes(), (Shape{4, static_cast<int64_t>(longest)}));
  const PretrainingBatch fixed = collate_pretraining(examples, 0, 32);
  EXPECT_EQ(fixed.labels.sizes(), (Shape{4, 32}));
  ASSERT_TRUE(fixed.next_sentence_labels.defined());
  EXPECT_EQ(fixed.next_sentence_labels.sizes(), (Shape{4}));
  const auto ids = fixed.input_ids.to_vector<int64_t>(), mask = fixed.attention_mask.to_vector<int64_t>(),
             types = fixed.token_type_ids.to_vector<int64_t>(), labels = fixed.labels.to_vector<int64_t>();
  const auto nsp = fixed.next_sentence_labels.to_vector<int64_t>();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(nsp[i], examples[i].next_sentence_label);
    for (size_t j = 0; j < 32; ++j) {
      const bool real = j < examples[i].input_ids.size();
      EXPECT_EQ(ids[i * 32 + j], real ? examples[i].input_ids[j] : 0);
      EXPECT_EQ(mask[i * 32 + j], real ? 1 : 0);
      EXPECT_EQ(types[i * 32 + j], real ? examples[i].token_type_ids[j] : 0);
      EXPECT_EQ(labels[i * 32 + j], real ? examples[i].labels[j] : kIgnoreIndex);
    }
  }
  EXPECT_KILN_ERROR(collate_pretraining(examples, 0, 4), "more than pad_to");
  EXPECT_KILN_ERROR(collate_pretraining({}, 0), "empty batch");
  examples[1].next_sentence_label = -1;
  EXPECT_KILN_ERROR(collate_pretraining(examples, 0), "next-sentence label");
  EXPECT_KILN_ERROR(PretrainingDataset(corpus, MaskingVocab::from_tokenizer(bert())), "masking vocab has");
}

// ---- synthetic corpus --------------------------------------------------------

TEST(SyntheticCorpus, DeterministicFromTheSeed) {
  kiln::testing::ThreadCountGuard guard;
  SyntheticCorpusOptions opt;
  opt.seed = 7;
  set_num_threads(1);
  const SyntheticCorpus a(opt);
  set_num_threads(2);
  const SyntheticCorpus b(opt);
  opt.seed = 8;
  const SyntheticCorpus c(opt);
  EXPECT_EQ(a.tokens(), b.tokens());
  EXPECT_EQ(a.num_sentences(), b.num_sentences());
  EXPECT_NE(a.tokens(), c.tokens());
  EXPECT_EQ(a.vocab_tokens(), c.vocab_tokens());  // the vocabulary does not depend on the seed
  EXPECT_EQ(a.num_documents(), 2000u);
}

TEST(SyntheticCorpus, VocabularyTokenizerAndBaseline) {
  const SyntheticCorpus c;
  const auto& vocab = c.vocab_tokens();
  ASSERT_GE(vocab.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(vocab.begin(), vocab.begin() + 5),
            (std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}));
  EXPECT_EQ(c.special_ids().pad, 0);
  EXPECT_EQ(c.special_ids().mask, 4);
  EXPECT_EQ(c.vocab_size(), vocab.size());
  const MaskingVocab mv = c.masking_vocab();
  EXPECT_EQ(mv.random_candidates.front(), 5);
  EXPECT_EQ(mv.random_candidates.size(), vocab.size() - 5);

  // The tokenizer maps decoded text back to the same ids.
  const BertTokenizer tok = c.tokenizer();
  for (size_t s = 0; s < 50; ++s) {
    const auto span = c.sentence(s);
    const std::vector<int32_t> ids(span.begin(), span.end());
    EXPECT_EQ(tok.encode_ids(c.decode(ids)), ids) << c.decode(ids);
  }

  std::map<int32_t, size_t> counts;
  for (int32_t id : c.tokens()) ++counts[id];
  size_t best = 0;
  for (const auto& [id, n] : counts) best = std::max(best, n);
  EXPECT_DOUBLE_EQ(c.unigram_baseline_accuracy(), static_cast<double>(best) / static_cast<double>(c.num_tokens()));
  EXPECT_EQ(counts[c.most_frequent_token()], best);
  EXPECT_GT(c.unigram_baseline_accuracy(), 0.05);
  EXPECT_LT(c.unigram_baseline_accuracy(), 0.3);
}

// A token is far more predictable from its neighbours than from frequencies:
// a (left, right) neighbour lookup fitted on half the documents, scored on
// the other half, beats the unigram baseline by a wide margin.
TEST(SyntheticCorpus, ContextPredictsTokensFarBetterThanUnigrams) {
  const SyntheticCorpus c;
  using Context = std::pair<int32_t, int32_t>;
  std::map<Context, std::map<int32_t, size_t>> table;
  const auto for_each_token = [&](size_t doc_begin, size_t doc_end, auto fn) {
    for (size_t d = doc_begin; d < doc_end; ++d) {
      const SentenceRange r = c.document(d);
      for (size_t s = r.first; s < r.first + r.count; ++s) {
        const auto w = c.sentence(s);
        for (size_t i = 0; i < w.size(); ++i)
          fn(Context{i > 0 ? w[i - 1] : -1, i + 1 < w.size() ? w[i + 1] : -1}, w[i]);
      }
    }
  };
  const size_t half = c.num_documents() / 2;
  for_each_token(0, half, [&](Context ctx, int32_t id) { ++table[ctx][id]; });
  size_t right = 0, total = 0;
  for_each_token(half, c.num_documents(), [&](Context ctx, int32_t id) {
    ++total;
    const auto it = table.find(ctx);
    if (it == table.end()) return;
    const auto best = std::max_element(it->second.begin(), it->second.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    right += best->first == id;
  });
  const double context_accuracy = static_cast<double>(right) / static_cast<double>(total);
  EXPECT_GT(context_accuracy, 2.0 * c.unigram_baseline_accuracy())
      << "context " << context_accuracy << ", unigram " << c.unigram_baseline_accuracy();
}

TEST(SyntheticCorpus, BadOptions) {
  SyntheticCorpusOptions opt;
  opt.max_sentences = 1;
  EXPECT_KILN_ERROR(SyntheticCorpus{opt}, "bad options");
  opt = {};
  opt.nouns_per_topic = 5000;
  EXPECT_KILN_ERROR(SyntheticCorpus{opt}, "pseudo-words");
}

}  // namespace
}  // namespace kiln::data
