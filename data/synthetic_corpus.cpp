// The synthetic pretraining language (Note [Synthetic language], data/synthetic_corpus.h).
#include "data/synthetic_corpus.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "core/parallel.h"
#include "data/random_stream.h"

namespace kiln::data {
namespace {

constexpr int32_t kPad = 0, kUnk = 1, kCls = 2, kSep = 3, kMask = 4;
constexpr size_t kSyllables = 70;  // 14 consonants x 5 vowels
constexpr size_t kMaxPseudoWords = kSyllables * kSyllables;

std::string syllable(size_t i) {
  static const char consonants[] = "bdfgklmnprstvz";
  static const char vowels[] = "aeiou";
  return {consonants[i / 5], vowels[i % 5]};
}

// Pseudo-word k (k < 4,900): distinct for distinct k, spread over the syllables.
std::string pseudo_word(size_t k) {
  const size_t w = (k * 97 + 13) % kMaxPseudoWords;  // 97 is coprime to 4,900: a bijection
  const size_t a = w % kSyllables, b = (w / kSyllables + 11 * a) % kSyllables;
  return syllable(a) + syllable(b);
}

// Ids of every word class, laid out in the vocabulary.
struct Lexicon {
  std::vector<std::string> tokens;
  std::vector<int32_t> det_singular, det_plural;
  int32_t the = 0, and_ = 0, that = 0, it = 0, they = 0, period = 0;
  std::vector<int32_t> preps;
  std::vector<std::vector<int32_t>> noun_singular, noun_plural, adjectives;  // [topic][k]
  std::vector<int32_t> verb_plural, verb_singular, adverbs;

  int32_t add(std::string token) {
    tokens.push_back(std::move(token));
    return static_cast<int32_t>(tokens.size() - 1);
  }

  explicit Lexicon(const SyntheticCorpusOptions& o) {
    for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) add(s);
    for (const char* s : {"a", "this", "every", "one"}) det_singular.push_back(add(s));
    for (const char* s : {"these", "many", "two", "few"}) det_plural.push_back(add(s));
    the = add("the");
    and_ = add("and");
    that = add("that");
    it = add("it");
    they = add("they");
    for (const char* s : {"in", "on", "with", "near", "under"}) preps.push_back(add(s));
    period = add(".");
    size_t next_word = 0;
    noun_singular.resize(o.num_topics);
    noun_plural.resize(o.num_topics);
    adjectives.resize(o.num_topics);
    for (size_t t = 0; t < o.num_topics; ++t) {
      for (size_t k = 0; k < o.nouns_per_topic; ++k) {
        const std::string stem = pseudo_word(next_word++);
        noun_singular[t].push_back(add(stem));
        noun_plural[t].push_back(add(stem + "s"));
      }
      for (size_t k = 0; k < o.adjectives_per_topic; ++k) adjectives[t].push_back(add(pseudo_word(next_word++)));
    }
    for (size_t k = 0; k < o.num_verbs; ++k) {
      const std::string stem = pseudo_word(next_word++);
      verb_plural.push_back(add(stem));
      verb_singular.push_back(add(stem + "s"));
    }
    for (size_t k = 0; k < o.num_adverbs; ++k) adverbs.push_back(add(pseudo_word(next_word++)));
    std::unordered_set<std::string> seen(tokens.begin(), tokens.end());
    KILN_CHECK(seen.size() == tokens.size(), "SyntheticCorpus: internal error: duplicate vocabulary words");
  }
};

// One document's sentences, from Philox state (seed, d).
std::vector<std::vector<int32_t>> make_document(const Lexicon& lex, const SyntheticCorpusOptions& o, size_t d) {
  PhiloxStream rng(PhiloxState{o.seed, d});
  const auto pick = [&](const std::vector<int32_t>& v) { return v[rng.below(v.size())]; };
  const size_t topic = rng.below(o.num_topics);
  const size_t hero = rng.below(o.nouns_per_topic);
  const bool hero_plural = rng.bernoulli(0.5);
  const size_t num_sentences = o.min_sentences + rng.below(o.max_sentences - o.min_sentences + 1);

  const auto det = [&](bool plural) {
    return rng.bernoulli(0.35) ? lex.the : pick(plural ? lex.det_plural : lex.det_singular);
  };
  const auto noun = [&](bool plural) { return pick(plural ? lex.noun_plural[topic] : lex.noun_singular[topic]); };
  const auto verb = [&](bool plural) { return pick(plural ? lex.verb_plural : lex.verb_singular); };
  const auto adj = [&] { return pick(lex.adjectives[topic]); };
  const auto number = [&] { return rng.bernoulli(0.5); };

  std::vector<std::vector<int32_t>> sentences;
  for (size_t s = 0; s < num_sentences; ++s) {
    std::vector<int32_t> w;
    const size_t kind = s == 0 ? 2 : rng.below(6);
    const bool n = number(), m = number(), k = number();
    switch (kind) {
      case 0:  // DET(n) NOUN(n) VERB(n) DET(m) NOUN(m) .
        w = {det(n), noun(n), verb(n), det(m), noun(m)};
        break;
      case 1:  // DET(n) ADJ NOUN(n) VERB(n) PREP DET(m) NOUN(m) .
        w = {det(n), adj(), noun(n), verb(n), pick(lex.preps), det(m), noun(m)};
        break;
      case 2: {  // DET(h) HERO(h) ADV VERB(h) DET(m) ADJ NOUN(m) .
        const int32_t hero_word = (hero_plural ? lex.noun_plural : lex.noun_singular)[topic][hero];
        w = {det(hero_plural), hero_word, pick(lex.adverbs), verb(hero_plural), det(m), adj(), noun(m)};
        break;
      }
      case 3:  // PRON(h) VERB(h) DET(m) NOUN(m) PREP DET(k) NOUN(k) .
        w = {hero_plural ? lex.they : lex.it, verb(hero_plural), det(m), noun(m), pick(lex.preps), det(k), noun(k)};
        break;
      case 4:  // DET(n) NOUN(n) that VERB(n) DET(m) NOUN(m) VERB(n) ADV .
        w = {det(n), noun(n), lex.that, verb(n), det(m), noun(m), verb(n), pick(lex.adverbs)};
        break;
      default:  // DET(n) NOUN(n) and DET(m) NOUN(m) VERB(plural) .
        w = {det(n), noun(n), lex.and_, det(m), noun(m), verb(true)};
        break;
    }
    w.push_back(lex.period);
    sentences.push_back(std::move(w));
  }
  return sentences;
}

}  // namespace

