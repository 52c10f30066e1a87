// train/task_metrics.h against the libraries it reproduces: every case is run
// through tests/reference/task_metrics_reference.py (seqeval 1.2.2, scipy
// 1.11.4, scikit-learn 1.3.2 in KILN_PYTHON's environment) at test time and
// the values compared. Counts-based values (entity P/R/F1, accuracies,
// multi-label F1) and the numpy-summed mse must be equal to the bit; the
// correlations within 1e-12 (scipy's BLAS adds in another order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "train/task_metrics.h"

namespace kiln::train {
namespace {

using kiln::testing::data_file;
using kiln::testing::fresh_dir;
using kiln::testing::python;
using kiln::testing::quoted;
using kiln::testing::run_command;
using json = nlohmann::json;
using Sentences = std::vector<std::vector<std::string>>;

// Runs the reference script on `input`; its output JSON.
json run_reference(const json& input, const std::string& name) {
  const std::filesystem::path dir = fresh_dir("task_metrics", name);
  std::filesystem::create_directories(dir);
  const std::string in = (dir / "in.json").string(), out = (dir / "out.json").string();
  {
    std::ofstream f(in);
    f << input.dump();
  }
  const std::string script = std::string(KILN_SOURCE_DIR) + "/tests/reference/task_metrics_reference.py";
  const auto [rc, log] =
      run_command(quoted(python()) + " " + quoted(script) + " " + quoted(in) + " " + quoted(out) + " 2>&1");
  if (rc != 0) throw kiln::Error("reference script failed (" + std::to_string(rc) + "): " + log);
  std::ifstream f(out);
  json result = json::parse(f);
  std::filesystem::remove_all(dir);
  return result;
}

// A reference number; null is NaN, "inf" / "-inf" infinity.
double num(const json& v) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (v.is_string()) {
    const double inf = std::numeric_limits<double>::infinity();
    if (v == "inf") return inf;
    if (v == "-inf") return -inf;
    throw kiln::Error("reference: not a number: " + v.dump());
  }
  return v.get<double>();
}

// Bitwise-equal doubles (NaN equals NaN).
::testing::AssertionResult same(double got, const json& want_json) {
  const double want = num(want_json);
  if ((std::isnan(got) && std::isnan(want)) || got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << std::setprecision(17) << got << ", reference " << want;
}

// |got - want| <= tol (NaN equals NaN).
::testing::AssertionResult near(double got, const json& want_json, double tol) {
  const double want = num(want_json);
  if ((std::isnan(got) && std::isnan(want)) || std::abs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << std::setprecision(17) << got << ", reference " << want;
}

// ---- entities ----------------------------------------------------------------------

json entity_case(const std::string& id, const std::string& mode, const Sentences& truth, const Sentences& pred) {
  return {{"id", id}, {"mode", mode}, {"true", truth}, {"pred", pred}};
}

EntityMetrics entity_metrics(const std::string& mode, const Sentences& truth, const Sentences& pred) {
  EntityMetrics m(mode == "strict" ? EntityScheme::kStrictIob2 : EntityScheme::kConlleval);
  for (size_t s = 0; s < truth.size(); ++s) m.add(truth[s], pred[s]);
  return m;
}

json entities_json(const std::vector<Entity>& es) {
  json out = json::array();
  for (const Entity& e : es) out.push_back({e.type, e.begin, e.end});
  return out;
}

// Every number of one case against the reference's.
void expect_entity_case(const json& c, const json& ref) {
  SCOPED_TRACE("case " + c["id"].get<std::string>() + " (" + c["mode"].get<std::string>() + ")");
  ASSERT_FALSE(ref.contains("error")) << ref["error"];
  const std::string mode = c["mode"];
  const auto truth = c["true"].get<Sentences>(), pred = c["pred"].get<Sentences>();
  const EntityMetrics m = entity_metrics(mode, truth, pred);
  EXPECT_TRUE(same(m.precision(), ref["precision"]));
  EXPECT_TRUE(same(m.recall(), ref["recall"]));
  EXPECT_TRUE(same(m.f1(), ref["f1"]));
  if (ref["accuracy"].is_null()) {
    EXPECT_EQ(m.tokens(), 0);
    EXPECT_THROW((void)m.accuracy(), Error);
  } else {
    EXPECT_TRUE(same(m.accuracy(), ref["accuracy"]));
  }
  const auto per_type = m.per_type();
  ASSERT_EQ(per_type.size(), ref["per_type"].size());
  for (const auto& [type, s] : per_type) {
    SCOPED_TRACE("type " + type);
    ASSERT_TRUE(ref["per_type"].contains(type));
    const json& r = ref["per_type"][type];
    EXPECT_TRUE(same(s.precision, r["precision"]));
    EXPECT_TRUE(same(s.recall, r["recall"]));
    EXPECT_TRUE(same(s.f1, r["f1"]));
    EXPECT_EQ(s.true_count, r["support"].get<int64_t>());
  }
  // The entities themselves.
  for (size_t s = 0; s < truth.size(); ++s) {
    const auto es = mode == "strict" ? get_entities_strict_iob2(truth[s]) : get_entities(truth[s]);
    EXPECT_EQ(entities_json(es), ref["sentence_entities"][s]) << "sentence " << s;
  }
  if (mode != "strict") {
    EXPECT_EQ(entities_json(get_entities(truth)), ref["entities"]);
  }
}

void expect_entity_cases(const std::vector<json>& cases, const std::string& name) {
  const json ref = run_reference({{"entity", cases}}, name);
  for (const json& c : cases) expect_entity_case(c, ref["entity"][c["id"].get<std::string>()]);
}

// Random sentences: `tags` drawn uniformly; the prediction keeps each true tag
// with probability `keep`, else draws another.
std::pair<Sentences, Sentences> random_sentences(std::mt19937_64& rng, const std::vector<std::string>& tags,
                                                 double keep) {
  std::uniform_int_distribution<int> n_sent(1, 6), len(0, 12);
  std::uniform_int_distribution<size_t> pick(0, tags.size() - 1);
  std::bernoulli_distribution keep_tag(keep);
  Sentences truth, pred;
  const int n = n_sent(rng);
  for (int s = 0; s < n; ++s) {
    std::vector<std::string> t, p;
    const int l = len(rng);
    for (int i = 0; i < l; ++i) {
      t.push_back(tags[pick(rng)]);
      p.push_back(keep_tag(rng) ? t.back() : tags[pick(rng)]);
    }
    truth.push_back(t);
    pred.push_back(p);
  }
  return {truth, pred};
}

// O, the B/I/E/S prefixes of three types (so I- starts, type changes and
// IOB1 runs come up), and tags seqeval reads oddly: bare letters, no prefix,
// '.', a suffix after a second '-', a two-letter prefix, a non-ASCII letter,
// an O with a type.
// clang-format off
const std::vector<std::string> kConllevalTags = {
    "O", "O", "O", "O",
    "B-PER", "I-PER", "E-PER", "S-PER",
    "B-LOC", "I-LOC", "E-LOC", "S-LOC",
    "B-ORG", "I-ORG",
    "I-", "B", "I", "E", "S", "PER", "X", ".", ".-LOC", "B-PER-X", "BX-LOC", "\xc3\x89-PER", "OTHER", "O-LOC", "-",
    "B-_"};

// Valid strict-IOB2 tags, with the types stripped of '-' at both ends.
const std::vector<std::string> kIob2Tags = {
    "O", "O", "O",
    "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG",
    "B", "I", "O-PER", "B--LOC-", "I-LOC-", "I-", "B-", "OTHER"};
// clang-format on

TEST(TaskMetricsEntities, RandomConllevalSequencesMatchSeqeval) {
  std::mt19937_64 rng(20240611);
  std::vector<json> cases;
  for (int k = 0; k < 300; ++k) {
    const auto [t, p] = random_sentences(rng, kConllevalTags, k % 3 == 0 ? 0.3 : 0.75);
    cases.push_back(entity_case("random" + std::to_string(k), "default", t, p));
  }
  expect_entity_cases(cases, "random_conlleval");
}

TEST(TaskMetricsEntities, RandomStrictIob2SequencesMatchSeqeval) {
  std::mt19937_64 rng(777);
  std::vector<json> cases;
  for (int k = 0; k < 300; ++k) {
    const auto [t, p] = random_sentences(rng, kIob2Tags, k % 3 == 0 ? 0.3 : 0.75);
    cases.push_back(entity_case("strict" + std::to_string(k), "strict", t, p));
    cases.push_back(entity_case("default" + std::to_string(k), "default", t, p));  // the same tags, default mode
  }
  expect_entity_cases(cases, "random_strict");
}

TEST(TaskMetricsEntities, EdgeCasesMatchSeqeval) {
  const std::vector<std::string> per = {"B-PER", "I-PER"};
  std::vector<std::pair<std::string, std::pair<Sentences, Sentences>>> cases = {
      // nothing predicted: precision 0/0
      {"empty_predictions", {{{"B-PER", "I-PER", "O", "B-LOC"}}, {{"O", "O", "O", "O"}}}},
      // no true entities: recall 0/0
      {"no_true_entities", {{{"O", "O", "O"}}, {{"B-LOC", "O", "B-PER"}}}},
      {"no_entities_at_all", {{{"O", "O"}, {"O"}}, {{"O", "O"}, {"O"}}}},
      {"all_O_one_token", {{{"O"}}, {{"O"}}}},
      {"empty_sentence", {{{}, {"B-PER"}, {}}, {{}, {"B-PER"}, {}}}},
      {"only_empty_sentences", {{{}, {}}, {{}, {}}}},
      {"single_token_entities",
       {{{"B-PER", "B-LOC", "S-ORG", "I-MISC", "O", "B-PER"}}, {{"B-PER", "I-LOC", "S-ORG", "B-MISC", "O", "S-PER"}}}},
      {"type_change_inside_I_run",
       {{{"I-PER", "I-PER", "I-LOC", "I-LOC", "O"}}, {{"B-PER", "I-PER", "B-LOC", "I-LOC", "O"}}}},
      {"B_then_I_of_other_type", {{{"B-PER", "I-LOC", "I-LOC"}}, {{"B-PER", "B-LOC", "I-LOC"}}}},
      // a chunk open at a sentence's end does not join the next sentence's I
      {"sentence_boundaries",
       {{{"O", "B-PER", "I-PER"}, {"I-PER", "I-PER"}, {"S-LOC"}, {"E-LOC"}},
        {{"O", "B-PER", "I-PER"}, {"B-PER", "I-PER"}, {"S-LOC"}, {"S-LOC"}}}},
      // letters seqeval knows nothing of keep a "chunk" across the separator O
      {"odd_tags_across_boundary", {{{"S-X", "P-X"}, {"P", "E"}, {"Q-Y"}}, {{"S-X", "P-X"}, {"P", "E"}, {"O"}}}},
      {"first_tag_without_prefix", {{{"X", "B-Y"}, {"X", "B-Y"}}, {{"X", "B-Y"}, {"O", "B-Y"}}}},
      // IOB1 as in the original CoNLL-2003 files: I- starts a chunk, B- only
      // between two chunks of one type
      {"iob1",
       {{{"I-ORG", "O", "I-PER", "I-PER", "B-PER", "I-PER", "O", "I-LOC", "I-MISC", "I-MISC"}, {"I-LOC", "B-LOC", "O"}},
        {{"B-ORG", "O", "B-PER", "I-PER", "B-PER", "I-PER", "O", "B-LOC", "B-MISC", "I-MISC"},
         {"I-LOC", "I-LOC", "O"}}}},
      {"iobes",
       {{{"B-PER", "E-PER", "S-LOC", "B-ORG", "I-ORG", "E-ORG", "E-ORG"}},
        {{"B-PER", "E-PER", "B-LOC", "B-ORG", "I-ORG", "I-ORG", "E-ORG"}}}},
      {"dots", {{{"B-PER", ".", "I-PER", ".-LOC", "O"}}, {{"B-PER", "I-PER", "I-PER", ".", "O"}}}},
      {"unicode",
       {{{"B-\xc3\xa9t\xc3\xa9", "I-\xc3\xa9t\xc3\xa9", "\xc3\x89-X", "\xc3\x88-X"}},
        {{"B-\xc3\xa9t\xc3\xa9", "I-\xc3\xa9t\xc3\xa9", "\xc3\x88-X", "\xc3\x88-X"}}}},
  };
  std::vector<json> js;
  for (const auto& [id, s] : cases) js.push_back(entity_case(id, "default", s.first, s.second));
  for (const auto& [id, s] : cases) {
    bool iob2 = true;  // the cases strict IOB2 accepts
    for (const Sentences* ss : {&s.first, &s.second})
      for (const auto& sent : *ss)
        for (const std::string& t : sent) iob2 = iob2 && (t[0] == 'B' || t[0] == 'I' || t[0] == 'O');
    if (iob2) js.push_back(entity_case(id + "_strict", "strict", s.first, s.second));
  }
  expect_entity_cases(js, "edge");
  // A few values that do not depend on the reference, so a broken script cannot hide them.
  EntityMetrics m;
  m.add(per, per);
  EXPECT_EQ(m.f1(), 1.0);
  EXPECT_EQ(get_entities(std::vector<std::string>{"B-PER", "I-PER", "O", "B-LOC"}),
            (std::vector<Entity>{{"PER", 0, 1}, {"LOC", 3, 3}}));
}

TEST(TaskMetricsEntities, ErrorsMatchSeqevalErrors) {
  // seqeval raises on these; kiln throws kiln::Error and leaves the metrics unchanged.
  const std::vector<std::pair<Sentences, Sentences>> strict_bad = {
      {{{"B-PER", "E-PER"}}, {{"B-PER", "I-PER"}}},
      {{{"O"}}, {{"S-LOC"}}},
      {{{"PER"}}, {{"O"}}},
      {{{"\xc3\x89-PER"}}, {{"O"}}},
  };
  std::vector<json> cases;
  for (size_t k = 0; k < strict_bad.size(); ++k)
    cases.push_back(entity_case("bad" + std::to_string(k), "strict", strict_bad[k].first, strict_bad[k].second));
  cases.push_back(entity_case("no_sentences", "default", {}, {}));
  cases.push_back(entity_case("length_mismatch", "default", {{"O", "O"}}, {{"O"}}));
  const json ref = run_reference({{"entity", cases}}, "errors");
  for (const json& c : cases) EXPECT_TRUE(ref["entity"][c["id"].get<std::string>()].contains("error")) << c;

  for (const auto& tp : strict_bad) {
    const auto& t = tp.first;  // a structured binding would not be capturable by clang 14's lambdas
    const auto& p = tp.second;
    EntityMetrics m(EntityScheme::kStrictIob2);
    m.add(std::vector<std::string>{"B-PER"}, std::vector<std::string>{"B-PER"});
    EXPECT_KILN_ERROR(m.add(t[0], p[0]), "does not start with B, I or O");
    EXPECT_EQ(m.sentences(), 1);
    EXPECT_EQ(m.tokens(), 1);
    EXPECT_EQ(m.f1(), 1.0);
  }
  EXPECT_KILN_ERROR(get_entities_strict_iob2(std::vector<std::string>{"O", "E-X"}), "E-X");
  EntityMetrics none;
  EXPECT_KILN_ERROR(none.precision(), "no sentences");
  EXPECT_KILN_ERROR(none.recall(), "no sentences");
  EXPECT_KILN_ERROR(none.f1(), "no sentences");
  EXPECT_KILN_ERROR(none.accuracy(), "no tags");
  EXPECT_KILN_ERROR(none.summary(), "no sentences");
  const std::vector<std::string> two = {"O", "B-PER"}, one = {"O"}, empty_tag = {"O", ""};
  EXPECT_KILN_ERROR(none.add(two, one), "2 true tags but 1 predicted tags");
  EXPECT_KILN_ERROR(none.add(two, empty_tag), "empty tag at position 1 of the predicted tags");
  EXPECT_KILN_ERROR(get_entities(empty_tag), "empty tag");
  EXPECT_EQ(none.sentences(), 0);
  none.add(std::vector<std::string>{}, std::vector<std::string>{});
  EXPECT_EQ(none.f1(), 0.0);  // a sentence, no entities: seqeval's 0
  EXPECT_KILN_ERROR(none.accuracy(), "no tags");
}

TEST(TaskMetricsEntities, SplitOverCallsAndReset) {
  std::mt19937_64 rng(5);
  const auto [t, p] = random_sentences(rng, kConllevalTags, 0.5);
  // the whole list at once vs the same sentences added with other metrics in between reset
  EntityMetrics a;
  for (size_t s = 0; s < t.size(); ++s) a.add(t[s], p[s]);
  EntityMetrics b;
  b.add(std::vector<std::string>{"B-PER"}, std::vector<std::string>{"I-LOC"});
  b.reset();
  for (size_t s = 0; s < t.size(); ++s) b.add(t[s], p[s]);
  EXPECT_EQ(a.summary("eval_"), b.summary("eval_"));
  EXPECT_EQ(a.correct_entities(), b.correct_entities());
  const auto s = a.summary("eval_");
  std::vector<std::string> keys;
  for (const auto& [k, v] : s) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"eval_accuracy", "eval_f1", "eval_precision", "eval_recall"}));
  EXPECT_EQ(b.scheme(), EntityScheme::kConlleval);
}

