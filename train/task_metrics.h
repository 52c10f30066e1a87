// Evaluation metrics for token classification (entity-level precision, recall
// and F1 as seqeval 1.2.2 computes them), regression (MSE, Pearson and
// Spearman correlation as Hugging Face's run_glue reports for STS-B) and
// multi-label classification (per-label, micro and macro F1 and subset
// accuracy as scikit-learn 1.3.2 computes them on indicator matrices).
// tests/test_task_metrics.cpp compares every number with those libraries.
//
// ---- entities (EntityMetrics, get_entities) ------------------------------
// A tag is a UTF-8 string. Its "letter" is its first code point and its
// "rest" is everything after that.
//
// EntityScheme::kConlleval is seqeval's default mode (mode=None; conlleval.pl's
// chunking). A tag's type is the rest after its first '-' when the rest has a
// '-', else the whole rest; an empty type is "_". So "B-PER" is (B, PER), "O"
// is (O, _), "PER" is (P, ER), "BX-Y" is (B, Y), "B-" and "B" are (B, _).
// Walking the tags with the previous (letter, type), starting from (O, "")
// (an empty type, unlike any real one) and followed by one extra "O":
//   a chunk ends before this tag when the previous letter is E or S; or the
//     previous letter is B or I and this one is B, S or O; or the previous
//     letter is neither O nor '.' and the types differ;
//   a chunk starts at this tag when its letter is B or S; or the previous
//     letter is E, S or O and this one is E or I; or this letter is neither O
//     nor '.' and the types differ.
// An ending chunk is (previous type, the last start, previous position); the
// end test comes first, so a chunk ends and a new one starts at one tag.
// Letters other than B, I, E, S, O and '.' take part only through the type
// rules (seqeval warns about them and goes on; so does kiln, silently). Only
// prefixed tags are read, seqeval's default; its suffix=True ("PER-B") is not
// supported.
// The sentences of an evaluation are scanned as ONE sequence, each followed by
// an "O" (seqeval flattens y_true and y_pred that way), so positions count
// across sentences, and a chunk can, with odd tags, run across a boundary
// exactly as it does in seqeval.
//
// EntityScheme::kStrictIob2 is seqeval's mode='strict' with scheme=IOB2. A
// tag's letter must be B, I or O (anything else, in either sequence, is a
// kiln::Error; seqeval raises). Its type is the rest with leading and trailing
// '-' removed, "_" when empty. Each sentence on its own: an entity is a B
// followed by the longest run of I's of the same type; an I that does not
// continue such a run belongs to no entity. Entities are compared per
// sentence.
//
// Both modes: a predicted entity is correct when a true entity has the same
// type, begin and end. Per type T (the types of all true and predicted
// entities; seqeval's average=None and classification_report):
//   precision = correct_T / predicted_T, 0 when predicted_T = 0
//   recall    = correct_T / true_T,      0 when true_T = 0
//   f1        = 2 p r / (p + r),          0 when p + r = 0
// and the micro average (seqeval's default average='micro') is the same with
// the counts summed over the types. (seqeval returns 0 with a warning on zero
// division; kiln returns 0.) accuracy = matching tags / all tags (seqeval's
// accuracy_score, the same in both modes). An empty tag string is a
// kiln::Error (seqeval fails on it). Asking for precision/recall/f1 before any
// sentence was added, or accuracy before any tag, is a kiln::Error (seqeval
// raises there too).
//
// ---- regression (RegressionMetrics) -------------------------------------
// With predictions x and labels y, n pairs, all sums and means in double:
//   mse      = mean of (x_i - y_i)^2
//   pearson  = scipy.stats.pearsonr(x, y): NaN when x or y is constant (every
//              value == the first); for n = 2, sign(x1 - x0) sign(y1 - y0);
//              else with mx, my the means, dx_i = x_i - mx, |dx| = sqrt(sum dx_i^2)
//              (likewise y): r = sum (dx_i / |dx|) (dy_i / |dy|), clipped to
//              [-1, 1]
//   spearman = scipy.stats.spearmanr(x, y): NaN when x or y is constant or
//              holds a NaN; else the correlation of the ranks (1..n, tied
//              values get the mean of their ranks) as numpy.corrcoef:
//              cov(rx, ry) / sd(rx) / sd(ry), clipped to [-1, 1]
//   combined_score = (pearson + spearman) / 2   (run_glue's STS-B score)
// Means and mse are summed the way numpy sums (numpy_sum below), so they are
// numpy's to the bit; the correlations agree with scipy to ~1e-15 (scipy's
// BLAS dot products add in another order). Non-finite values: mse and
// spearman give NaN for a NaN (numpy, scipy's nan_policy='propagate'); pearson
// (n > 2, input not constant) is a kiln::Error when a value is NaN or infinite
// or a mean overflows, where scipy.stats.pearsonr raises ValueError. pearson
// and spearman need n >= 2, mse n >= 1: kiln::Error otherwise.
//
// ---- multi-label (MultiLabelMetrics) ------------------------------------
// On the 0/1 indicator matrices of predictions and labels (n examples x L
// labels), per label l with tp_l, pred_l (predicted 1), true_l (label 1):
//   p_l = tp_l / pred_l (0 when pred_l = 0), r_l = tp_l / true_l (0 when
//   true_l = 0), f1_l = 2 p_l r_l / (p_l + r_l), 0 when |p_l + r_l| <= 1e-8
//   or pred_l + true_l = 0 (sklearn f1_score(average=None), zero_division
//   default)
//   f1_micro = the same formula on tp, pred, true summed over the labels
//   f1_macro = mean of f1_l over ALL L labels (a label never true nor
//              predicted counts as 0)
//   accuracy = examples whose whole row matches / n (sklearn accuracy_score,
//              "subset accuracy")
// Needs L >= 2 (scikit-learn reads a single column as binary, not multi-label)
// and n >= 1 for any metric.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::train {

