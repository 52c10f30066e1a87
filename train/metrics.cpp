#include "train/metrics.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kiln::train {

// ---- MlmMetrics -----------------------------------------------------------

void MlmMetrics::add_predictions(std::span<const int64_t> predictions, std::span<const int64_t> labels,
                                 int64_t ignore_index) {
  KILN_CHECK(predictions.size() == labels.size(), "MlmMetrics::add_predictions: ", predictions.size(),
             " predictions but ", labels.size(), " labels");
  int64_t correct = 0;
  int64_t predicted = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == ignore_index) continue;
    ++predicted;
    if (predictions[i] == labels[i]) ++correct;
  }
  correct_ += correct;
  predicted_ += predicted;
}

void MlmMetrics::add_counts(int64_t correct, int64_t predicted) {
  KILN_CHECK(correct >= 0 && predicted >= 0 && correct <= predicted,
             "MlmMetrics::add_counts: need 0 <= correct <= predicted, got correct ", correct, ", predicted ",
             predicted);
  correct_ += correct;
  predicted_ += predicted;
}

void MlmMetrics::add_loss(double mean_loss, int64_t tokens) {
  KILN_CHECK(tokens >= 0, "MlmMetrics::add_loss: negative token count ", tokens);
  if (tokens == 0) return;
  loss_sum_ += mean_loss * static_cast<double>(tokens);
  loss_tokens_ += tokens;
}

double MlmMetrics::accuracy() const {
  KILN_CHECK(predicted_ > 0, "MlmMetrics::accuracy: no predicted tokens were added");
  return static_cast<double>(correct_) / static_cast<double>(predicted_);
}

double MlmMetrics::mean_loss() const {
  KILN_CHECK(loss_tokens_ > 0, "MlmMetrics::mean_loss: no loss was added");
  return loss_sum_ / static_cast<double>(loss_tokens_);
}

double MlmMetrics::perplexity() const { return std::exp(mean_loss()); }

std::map<std::string, double> MlmMetrics::summary(const std::string& prefix) const {
  std::map<std::string, double> out;
  if (predicted_ > 0) out[prefix + "mlm_accuracy"] = accuracy();
  if (loss_tokens_ > 0) {
    out[prefix + "loss"] = mean_loss();
    out[prefix + "perplexity"] = perplexity();
  }
  return out;
}

void MlmMetrics::reset() { *this = MlmMetrics(); }

// ---- ClassificationMetrics --------------------------------------------------

ClassificationMetrics::ClassificationMetrics(int64_t num_classes) : num_classes_(num_classes) {
  KILN_CHECK(num_classes >= 2, "ClassificationMetrics: num_classes must be >= 2, got ", num_classes);
  KILN_CHECK(num_classes <= 65536, "ClassificationMetrics: num_classes ", num_classes,
             " is too large for a dense confusion matrix (max 65536)");
  confusion_.assign(static_cast<size_t>(num_classes * num_classes), 0);
}

void ClassificationMetrics::check_class(int64_t cls, const char* what) const {
  KILN_CHECK(cls >= 0 && cls < num_classes_, "ClassificationMetrics: ", what, " ", cls, " is outside [0, ",
             num_classes_, ")");
}

void ClassificationMetrics::check_not_empty(const char* metric) const {
  KILN_CHECK(count_ > 0, "ClassificationMetrics::", metric, ": no examples were added");
}

void ClassificationMetrics::add(int64_t prediction, int64_t label) {
  check_class(prediction, "prediction");
  check_class(label, "label");
  ++confusion_[static_cast<size_t>(label * num_classes_ + prediction)];
  ++count_;
}

void ClassificationMetrics::add(std::span<const int64_t> predictions, std::span<const int64_t> labels) {
  KILN_CHECK(predictions.size() == labels.size(), "ClassificationMetrics::add: ", predictions.size(),
             " predictions but ", labels.size(), " labels");
  // Validate everything first so a bad batch leaves the counts unchanged.
  for (size_t i = 0; i < labels.size(); ++i) {
    check_class(predictions[i], "prediction");
    check_class(labels[i], "label");
  }
  for (size_t i = 0; i < labels.size(); ++i) add(predictions[i], labels[i]);
}

