#include "train/task_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "core/error.h"

namespace kiln::train {

// ---- numpy's summation ----------------------------------------------------------

namespace {

// numpy's pairwise_sum for float64: plain loop below 8 values, 8 partial sums
// up to 128, halves (the first a multiple of 8) above.
double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double res = 0.0;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double numpy_mean(std::span<const double> v) { return numpy_sum(v) / static_cast<double>(v.size()); }

}  // namespace

double numpy_sum(std::span<const double> values) {
  // numpy's reduction runs its inner loop over buffers of 8192 elements.
  constexpr size_t kBlock = 8192;
  double res = 0.0;
  for (size_t i = 0; i < values.size(); i += kBlock)
    res += pairwise_sum(values.data() + i, std::min(kBlock, values.size() - i));
  return res;
}

// ---- tags ------------------------------------------------------------------------

namespace {

// Bytes in the first UTF-8 code point of a non-empty s (1 for a byte that
// does not start a valid sequence).
size_t first_code_point_size(std::string_view s) {
  const unsigned char c = static_cast<unsigned char>(s[0]);
  size_t len = 1;
  if ((c & 0xE0) == 0xC0)
    len = 2;
  else if ((c & 0xF0) == 0xE0)
    len = 3;
  else if ((c & 0xF8) == 0xF0)
    len = 4;
  return std::min(len, s.size());
}

struct ParsedTag {
  int letter;             // ASCII letter, or -1 for a non-ASCII first code point
  std::string_view type;  // points into the tag, or at kUnderscore
};

constexpr std::string_view kUnderscore = "_";

void check_tag(const std::string& tag, const char* side, size_t i) {
  KILN_CHECK(!tag.empty(), "EntityMetrics: empty tag at position ", i, " of the ", side, " tags");
}

// Default mode: letter = first code point; type = the rest after its first
// '-' (the whole rest when it has none), "_" when empty.
ParsedTag parse_conlleval(std::string_view tag) {
  const size_t n = first_code_point_size(tag);
  const int letter = n == 1 ? static_cast<unsigned char>(tag[0]) : -1;
  std::string_view rest = tag.substr(n);
  const size_t dash = rest.find('-');
  if (dash != std::string_view::npos) rest = rest.substr(dash + 1);
  return {letter < 0x80 ? letter : -1, rest.empty() ? kUnderscore : rest};
}

// Strict IOB2: letter B, I or O (else kiln::Error); type = the rest with '-'
// stripped from both ends, "_" when empty.
ParsedTag parse_strict(std::string_view tag, const char* side, size_t i) {
  KILN_CHECK(!tag.empty(), "EntityMetrics: empty tag at position ", i, " of the ", side, " tags");
  const char c = tag[0];
  KILN_CHECK(c == 'B' || c == 'I' || c == 'O', "EntityMetrics (strict IOB2): tag \"", tag, "\" at position ", i,
             " of the ", side, " tags does not start with B, I or O");
  std::string_view rest = tag.substr(1);
  while (!rest.empty() && rest.front() == '-') rest.remove_prefix(1);
  while (!rest.empty() && rest.back() == '-') rest.remove_suffix(1);
  return {c, rest.empty() ? kUnderscore : rest};
}

bool is_one_of(int c, std::string_view set) {
  return c >= 0 && set.find(static_cast<char>(c)) != std::string_view::npos;
}

// Feeds the tag at position i to one sequence's scan. Returns true, with the
// chunk in *ended, when a chunk ended at position i - 1.
bool feed(detail::ChunkScan& s, const ParsedTag& t, int64_t i, Entity* ended) {
  const int prev = s.prev_letter;
  const int cur = t.letter;
  const bool type_changed = s.prev_type != t.type;
  const bool end = is_one_of(prev, "ES") || (is_one_of(prev, "BI") && is_one_of(cur, "BSO")) ||
                   (prev != 'O' && prev != '.' && type_changed);
  const bool start = is_one_of(cur, "BS") || (is_one_of(prev, "ESO") && is_one_of(cur, "EI")) ||
                     (cur != 'O' && cur != '.' && type_changed);
  if (end) {
    ended->type = s.prev_type;
    ended->begin = s.begin;
    ended->end = i - 1;
  }
  if (start) s.begin = i;
  s.prev_letter = cur;
  s.prev_type.assign(t.type);
  return end;
}

const ParsedTag kOutside{'O', kUnderscore};

// Appends the chunks of `tags` (followed by one "O") scanned from `s`, the
// first tag at position `pos`; returns the position after the "O".
int64_t scan_sentence(detail::ChunkScan& s, std::span<const std::string> tags, int64_t pos, std::vector<Entity>& out) {
  Entity e;
  for (const std::string& tag : tags) {
    if (feed(s, parse_conlleval(tag), pos, &e)) out.push_back(e);
    ++pos;
  }
  if (feed(s, kOutside, pos, &e)) out.push_back(e);
  return pos + 1;
}

}  // namespace

std::vector<Entity> get_entities(std::span<const std::string> tags) {
  for (size_t i = 0; i < tags.size(); ++i) check_tag(tags[i], "given", i);
  detail::ChunkScan s;
  std::vector<Entity> out;
  scan_sentence(s, tags, 0, out);
  return out;
}

std::vector<Entity> get_entities(const std::vector<std::vector<std::string>>& sentences) {
  for (const auto& sentence : sentences)
    for (size_t i = 0; i < sentence.size(); ++i) check_tag(sentence[i], "given", i);
  detail::ChunkScan s;
  std::vector<Entity> out;
  int64_t pos = 0;
  for (const auto& sentence : sentences) pos = scan_sentence(s, sentence, pos, out);
  // seqeval scans one more "O" after the joined list; after a separator "O"
  // it ends nothing, so there is nothing more to add.
  return out;
}

namespace {

std::vector<Entity> strict_entities(std::span<const std::string> tags, const char* side) {
  std::vector<ParsedTag> parsed;
  parsed.reserve(tags.size() + 1);
  for (size_t i = 0; i < tags.size(); ++i) parsed.push_back(parse_strict(tags[i], side, i));
  parsed.push_back(kOutside);
  std::vector<Entity> out;
  size_t i = 0;
  while (i < parsed.size()) {
    if (parsed[i].letter != 'B') {
      ++i;
      continue;
    }
    size_t j = i + 1;  // the run of I's of the same type
    while (parsed[j].letter == 'I' && parsed[j].type == parsed[j - 1].type) ++j;
    out.push_back({std::string(parsed[i].type), static_cast<int64_t>(i), static_cast<int64_t>(j) - 1});
    i = j;
  }
  return out;
}

}  // namespace

std::vector<Entity> get_entities_strict_iob2(std::span<const std::string> tags) {
  return strict_entities(tags, "given");
}

// ---- EntityMetrics --------------------------------------------------------------

EntityMetrics::EntityMetrics(EntityScheme scheme) : scheme_(scheme) {
  KILN_CHECK(scheme == EntityScheme::kConlleval || scheme == EntityScheme::kStrictIob2,
             "EntityMetrics: unknown scheme ", static_cast<int>(scheme));
}

void EntityMetrics::add(std::span<const std::string> true_tags, std::span<const std::string> pred_tags) {
  KILN_CHECK(true_tags.size() == pred_tags.size(), "EntityMetrics::add: ", true_tags.size(), " true tags but ",
             pred_tags.size(), " predicted tags");
  if (scheme_ == EntityScheme::kStrictIob2)
    add_strict(true_tags, pred_tags);
  else
    add_conlleval(true_tags, pred_tags);
  int64_t correct = 0;
  for (size_t i = 0; i < true_tags.size(); ++i) correct += true_tags[i] == pred_tags[i] ? 1 : 0;
  correct_tokens_ += correct;
  tokens_ += static_cast<int64_t>(true_tags.size());
  ++sentences_;
}

void EntityMetrics::add_conlleval(std::span<const std::string> true_tags, std::span<const std::string> pred_tags) {
  for (size_t i = 0; i < true_tags.size(); ++i) {
    check_tag(true_tags[i], "true", i);
    check_tag(pred_tags[i], "predicted", i);
  }
  // Both sequences are scanned in step: a chunk ending at position i - 1 is
  // reported by both scans at position i, so a predicted chunk is correct
  // exactly when the true scan reports the same type and begin there.
  Entity t, p;
  const size_t n = true_tags.size();
  for (size_t k = 0; k <= n; ++k) {
    const ParsedTag tt = k < n ? parse_conlleval(true_tags[k]) : kOutside;
    const ParsedTag pt = k < n ? parse_conlleval(pred_tags[k]) : kOutside;
    const bool t_ended = feed(true_scan_, tt, position_, &t);
    const bool p_ended = feed(pred_scan_, pt, position_, &p);
    if (t_ended) ++counts_[t.type].true_count;
    if (p_ended) ++counts_[p.type].predicted;
    if (t_ended && p_ended && t.begin == p.begin && t.type == p.type) ++counts_[t.type].correct;
    ++position_;
  }
}

void EntityMetrics::add_strict(std::span<const std::string> true_tags, std::span<const std::string> pred_tags) {
  const std::vector<Entity> t = strict_entities(true_tags, "true");
  const std::vector<Entity> p = strict_entities(pred_tags, "predicted");
  for (const Entity& e : t) ++counts_[e.type].true_count;
  for (const Entity& e : p) ++counts_[e.type].predicted;
  // Each list is sorted by begin and its entities are disjoint.
  size_t i = 0, j = 0;
  while (i < t.size() && j < p.size()) {
    if (t[i].begin < p[j].begin) {
      ++i;
    } else if (p[j].begin < t[i].begin) {
      ++j;
    } else {
      if (t[i] == p[j]) ++counts_[t[i].type].correct;
      ++i;
      ++j;
    }
  }
}

int64_t EntityMetrics::true_entities() const {
  int64_t n = 0;
  for (const auto& [type, c] : counts_) n += c.true_count;
  return n;
}

int64_t EntityMetrics::predicted_entities() const {
  int64_t n = 0;
  for (const auto& [type, c] : counts_) n += c.predicted;
  return n;
}

int64_t EntityMetrics::correct_entities() const {
  int64_t n = 0;
  for (const auto& [type, c] : counts_) n += c.correct;
  return n;
}

namespace {

double ratio_or_zero(int64_t num, int64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

// seqeval's F: 2 p r / (p + r), 0 when p + r == 0.
double seqeval_f1(double p, double r) {
  const double denom = p + r;
  return denom == 0.0 ? 0.0 : 2.0 * p * r / denom;
}

}  // namespace

void EntityMetrics::check_sentences(const char* metric) const {
  KILN_CHECK(sentences_ > 0, "EntityMetrics::", metric, ": no sentences were added");
}

double EntityMetrics::precision() const {
  check_sentences("precision");
  return ratio_or_zero(correct_entities(), predicted_entities());
}

double EntityMetrics::recall() const {
  check_sentences("recall");
  return ratio_or_zero(correct_entities(), true_entities());
}

double EntityMetrics::f1() const {
  check_sentences("f1");
  return seqeval_f1(precision(), recall());
}

double EntityMetrics::accuracy() const {
  KILN_CHECK(tokens_ > 0, "EntityMetrics::accuracy: no tags were added");
  return static_cast<double>(correct_tokens_) / static_cast<double>(tokens_);
}

std::map<std::string, EntityTypeScores> EntityMetrics::per_type() const {
  std::map<std::string, EntityTypeScores> out;
  for (const auto& [type, c] : counts_) {
    EntityTypeScores s;
    s.true_count = c.true_count;
    s.predicted = c.predicted;
    s.correct = c.correct;
    s.precision = ratio_or_zero(c.correct, c.predicted);
    s.recall = ratio_or_zero(c.correct, c.true_count);
    s.f1 = seqeval_f1(s.precision, s.recall);
    out.emplace(type, s);
  }
  return out;
}

std::map<std::string, double> EntityMetrics::summary(const std::string& prefix) const {
  return {{prefix + "precision", precision()},
          {prefix + "recall", recall()},
          {prefix + "f1", f1()},
          {prefix + "accuracy", accuracy()}};
}

void EntityMetrics::reset() { *this = EntityMetrics(scheme_); }

// ---- RegressionMetrics ----------------------------------------------------------

void RegressionMetrics::add(double prediction, double label) {
  predictions_.push_back(prediction);
  labels_.push_back(label);
}

void RegressionMetrics::add(std::span<const double> predictions, std::span<const double> labels) {
  KILN_CHECK(predictions.size() == labels.size(), "RegressionMetrics::add: ", predictions.size(), " predictions but ",
             labels.size(), " labels");
  predictions_.insert(predictions_.end(), predictions.begin(), predictions.end());
  labels_.insert(labels_.end(), labels.begin(), labels.end());
}

double RegressionMetrics::mse() const {
  KILN_CHECK(!predictions_.empty(), "RegressionMetrics::mse: no examples were added");
  std::vector<double> sq(predictions_.size());
  for (size_t i = 0; i < sq.size(); ++i) {
    const double d = predictions_[i] - labels_[i];
    sq[i] = d * d;
  }
  return numpy_mean(sq);
}

namespace {

bool is_constant(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == v[0]; });
}

double sign(double d) {
  if (d > 0) return 1.0;
  if (d < 0) return -1.0;
  return d == 0 ? 0.0 : d;  // NaN stays NaN
}

double clip_unit(double r) {
  if (r > 1.0) return 1.0;
  if (r < -1.0) return -1.0;
  return r;  // NaN stays NaN
}

// v - mean(v)
std::vector<double> centered(std::span<const double> v) {
  const double mean = numpy_mean(v);
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = v[i] - mean;
  return d;
}

// sqrt(sum d_i^2) of finite d_i, scaled by max |d_i| so that it neither
// overflows nor underflows (like scipy.linalg.norm).
double norm2(const std::vector<double>& d) {
  double scale = 0.0;
  for (double x : d) scale = std::max(scale, std::abs(x));
  if (scale == 0.0) return 0.0;
  double sum = 0.0;
  for (double x : d) {
    const double s = x / scale;
    sum += s * s;
  }
  return scale * std::sqrt(sum);
}

void check_pairs(int64_t n, const char* metric) {
  KILN_CHECK(n >= 2, "RegressionMetrics::", metric, ": needs at least 2 examples, got ", n);
}

}  // namespace

