// Evaluation metrics accumulated over batches: masked-LM accuracy and
// perplexity; classification accuracy, F1 and Matthews correlation.
//
// Everything is counts (int64) and sums (double), so the result does not
// depend on how the examples were split into batches, except for the float
// rounding of the loss sum. The formulas are scikit-learn's:
//   accuracy   = correct / total
//   F1 (class) = 2 tp / (2 tp + fp + fn), 0 when that denominator is 0
//                (sklearn's zero_division default)
//   macro-F1   = mean of the per-class F1 over the classes that occur in the
//                labels or the predictions (sklearn's default `labels`)
//   MCC        = (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2)),
//                0 when the denominator is 0 (sklearn's matthews_corrcoef);
//                with t_k / p_k the true / predicted count of class k,
//                c the correct count and s the total. For two classes it is
//                the usual (tp tn - fp fn) / sqrt(...).
//   perplexity = exp(mean loss per predicted token); inf when that overflows.
// Asking for a ratio over zero examples is a kiln::Error, not NaN.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace kiln::train {

// Masked language modelling: accuracy over the predicted (masked) tokens and
// perplexity from the mean cross-entropy over the same tokens.
class MlmMetrics {
 public:
  // predictions, labels: [n] token ids (a flattened [batch, seq]); positions
  // whose label is ignore_index are not predicted and do not count.
  // kiln::Error when the sizes differ.
  void add_predictions(std::span<const int64_t> predictions, std::span<const int64_t> labels,
                       int64_t ignore_index = -100);
  // Counts computed elsewhere (e.g. on the device): 0 <= correct <= predicted.
  void add_counts(int64_t correct, int64_t predicted);
  // A batch's mean cross-entropy over its `tokens` predicted tokens; weighted
  // by `tokens`, so mean_loss() is the mean over all tokens. tokens >= 0; a
  // batch with no tokens adds nothing. A non-finite loss is accepted and makes
  // mean_loss() non-finite (a diverged run should show as such).
  void add_loss(double mean_loss, int64_t tokens);

  int64_t correct() const { return correct_; }
  int64_t predicted() const { return predicted_; }
  int64_t loss_tokens() const { return loss_tokens_; }

  double accuracy() const;    // correct / predicted
  double mean_loss() const;   // loss sum / loss tokens
  double perplexity() const;  // exp(mean_loss())

  // The metrics that have data: "mlm_accuracy" (when predicted > 0), "loss"
  // and "perplexity" (when loss tokens > 0), each key prefixed by `prefix`.
  std::map<std::string, double> summary(const std::string& prefix = "") const;

  void reset();

 private:
  int64_t correct_ = 0;
  int64_t predicted_ = 0;
  double loss_sum_ = 0.0;
  int64_t loss_tokens_ = 0;
};

// Single-label classification over classes 0 .. num_classes-1, kept as a
// confusion matrix (rows: label, columns: prediction).
class ClassificationMetrics {
 public:
  explicit ClassificationMetrics(int64_t num_classes);  // num_classes >= 2

  // kiln::Error for a class outside [0, num_classes) or differing sizes.
  void add(int64_t prediction, int64_t label);
  void add(std::span<const int64_t> predictions, std::span<const int64_t> labels);

  int64_t num_classes() const { return num_classes_; }
  int64_t count() const { return count_; }
  int64_t confusion(int64_t label, int64_t prediction) const;

  double accuracy() const;
  // F1 of one class taken as positive (binary F1: class_f1(1)).
  double class_f1(int64_t positive) const;
  double macro_f1() const;
  // Binary F1 of class 1 for two classes, macro-F1 for more.
  double f1() const;
  double matthews_corrcoef() const;

  // "accuracy", "f1", "mcc", prefixed by `prefix`. kiln::Error when empty.
  std::map<std::string, double> summary(const std::string& prefix = "") const;

  void reset();

 private:
  void check_class(int64_t cls, const char* what) const;
  void check_not_empty(const char* metric) const;

  int64_t num_classes_;
  int64_t count_ = 0;
  std::vector<int64_t> confusion_;  // [num_classes, num_classes], row = label
};

}  // namespace kiln::train