int64_t ClassificationMetrics::confusion(int64_t label, int64_t prediction) const {
  check_class(prediction, "prediction");
  check_class(label, "label");
  return confusion_[static_cast<size_t>(label * num_classes_ + prediction)];
}

double ClassificationMetrics::accuracy() const {
  check_not_empty("accuracy");
  int64_t correct = 0;
  for (int64_t k = 0; k < num_classes_; ++k) correct += confusion(k, k);
  return static_cast<double>(correct) / static_cast<double>(count_);
}

namespace {

struct ClassCounts {
  int64_t tp = 0, fp = 0, fn = 0;
};

ClassCounts class_counts(const ClassificationMetrics& m, int64_t cls) {
  ClassCounts c;
  c.tp = m.confusion(cls, cls);
  for (int64_t k = 0; k < m.num_classes(); ++k) {
    if (k == cls) continue;
    c.fp += m.confusion(k, cls);  // label k, predicted cls
    c.fn += m.confusion(cls, k);  // label cls, predicted k
  }
  return c;
}

double f1_of(const ClassCounts& c) {
  const int64_t denom = 2 * c.tp + c.fp + c.fn;
  return denom == 0 ? 0.0 : 2.0 * static_cast<double>(c.tp) / static_cast<double>(denom);
}

}  // namespace

double ClassificationMetrics::class_f1(int64_t positive) const {
  check_class(positive, "positive class");
  check_not_empty("class_f1");
  return f1_of(class_counts(*this, positive));
}

double ClassificationMetrics::macro_f1() const {
  check_not_empty("macro_f1");
  double sum = 0.0;
  int64_t classes_seen = 0;
  for (int64_t k = 0; k < num_classes_; ++k) {
    const ClassCounts c = class_counts(*this, k);
    if (c.tp + c.fp + c.fn == 0) continue;  // absent from labels and predictions
    sum += f1_of(c);
    ++classes_seen;
  }
  return sum / static_cast<double>(classes_seen);  // count_ > 0, so some class occurs
}

double ClassificationMetrics::f1() const { return num_classes_ == 2 ? class_f1(1) : macro_f1(); }

double ClassificationMetrics::matthews_corrcoef() const {
  check_not_empty("matthews_corrcoef");
  // Sums in double: s^2 overflows int64 past ~3e9 examples, and sklearn uses
  // float64 here too.
  const double s = static_cast<double>(count_);
  double correct = 0.0, sum_pt = 0.0, sum_pp = 0.0, sum_tt = 0.0;
  for (int64_t k = 0; k < num_classes_; ++k) {
    double t_k = 0.0, p_k = 0.0;
    for (int64_t j = 0; j < num_classes_; ++j) {
      t_k += static_cast<double>(confusion(k, j));
      p_k += static_cast<double>(confusion(j, k));
    }
    correct += static_cast<double>(confusion(k, k));
    sum_pt += p_k * t_k;
    sum_pp += p_k * p_k;
    sum_tt += t_k * t_k;
  }
  const double cov_ytyp = correct * s - sum_pt;
  const double cov_ypyp = s * s - sum_pp;
  const double cov_ytyt = s * s - sum_tt;
  if (cov_ypyp * cov_ytyt == 0.0) return 0.0;
  return cov_ytyp / std::sqrt(cov_ytyt * cov_ypyp);
}

std::map<std::string, double> ClassificationMetrics::summary(const std::string& prefix) const {
  return {{prefix + "accuracy", accuracy()}, {prefix + "f1", f1()}, {prefix + "mcc", matthews_corrcoef()}};
}

void ClassificationMetrics::reset() {
  count_ = 0;
  std::fill(confusion_.begin(), confusion_.end(), 0);
}

}  // namespace kiln::train