double RegressionMetrics::pearson() const {
  check_pairs(count(), "pearson");
  const std::vector<double>& x = predictions_;
  const std::vector<double>& y = labels_;
  if (is_constant(x) || is_constant(y)) return std::numeric_limits<double>::quiet_NaN();
  if (x.size() == 2) return sign(x[1] - x[0]) * sign(y[1] - y[0]);
  const std::vector<double> dx = centered(x), dy = centered(y);
  // scipy.linalg.norm checks its input: pearsonr raises on NaN or infinity
  // (also from a mean that overflowed).
  const auto finite = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double d) { return std::isfinite(d); });
  };
  KILN_CHECK(finite(dx) && finite(dy),
             "RegressionMetrics::pearson: the predictions or labels hold NaN or infinity (or their mean overflows); "
             "scipy.stats.pearsonr raises there too");
  const double nx = norm2(dx), ny = norm2(dy);
  double r = 0.0;
  for (size_t i = 0; i < dx.size(); ++i) r += (dx[i] / nx) * (dy[i] / ny);
  return clip_unit(r);
}

std::vector<double> average_ranks(std::span<const double> values) {
  for (size_t i = 0; i < values.size(); ++i) KILN_CHECK(!std::isnan(values[i]), "average_ranks: value ", i, " is NaN");
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  size_t a = 0;
  while (a < order.size()) {
    size_t b = a + 1;
    while (b < order.size() && values[order[b]] == values[order[a]]) ++b;
    // sorted positions a .. b-1 hold ranks a+1 .. b; their mean (exact)
    const double rank = 0.5 * static_cast<double>(a + b + 1);
    for (size_t k = a; k < b; ++k) ranks[order[k]] = rank;
    a = b;
  }
  return ranks;
}