// CoNLL-2003 dev tags (IOB2), every 7th tag changed, scored by seqeval in
// both modes.
TEST(TaskMetricsEntities, ConllDevCorruptedMatchesSeqeval) {
  std::ifstream f(data_file("conll2003/dev.txt"));
  Sentences truth;
  std::vector<std::string> cur;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (!cur.empty()) truth.push_back(cur);
      cur.clear();
      continue;
    }
    if (line.rfind("-DOCSTART-", 0) == 0) continue;
    cur.push_back(line.substr(line.find_last_of(" \t") + 1));
  }
  if (!cur.empty()) truth.push_back(cur);
  ASSERT_GT(truth.size(), 3000u);
  const std::vector<std::string> replacement = {"O", "I-PER", "B-LOC", "I-MISC", "B-ORG"};
  Sentences pred = truth;
  int64_t k = 0;
  for (auto& sent : pred)
    for (auto& tag : sent) {
      if (k % 7 == 6) tag = replacement[static_cast<size_t>(k / 7) % replacement.size()];
      ++k;
    }
  std::vector<json> cases = {entity_case("dev", "default", truth, pred),
                             entity_case("dev_strict", "strict", truth, pred)};
  expect_entity_cases(cases, "conll");
  // Sanity: the corruption matters and the two modes differ on it.
  const EntityMetrics d = entity_metrics("default", truth, pred), s = entity_metrics("strict", truth, pred);
  EXPECT_LT(d.f1(), 0.95);
  EXPECT_GT(d.f1(), 0.5);
  EXPECT_NE(d.precision(), s.precision());
}

