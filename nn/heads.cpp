// The task interfaces' shared pieces (Note [Task model interfaces], nn/heads.h).
#include "nn/heads.h"

#include <limits>

namespace kiln::nn {

SequenceClassifier::SequenceClassifier(int64_t labels, std::optional<std::string> problem)
    : num_labels(labels), problem_type(std::move(problem)) {
  KILN_CHECK(labels >= 1, "sequence classification: num_labels must be positive, got ", labels);
}

std::string SequenceClassifier::problem_type_for(const Tensor& labels) const {
  if (problem_type) return *problem_type;
  if (num_labels == 1) return "regression";
  return is_integral(labels.dtype()) ? "single_label_classification" : "multi_label_classification";
}

Tensor SequenceClassifier::loss(const Tensor& logits, const Tensor& labels) const {
  const std::string problem = problem_type_for(labels);
  if (problem == "regression") {
    KILN_CHECK(is_floating(labels.dtype()), "sequence classification (regression): labels must be floating-point, got ",
               dtype_name(labels.dtype()));
    // One output: (B) or (B, 1) labels against (B) predictions, as transformers squeezes both.
    if (num_labels == 1) return mse_loss(logits.reshape({-1}), labels.reshape({-1}).to(logits.dtype()));
    return mse_loss(logits, labels.to(logits.dtype()));
  }
  if (problem == "single_label_classification") return cross_entropy(logits, labels.reshape({-1}));
  const Shape expected{logits.size(0), num_labels};
  KILN_CHECK(is_floating(labels.dtype()) && labels.sizes() == expected,
             "sequence classification (multi-label): labels must be float 0/1 of shape ", shape_str(expected),
             ", got ", dtype_name(labels.dtype()), " ", shape_str(labels.sizes()));
  return binary_cross_entropy_with_logits(logits, labels.to(logits.dtype()));
}

TokenClassifier::TokenClassifier(int64_t labels) : num_labels(labels) {
  KILN_CHECK(labels >= 1, "token classification: num_labels must be positive, got ", labels);
}

Tensor TokenClassifier::loss(const Tensor& logits, const Tensor& labels) const {
  KILN_CHECK(labels.sizes() == Shape({logits.size(0), logits.size(1)}), "token classification: labels of shape ",
             shape_str(labels.sizes()), " do not match the input ids ", shape_str({logits.size(0), logits.size(1)}));
  return cross_entropy(logits, labels);  // -100: not a first subword, or padding
}

Tensor attention_mask_bias(const Tensor& attention_mask, const Tensor& ids, const Tensor& like) {
  if (!attention_mask.defined()) return Tensor();
  KILN_CHECK(attention_mask.sizes() == ids.sizes(), "attention_mask ", shape_str(attention_mask.sizes()),
             " does not match input ids ", shape_str(ids.sizes()));
  Tensor keep = ne(attention_mask, 0.0).view({ids.size(0), 1, 1, ids.size(1)});
  return where(keep, zeros({}, TensorOptions(like.dtype(), like.device())),
               static_cast<double>(std::numeric_limits<float>::lowest()));
}

std::pair<Tensor, Tensor> labelled_rows(const Tensor& h, const Tensor& labels) {
  KILN_CHECK(labels.sizes() == Shape({h.size(0), h.size(1)}), "masked LM: labels ", shape_str(labels.sizes()),
             " do not match hidden states ", shape_str(h.sizes()));
  std::vector<int64_t> pos, lab;
  const std::vector<int64_t> v = labels.reshape({-1}).to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != -100) {
      pos.push_back(static_cast<int64_t>(i));
      lab.push_back(v[i]);
    }
  const TensorOptions idx(DType::Int64, h.device());
  Tensor rows = index_select(h.reshape({-1, h.size(2)}), 0, tensor_from(pos, {static_cast<int64_t>(pos.size())}, idx));
  return {rows, tensor_from(lab, {static_cast<int64_t>(lab.size())}, idx)};
}

std::pair<Tensor, Tensor> shifted_labelled_rows(const Tensor& h, const Tensor& labels) {
  KILN_CHECK(h.defined() && h.dim() == 3 && labels.sizes() == Shape({h.size(0), h.size(1)}), "causal LM: labels ",
             shape_str(labels.sizes()), " do not match the input ids ",
             h.defined() && h.dim() == 3 ? shape_str({h.size(0), h.size(1)}) : std::string("(hidden states not (B, T, C))"));
  const int64_t T = h.size(1);
  if (T < 2) return labelled_rows(h.narrow(1, 0, 0), labels.narrow(1, 0, 0));  // nothing to predict
  return labelled_rows(h.narrow(1, 0, T - 1), labels.narrow(1, 1, T - 1));
}

CausalLMOutput causal_lm_output(const Tensor& h, const Tensor& labels, const std::function<Tensor(const Tensor&)>& head) {
  if (!labels.defined()) return {Tensor(), head(h)};
  auto [rows, targets] = shifted_labelled_rows(h, labels);
  Tensor logits = head(rows);  // (M, V)
  return {cross_entropy(logits, targets), logits};
}

}  // namespace kiln::nn