double RegressionMetrics::spearman() const {
  check_pairs(count(), "spearman");
  const std::vector<double>& x = predictions_;
  const std::vector<double>& y = labels_;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (is_constant(x) || is_constant(y)) return nan;
  const auto has_nan = [](const std::vector<double>& v) {
    return std::any_of(v.begin(), v.end(), [](double d) { return std::isnan(d); });
  };
  if (has_nan(x) || has_nan(y)) return nan;
  const std::vector<double> dx = centered(average_ranks(x)), dy = centered(average_ranks(y));
  double sxx = 0.0, syy = 0.0, sxy = 0.0;
  for (size_t i = 0; i < dx.size(); ++i) {
    sxx += dx[i] * dx[i];
    syy += dy[i] * dy[i];
    sxy += dx[i] * dy[i];
  }
  // numpy.corrcoef: cov / sd_x / sd_y, each with the 1 / (n - 1) of np.cov.
  const double dof = static_cast<double>(dx.size() - 1);
  return clip_unit(sxy / dof / std::sqrt(sxx / dof) / std::sqrt(syy / dof));
}

std::map<std::string, double> RegressionMetrics::summary(const std::string& prefix) const {
  check_pairs(count(), "summary");
  const double p = pearson(), s = spearman();
  return {{prefix + "mse", mse()},
          {prefix + "pearson", p},
          {prefix + "spearmanr", s},
          {prefix + "combined_score", (p + s) / 2.0}};
}