SyntheticCorpus::SyntheticCorpus(const SyntheticCorpusOptions& o) : options_(o) {
  KILN_CHECK(o.num_documents >= 1 && o.min_sentences >= 1 && o.max_sentences >= o.min_sentences && o.num_topics >= 1 &&
                 o.nouns_per_topic >= 1 && o.adjectives_per_topic >= 1 && o.num_verbs >= 1 && o.num_adverbs >= 1,
             "SyntheticCorpus: bad options (need num_documents, min_sentences, num_topics, nouns_per_topic, "
             "adjectives_per_topic, num_verbs, num_adverbs >= 1 and max_sentences >= min_sentences)");
  const size_t pseudo_words = o.num_topics * (o.nouns_per_topic + o.adjectives_per_topic) + o.num_verbs + o.num_adverbs;
  KILN_CHECK(pseudo_words <= kMaxPseudoWords, "SyntheticCorpus: the options need ", pseudo_words,
             " pseudo-words, at most ", kMaxPseudoWords, " exist");
  const Lexicon lex(o);
  tokens_ = lex.tokens;

  std::vector<std::vector<std::vector<int32_t>>> documents(o.num_documents);
  parallel_for(static_cast<int64_t>(o.num_documents), 64, [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d)
      documents[static_cast<size_t>(d)] = make_document(lex, o, static_cast<size_t>(d));
  });
  std::vector<int32_t> flat;
  std::vector<uint64_t> sentence_starts{0}, document_starts{0};
  for (const auto& doc : documents) {
    for (const auto& sentence : doc) {
      flat.insert(flat.end(), sentence.begin(), sentence.end());
      sentence_starts.push_back(flat.size());
    }
    document_starts.push_back(sentence_starts.size() - 1);
  }
  std::vector<uint64_t> counts(tokens_.size(), 0);
  for (int32_t id : flat) ++counts[static_cast<size_t>(id)];
  most_frequent_ = static_cast<int32_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
  unigram_accuracy_ =
      static_cast<double>(counts[static_cast<size_t>(most_frequent_)]) / static_cast<double>(flat.size());
  assign(std::move(flat), std::move(sentence_starts), std::move(document_starts), tokens_.size(),
         SpecialTokenIds{kPad, kUnk, kCls, kSep, kMask}, "SyntheticCorpus");
}

BertTokenizer SyntheticCorpus::tokenizer() const { return BertTokenizer(Vocab::from_tokens(tokens_)); }

MaskingVocab SyntheticCorpus::masking_vocab() const {
  return MaskingVocab::from_tokens(tokens_, {kPad, kUnk, kCls, kSep, kMask}, kMask);
}

std::string SyntheticCorpus::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    KILN_CHECK(id >= 0 && static_cast<size_t>(id) < tokens_.size(), "SyntheticCorpus::decode: id ", id,
               " outside the vocab [0, ", tokens_.size(), ")");
    if (!out.empty()) out.push_back(' ');
    out += tokens_[static_cast<size_t>(id)];
  }
  return out;
}

}  // namespace kiln::data
