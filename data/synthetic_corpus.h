// SyntheticCorpus: the built-in pretraining corpus of `make demo`, a small
// artificial language with learnable structure, generated from a seed (no
// files needed).
//
// Note [Synthetic language]
// Vocabulary (fixed by the size options, independent of the seed):
//   0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], then English function words
//   (determiners, "and", "that", "it", "they", prepositions, "."), then
//   pseudo-words (two consonant-vowel syllables, e.g. "kobe"): per topic,
//   nouns in a singular and a plural ("kobes") form and adjectives; verbs in
//   a plural and a singular ("-s") form; adverbs.
// Each document has a topic and a protagonist (one noun of the topic, with a
// grammatical number). Its first sentence introduces the protagonist; every
// sentence is one of six templates, e.g.
//   DET(n) ADJ NOUN(n) VERB(n) PREP DET(m) NOUN(m) .
//   PRONOUN(protagonist) VERB(protagonist) DET(m) NOUN(m) PREP DET(k) NOUN(k) .
//   DET(n) NOUN(n) that VERB(n) DET(m) NOUN(m) VERB(n) ADV .
// with agreement: a determiner matches its noun's number ("a"/"this"/"every"/
// "one" singular, "these"/"many"/"two"/"few" plural, "the" either), a verb
// its subject's, a pronoun the protagonist's ("it"/"they"); nouns and
// adjectives come from the document's topic. A masked token is thus far more
// predictable from its context than from unigram frequencies
// (unigram_baseline_accuracy()).
// Document d is generated from Philox state (seed, d) alone, so the corpus is
// a pure function of the options (any thread count).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/data/corpus.h"
#include "kiln/data/pretraining.h"
#include "kiln/data/tokenizer/bert_tokenizer.h"

namespace kiln::data {

struct SyntheticCorpusOptions {
  uint64_t seed = 0;
  size_t num_documents = 2000;      // >= 1
  size_t min_sentences = 3;         // per document, >= 1
  size_t max_sentences = 8;         // >= min_sentences
  size_t num_topics = 6;            // >= 1
  size_t nouns_per_topic = 8;       // >= 1
  size_t adjectives_per_topic = 4;  // >= 1
  size_t num_verbs = 12;            // >= 1
  size_t num_adverbs = 6;           // >= 1
};

class SyntheticCorpus final : public InMemoryCorpus {
 public:
  // kiln::Error for options out of range (or a vocabulary over 4,900 pseudo-words).
  explicit SyntheticCorpus(const SyntheticCorpusOptions& options = {});

  const SyntheticCorpusOptions& options() const { return options_; }
  // Token strings by id (Note [Synthetic language]); vocab_size() of them.
  const std::vector<std::string>& vocab_tokens() const { return tokens_; }
  // A WordPiece tokenizer over vocab_tokens(): encodes text of the language
  // back to the corpus's ids (every word is one token), decodes ids to text.
  BertTokenizer tokenizer() const;
  MaskingVocab masking_vocab() const;
  // Accuracy of always predicting the most frequent token, over all corpus
  // tokens: what masked-LM accuracy is without context.
  double unigram_baseline_accuracy() const { return unigram_accuracy_; }
  int32_t most_frequent_token() const { return most_frequent_; }
  // Space-separated token strings (specials included).
  std::string decode(std::span<const int32_t> ids) const;

 private:
  SyntheticCorpusOptions options_;
  std::vector<std::string> tokens_;
  double unigram_accuracy_ = 0;
  int32_t most_frequent_ = -1;
};

}  // namespace kiln::data