void RegressionMetrics::reset() {
  predictions_.clear();
  labels_.clear();
}

// ---- MultiLabelMetrics ----------------------------------------------------------

MultiLabelMetrics::MultiLabelMetrics(std::vector<std::string> label_names) : names_(std::move(label_names)) {
  KILN_CHECK(names_.size() >= 2, "MultiLabelMetrics: needs at least 2 labels, got ", names_.size());
  const std::set<std::string> distinct(names_.begin(), names_.end());
  KILN_CHECK(distinct.size() == names_.size(), "MultiLabelMetrics: label names must be distinct");
  // "f1_" + name must not collide with the averages' keys.
  KILN_CHECK(!distinct.contains("micro") && !distinct.contains("macro"),
             "MultiLabelMetrics: a label may not be named \"micro\" or \"macro\" (summary keys f1_micro, f1_macro)");
  tp_.assign(names_.size(), 0);
  pred_.assign(names_.size(), 0);
  true_.assign(names_.size(), 0);
}

void MultiLabelMetrics::add(std::span<const uint8_t> predicted, std::span<const uint8_t> labels) {
  const size_t n = names_.size();
  KILN_CHECK(predicted.size() == n && labels.size() == n, "MultiLabelMetrics::add: expected ", n, " values each, got ",
             predicted.size(), " predicted and ", labels.size(), " labels");
  for (size_t l = 0; l < n; ++l)
    KILN_CHECK(predicted[l] <= 1 && labels[l] <= 1, "MultiLabelMetrics::add: label ", l, " (", names_[l],
               "): values must be 0 or 1, got predicted ", int{predicted[l]}, ", label ", int{labels[l]});
  bool exact = true;
  for (size_t l = 0; l < n; ++l) {
    tp_[l] += predicted[l] & labels[l];
    pred_[l] += predicted[l];
    true_[l] += labels[l];
    exact = exact && predicted[l] == labels[l];
  }
  exact_ += exact ? 1 : 0;
  ++count_;
}