// numpy's float64 sum of a contiguous array (np.sum / np.add.reduce): blocks of
// 8192 values added in order, each block summed pairwise (8 partial sums for
// up to 128 values, halves above). Mean = numpy_sum(v) / n matches np.mean.
double numpy_sum(std::span<const double> values);

// ---- entities ----------------------------------------------------------------

enum class EntityScheme {
  kConlleval,   // seqeval default (mode=None), conlleval.pl chunking
  kStrictIob2,  // seqeval mode='strict', scheme=IOB2
};

// One entity: its type and the positions [begin, end] it covers, end INCLUSIVE
// (as seqeval's get_entities returns them).
struct Entity {
  std::string type;
  int64_t begin = 0;
  int64_t end = 0;  // inclusive
  bool operator==(const Entity&) const = default;
};

// seqeval's get_entities(tags) on one flat list, default mode.
std::vector<Entity> get_entities(std::span<const std::string> tags);
// seqeval's get_entities on a list of sentences: the sentences joined, each
// followed by "O", so positions count the separators
// (sentence k starts at sum over j < k of (size_j + 1)).
std::vector<Entity> get_entities(const std::vector<std::vector<std::string>>& sentences);
// The entities of one sentence under seqeval's strict IOB2 mode
// (seqeval.scheme.Tokens(tags, IOB2).entities), end made inclusive.
// kiln::Error for a tag whose letter is not B, I or O.
std::vector<Entity> get_entities_strict_iob2(std::span<const std::string> tags);

namespace detail {
// One sequence's state in the default (conlleval) scan.
struct ChunkScan {
  int prev_letter = 'O';  // the previous letter; -1 for a non-ASCII one
  std::string prev_type;  // "" before the first tag
  int64_t begin = 0;      // the last chunk start
};
}  // namespace detail

struct EntityTypeScores {
  int64_t true_count = 0;  // support
  int64_t predicted = 0;
  int64_t correct = 0;
  double precision = 0.0;
  double recall = 0.0;
  double f1 = 0.0;
};

// Entity-level metrics accumulated sentence by sentence; the result is the same
// however the sentences are split over add() calls (it is seqeval's result on
// the list of all sentences added).
class EntityMetrics {
 public:
  explicit EntityMetrics(EntityScheme scheme = EntityScheme::kConlleval);

  // One sentence's true and predicted tags; kiln::Error when the sizes differ,
  // for an empty tag, and (strict mode) for a tag that is not B/I/O. A
  // sentence that fails leaves the metrics unchanged.
  void add(std::span<const std::string> true_tags, std::span<const std::string> pred_tags);