// ---- regression --------------------------------------------------------------------

// The reference's encoding: NaN as null, infinity as "inf" / "-inf".
json encode(const std::vector<double>& v) {
  json out = json::array();
  for (double d : v) {
    if (std::isnan(d))
      out.push_back(nullptr);
    else if (std::isinf(d))
      out.push_back(d > 0 ? "inf" : "-inf");
    else
      out.push_back(d);
  }
  return out;
}

json regression_case(const std::string& id, const std::vector<double>& x, const std::vector<double>& y) {
  return {{"id", id}, {"predictions", encode(x)}, {"labels", encode(y)}};
}

TEST(TaskMetricsRegression, MatchesScipyAndRunGlue) {
  std::mt19937_64 rng(99);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::pair<std::string, std::pair<std::vector<double>, std::vector<double>>>> cases;
  for (size_t n : {3u, 4u, 7u, 8u, 9u, 50u, 129u, 1000u, 20000u}) {
    std::vector<double> x(n), y(n), xt(n), yt(n);
    for (size_t i = 0; i < n; ++i) {
      y[i] = 2.5 + 1.5 * normal(rng);  // STS-B-like labels, some negative
      x[i] = 0.8 * y[i] + 0.6 * normal(rng);
      yt[i] = std::round(y[i] * 2.0) / 2.0;  // many ties
      xt[i] = std::round(x[i]);
    }
    cases.push_back({"gauss" + std::to_string(n), {x, y}});
    cases.push_back({"ties" + std::to_string(n), {xt, yt}});
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  cases.push_back({"two_up", {{1.0, 2.0}, {-3.0, 5.0}}});
  cases.push_back({"two_down", {{1.0, 2.0}, {5.0, -3.0}}});
  cases.push_back({"three_ties", {{1.0, 1.0, 2.0}, {0.0, 3.0, 3.0}}});
  cases.push_back({"constant_predictions", {{3.0, 3.0, 3.0, 3.0}, {1.0, 2.0, 3.0, 4.0}}});
  cases.push_back({"constant_labels", {{1.0, -2.0, 3.0}, {0.5, 0.5, 0.5}}});
  cases.push_back({"constant_two", {{1.0, 1.0}, {1.0, 2.0}}});
  cases.push_back({"anti", {{1.0, 2.0, 3.0, 4.0, 5.0}, {5.0, 4.0, 3.0, 2.0, 1.0}}});
  cases.push_back({"perfect", {{-1.0, 0.5, 2.0, 7.0}, {-2.0, 1.0, 4.0, 14.0}}});
  cases.push_back({"offset", {{1e9 + 0.25, 1e9 + 0.5, 1e9 + 1.0, 1e9}, {1.0, 3.0, 2.0, 0.0}}});
  cases.push_back({"tiny", {{1e-300, 3e-300, 2e-300}, {1e-300, 2e-300, 4e-300}}});
  cases.push_back({"huge", {{1e200, -1e200, 3e199}, {1.0, 2.0, 3.0}}});  // mse overflows to inf
  cases.push_back({"inf", {{1.0, std::numeric_limits<double>::infinity(), 2.0}, {1.0, 2.0, 3.0}}});
  cases.push_back({"nan", {{1.0, nan, 2.0, 4.0}, {1.0, 2.0, 3.0, 4.0}}});
  cases.push_back({"nan_two", {{1.0, nan}, {1.0, 2.0}}});

  std::vector<json> js;
  for (const auto& [id, xy] : cases) js.push_back(regression_case(id, xy.first, xy.second));
  const json ref = run_reference({{"regression", js}}, "regression");
  for (const auto& [id, xy] : cases) {
    SCOPED_TRACE("case " + id);
    const json& r = ref["regression"][id];
    RegressionMetrics m;
    // half one pair at a time, half as a span
    const size_t half = xy.first.size() / 2;
    for (size_t i = 0; i < half; ++i) m.add(xy.first[i], xy.second[i]);
    m.add(std::span(xy.first).subspan(half), std::span(xy.second).subspan(half));
    ASSERT_EQ(m.count(), static_cast<int64_t>(xy.first.size()));
    EXPECT_TRUE(same(m.mse(), r["mse"]));
    EXPECT_TRUE(near(m.spearman(), r["spearmanr"], 1e-12));
    if (r.contains("pearson_error")) {
      EXPECT_KILN_ERROR(m.pearson(), "scipy.stats.pearsonr raises");
      EXPECT_KILN_ERROR(m.summary(), "NaN or infinity");
      continue;
    }
    EXPECT_TRUE(near(m.pearson(), r["pearson"], 1e-12));
    const auto s = m.summary("eval_");
    ASSERT_EQ(s.size(), 4u);
    EXPECT_TRUE(same(s.at("eval_mse"), r["mse"]));
    EXPECT_TRUE(near(s.at("eval_pearson"), r["pearson"], 1e-12));
    EXPECT_TRUE(near(s.at("eval_spearmanr"), r["spearmanr"], 1e-12));
    EXPECT_TRUE(near(s.at("eval_combined_score"), r["combined_score"], 1e-12));
    EXPECT_TRUE(near(m.combined_score(), r["combined_score"], 1e-12));
  }
  // Independent of the reference: NaN for constant input, exact +-1 for two.
  RegressionMetrics c;
  c.add(std::vector<double>{2.0, 2.0, 2.0}, std::vector<double>{1.0, 2.0, 3.0});
  EXPECT_TRUE(std::isnan(c.pearson()));
  EXPECT_TRUE(std::isnan(c.spearman()));
  RegressionMetrics two;
  two.add(std::vector<double>{1.0, 2.0}, std::vector<double>{5.0, -3.0});
  EXPECT_EQ(two.pearson(), -1.0);  // sign(1) sign(-8)
  EXPECT_NEAR(two.spearman(), -1.0, 1e-15);
}

TEST(TaskMetricsRegression, RanksAndErrors) {
  EXPECT_EQ(average_ranks(std::vector<double>{3.0, 1.0, 3.0, 2.0, 3.0, -0.0, 0.0}),
            (std::vector<double>{6.0, 3.0, 6.0, 4.0, 6.0, 1.5, 1.5}));
  EXPECT_KILN_ERROR(average_ranks(std::vector<double>{1.0, std::nan("")}), "NaN");
  RegressionMetrics m;
  EXPECT_KILN_ERROR(m.mse(), "no examples");
  EXPECT_KILN_ERROR(m.pearson(), "at least 2 examples, got 0");
  m.add(1.0, 2.0);
  EXPECT_EQ(m.mse(), 1.0);
  EXPECT_KILN_ERROR(m.pearson(), "at least 2 examples, got 1");
  EXPECT_KILN_ERROR(m.spearman(), "at least 2 examples, got 1");
  EXPECT_KILN_ERROR(m.summary(), "at least 2 examples");
  const std::vector<double> two = {1.0, 2.0}, three = {1.0, 2.0, 3.0};
  EXPECT_KILN_ERROR(m.add(two, three), "2 predictions but 3 labels");
  EXPECT_EQ(m.count(), 1);
  m.reset();
  EXPECT_EQ(m.count(), 0);
}

// ---- multi-label -------------------------------------------------------------------

using Matrix = std::vector<std::vector<uint8_t>>;

std::vector<std::string> label_names(size_t n) {
  std::vector<std::string> names;
  for (size_t l = 0; l < n; ++l) names.push_back("label" + std::to_string(l));
  return names;
}

TEST(TaskMetricsMultiLabel, MatchesSklearn) {
  std::mt19937_64 rng(31337);
  std::vector<std::pair<std::string, std::pair<Matrix, Matrix>>> cases;  // (labels, predictions)
  for (int k = 0; k < 60; ++k) {
    const size_t n_labels = std::vector<size_t>{2, 3, 5, 8, 12, 20}[static_cast<size_t>(k) % 6];
    const size_t n = std::uniform_int_distribution<size_t>(1, 200)(rng);
    std::vector<double> rate(n_labels);
    for (double& r : rate) r = std::uniform_real_distribution<double>(0.0, 0.6)(rng);
    if (k % 4 == 1) rate[0] = 0.0;  // a label never true ...
    Matrix y(n, std::vector<uint8_t>(n_labels)), p = y;
    for (size_t i = 0; i < n; ++i)
      for (size_t l = 0; l < n_labels; ++l) {
        y[i][l] = std::bernoulli_distribution(rate[l])(rng);
        const bool flip = std::bernoulli_distribution(k % 5 == 0 ? 0.02 : 0.2)(rng);
        p[i][l] = static_cast<uint8_t>(flip ? 1 - y[i][l] : y[i][l]);
        if (k % 4 == 1 && l == 0) p[i][l] = 0;  // ... and never predicted: 0/0
        if (k % 4 == 2 && l == 1) p[i][l] = 0;  // true but never predicted
      }
    cases.push_back({"random" + std::to_string(k), {y, p}});
  }
  const Matrix y3 = {{1, 0, 1}, {0, 1, 0}, {1, 1, 0}, {0, 0, 0}};
  Matrix wrong = y3;
  for (auto& row : wrong)
    for (auto& v : row) v = static_cast<uint8_t>(1 - v);
  cases.push_back({"all_correct", {y3, y3}});
  cases.push_back({"all_wrong", {y3, wrong}});
  cases.push_back({"all_zero", {{{0, 0}, {0, 0}}, {{0, 0}, {0, 0}}}});
  cases.push_back({"nothing_predicted", {y3, Matrix(4, std::vector<uint8_t>(3, 0))}});
  cases.push_back({"one_example", {{{1, 0, 0, 1}}, {{1, 1, 0, 0}}}});

  std::vector<json> js;
  for (const auto& [id, yp] : cases) js.push_back({{"id", id}, {"true", yp.first}, {"pred", yp.second}});
  const json ref = run_reference({{"multilabel", js}}, "multilabel");
  for (const auto& [id, yp] : cases) {
    SCOPED_TRACE("case " + id);
    const json& r = ref["multilabel"][id];
    ASSERT_FALSE(r.contains("error")) << r["error"];
    const size_t n_labels = yp.first[0].size();
    MultiLabelMetrics m(label_names(n_labels));
    for (size_t i = 0; i < yp.first.size(); ++i) m.add(yp.second[i], yp.first[i]);
    EXPECT_TRUE(same(m.f1_micro(), r["f1_micro"]));
    EXPECT_TRUE(same(m.f1_macro(), r["f1_macro"]));
    EXPECT_TRUE(same(m.accuracy(), r["accuracy"]));
    const auto per = m.f1_per_label();
    ASSERT_EQ(per.size(), r["f1_per_label"].size());
    const auto s = m.summary("eval_");
    EXPECT_EQ(s.size(), 3 + n_labels);
    for (size_t l = 0; l < n_labels; ++l) {
      EXPECT_TRUE(same(per[l], r["f1_per_label"][l])) << "label " << l;
      EXPECT_TRUE(same(s.at("eval_f1_label" + std::to_string(l)), r["f1_per_label"][l])) << "label " << l;
    }
    EXPECT_TRUE(same(s.at("eval_f1_micro"), r["f1_micro"]));
    EXPECT_TRUE(same(s.at("eval_f1_macro"), r["f1_macro"]));
    EXPECT_TRUE(same(s.at("eval_accuracy"), r["accuracy"]));
  }
  // Independent of the reference.
  MultiLabelMetrics m({"a", "b"});
  m.add(std::vector<uint8_t>{1, 0}, std::vector<uint8_t>{1, 0});
  EXPECT_EQ(m.summary(), (std::map<std::string, double>{
                             {"f1_micro", 1.0}, {"f1_macro", 0.5}, {"accuracy", 1.0}, {"f1_a", 1.0}, {"f1_b", 0.0}}));
}

TEST(TaskMetricsMultiLabel, Errors) {
  EXPECT_KILN_ERROR(MultiLabelMetrics({"only"}), "at least 2 labels");
  EXPECT_KILN_ERROR(MultiLabelMetrics({"a", "a"}), "distinct");
  EXPECT_KILN_ERROR(MultiLabelMetrics({"a", "micro"}), "micro");
  MultiLabelMetrics m({"a", "b", "c"});
  EXPECT_KILN_ERROR(m.f1_micro(), "no examples");
  EXPECT_KILN_ERROR(m.f1_macro(), "no examples");
  EXPECT_KILN_ERROR(m.accuracy(), "no examples");
  EXPECT_KILN_ERROR(m.summary(), "no examples");
  const std::vector<uint8_t> ok = {1, 0, 1}, short_row = {1, 0}, two = {1, 2, 0};
  EXPECT_KILN_ERROR(m.add(ok, short_row), "expected 3 values each, got 3 predicted and 2 labels");
  EXPECT_KILN_ERROR(m.add(two, ok), "values must be 0 or 1");
  EXPECT_EQ(m.count(), 0);
  m.add(ok, ok);
  EXPECT_KILN_ERROR(m.label_f1(3), "outside [0, 3)");
  EXPECT_EQ(m.exact_matches(), 1);
  m.reset();
  EXPECT_EQ(m.count(), 0);
  EXPECT_KILN_ERROR(m.accuracy(), "no examples");
}

// numpy's summation order, checked on sizes around its block boundaries
// through the mse (np.mean of squares) of the regression reference.
TEST(TaskMetricsRegression, NumpySumOrder) {
  std::mt19937_64 rng(4);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<json> js;
  std::vector<std::pair<std::vector<double>, std::vector<double>>> data;
  for (size_t n : {1u, 2u, 7u, 8u, 15u, 16u, 127u, 128u, 129u, 135u, 1000u, 8191u, 8192u, 8193u, 30000u}) {
    std::vector<double> x(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = normal(rng) * std::exp(3.0 * normal(rng));
      y[i] = normal(rng);
    }
    data.push_back({x, y});
    std::string id = "n";  // not "n" + std::to_string(n): GCC 12's false -Wrestrict (PR 105329)
    id += std::to_string(n);
    js.push_back(regression_case(id, x, y));
  }
  const json ref = run_reference({{"regression", js}}, "numpy_sum");
  for (size_t k = 0; k < data.size(); ++k) {
    RegressionMetrics m;
    m.add(data[k].first, data[k].second);
    EXPECT_TRUE(same(m.mse(), ref["regression"][js[k]["id"].get<std::string>()]["mse"])) << js[k]["id"];
  }
}

}  // namespace
}  // namespace kiln::train