namespace {

// sklearn's F1 (beta = 1): 2 p r / (p + r), zero_division 0, also when
// p + r is within numpy.isclose's 1e-8 of 0.
double sklearn_f1(int64_t tp, int64_t pred, int64_t truth) {
  const double p = ratio_or_zero(tp, pred);
  const double r = ratio_or_zero(tp, truth);
  const double denom = p + r;
  if (std::abs(denom) <= 1e-8 || pred + truth == 0) return 0.0;
  return 2.0 * p * r / denom;
}

}  // namespace

void MultiLabelMetrics::check_not_empty(const char* metric) const {
  KILN_CHECK(count_ > 0, "MultiLabelMetrics::", metric, ": no examples were added");
}

double MultiLabelMetrics::label_f1(int64_t label) const {
  KILN_CHECK(label >= 0 && label < num_labels(), "MultiLabelMetrics::label_f1: label ", label, " is outside [0, ",
             num_labels(), ")");
  check_not_empty("label_f1");
  const size_t l = static_cast<size_t>(label);
  return sklearn_f1(tp_[l], pred_[l], true_[l]);
}

std::vector<double> MultiLabelMetrics::f1_per_label() const {
  std::vector<double> f(names_.size());
  for (size_t l = 0; l < f.size(); ++l) f[l] = label_f1(static_cast<int64_t>(l));
  return f;
}

double MultiLabelMetrics::f1_micro() const {
  check_not_empty("f1_micro");
  const auto sum = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); };
  return sklearn_f1(sum(tp_), sum(pred_), sum(true_));
}

double MultiLabelMetrics::f1_macro() const {
  check_not_empty("f1_macro");
  return numpy_mean(f1_per_label());
}

double MultiLabelMetrics::accuracy() const {
  check_not_empty("accuracy");
  return static_cast<double>(exact_) / static_cast<double>(count_);
}

std::map<std::string, double> MultiLabelMetrics::summary(const std::string& prefix) const {
  check_not_empty("summary");
  std::map<std::string, double> out{
      {prefix + "f1_micro", f1_micro()}, {prefix + "f1_macro", f1_macro()}, {prefix + "accuracy", accuracy()}};
  const std::vector<double> f = f1_per_label();
  for (size_t l = 0; l < f.size(); ++l) out[prefix + "f1_" + names_[l]] = f[l];
  return out;
}

void MultiLabelMetrics::reset() {
  std::fill(tp_.begin(), tp_.end(), 0);
  std::fill(pred_.begin(), pred_.end(), 0);
  std::fill(true_.begin(), true_.end(), 0);
  count_ = 0;
  exact_ = 0;
}

}  // namespace kiln::train