  EntityScheme scheme() const { return scheme_; }
  int64_t sentences() const { return sentences_; }
  int64_t tokens() const { return tokens_; }
  int64_t correct_tokens() const { return correct_tokens_; }
  int64_t true_entities() const;
  int64_t predicted_entities() const;
  int64_t correct_entities() const;

  double precision() const;  // micro
  double recall() const;     // micro
  double f1() const;         // micro
  double accuracy() const;   // token accuracy
  // Per entity type, sorted by type (byte order, which is code-point order).
  std::map<std::string, EntityTypeScores> per_type() const;

  // "precision", "recall", "f1", "accuracy", prefixed by `prefix`.
  // kiln::Error before any tag was added.
  std::map<std::string, double> summary(const std::string& prefix = "") const;

  void reset();

 private:
  struct Counts {
    int64_t true_count = 0, predicted = 0, correct = 0;
  };
  void check_sentences(const char* metric) const;
  void add_conlleval(std::span<const std::string> true_tags, std::span<const std::string> pred_tags);
  void add_strict(std::span<const std::string> true_tags, std::span<const std::string> pred_tags);

  EntityScheme scheme_;
  int64_t sentences_ = 0;
  int64_t tokens_ = 0;
  int64_t correct_tokens_ = 0;
  int64_t position_ = 0;  // conlleval: position in the joined sequence
  detail::ChunkScan true_scan_, pred_scan_;
  std::map<std::string, Counts> counts_;
};

// ---- regression ----------------------------------------------------------------

// Keeps every (prediction, label) pair: the ranks need them all.
class RegressionMetrics {
 public:
  void add(double prediction, double label);
  // kiln::Error when the sizes differ.
  void add(std::span<const double> predictions, std::span<const double> labels);

  int64_t count() const { return static_cast<int64_t>(predictions_.size()); }
  const std::vector<double>& predictions() const { return predictions_; }
  const std::vector<double>& labels() const { return labels_; }

  double mse() const;       // n >= 1
  double pearson() const;   // n >= 2; NaN for constant input; kiln::Error for NaN/inf
  double spearman() const;  // n >= 2; NaN for constant input or a NaN
  double combined_score() const { return (pearson() + spearman()) / 2.0; }

  // "mse", "pearson", "spearmanr", "combined_score" (run_glue's STS-B keys
  // plus mse), prefixed by `prefix`. kiln::Error for n < 2 and where
  // pearson() is one.
  std::map<std::string, double> summary(const std::string& prefix = "") const;

  void reset();

 private:
  std::vector<double> predictions_, labels_;
};

// Average ranks (1-based; ties share the mean of their ranks), as
// scipy.stats.rankdata(method='average'). The values must not be NaN.
std::vector<double> average_ranks(std::span<const double> values);

// ---- multi-label ---------------------------------------------------------------

class MultiLabelMetrics {
 public:
  // label_names: at least 2, distinct, none "micro" or "macro" (they name the
  // summary keys "f1_<name>").
  explicit MultiLabelMetrics(std::vector<std::string> label_names);

  // One example: predicted[l], labels[l] in {0, 1} for each of the labels.
  // kiln::Error for a wrong size or a value other than 0 and 1.
  void add(std::span<const uint8_t> predicted, std::span<const uint8_t> labels);

  int64_t num_labels() const { return static_cast<int64_t>(names_.size()); }
  const std::vector<std::string>& label_names() const { return names_; }
  int64_t count() const { return count_; }
  int64_t exact_matches() const { return exact_; }

  double label_f1(int64_t label) const;
  std::vector<double> f1_per_label() const;
  double f1_micro() const;
  double f1_macro() const;
  double accuracy() const;  // subset accuracy

  // "f1_micro", "f1_macro", "accuracy" and "f1_<name>" for each label,
  // prefixed by `prefix`. kiln::Error when empty.
  std::map<std::string, double> summary(const std::string& prefix = "") const;

  void reset();

 private:
  void check_not_empty(const char* metric) const;

  std::vector<std::string> names_;
  std::vector<int64_t> tp_, pred_, true_;
  int64_t count_ = 0;
  int64_t exact_ = 0;
};

}  // namespace kiln::train
