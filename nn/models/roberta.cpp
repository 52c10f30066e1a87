// RoBERTa / XLM-R forward passes (nn/models/roberta.h). Shapes: B batch,
// T sequence, C hidden, V vocabulary.
#include "nn/models/roberta.h"

#include "ops/fused.h"

namespace kiln::nn {

namespace {
void check_pad(const BertConfig& c) {
  KILN_CHECK(c.pad_token_id.has_value(), "RobertaModel: config has no pad_token_id (", c.model_type,
             " numbers positions from it; Note [Padding-offset positions])");
  KILN_CHECK(*c.pad_token_id + 1 < c.max_position_embeddings, "RobertaModel: pad_token_id = ", *c.pad_token_id,
             " leaves no position below max_position_embeddings = ", c.max_position_embeddings);
}
}  // namespace

Tensor roberta_position_ids(const Tensor& ids, int64_t pad) {
  Tensor real = to_dtype(ne(ids, static_cast<double>(pad)), DType::Int64);  // (B, T) 1 = not padding
  return add(mul(cumsum(real, 1), real), static_cast<double>(pad));          // (B, T)
}

RobertaEmbeddings::RobertaEmbeddings(const BertConfig& c) : pad((check_pad(c), *c.pad_token_id)) {
  const double s = c.initializer_range;
  word_embeddings = register_module("word_embeddings", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, pad, s));
  position_embeddings = register_module(
      "position_embeddings", std::make_shared<Embedding>(c.max_position_embeddings, c.hidden_size, pad, s));
  token_type_embeddings = register_module("token_type_embeddings",
                                          std::make_shared<Embedding>(c.type_vocab_size, c.hidden_size, std::nullopt, s));
  norm = register_module("LayerNorm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  drop = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

Tensor RobertaEmbeddings::forward(const Tensor& ids, const Tensor& token_type_ids) const {
  KILN_CHECK(ids.defined() && ids.dim() == 2, "RobertaEmbeddings: input ids must be (batch, seq), got ",
             ids.defined() ? shape_str(ids.sizes()) : std::string("undefined"));
  const int64_t T = ids.size(1), P = position_embeddings->weight.size(0);
  KILN_CHECK(T + pad < P, "RobertaEmbeddings: sequence length ", T, " needs positions up to ", T + pad,
             " but max_position_embeddings is ", P, " (Note [Padding-offset positions]: at most ", P - pad - 1,
             " tokens)");
  Tensor types = token_type_ids.defined() ? token_type_ids : zeros(ids.sizes(), TensorOptions(DType::Int64, ids.device()));
  KILN_CHECK(types.sizes() == ids.sizes(), "RobertaEmbeddings: token_type_ids ", shape_str(types.sizes()),
             " do not match input ids ", shape_str(ids.sizes()));
  Tensor h = add(add(word_embeddings->forward(ids), token_type_embeddings->forward(types)),
                 position_embeddings->forward(roberta_position_ids(ids, pad)));  // (B, T, C)
  return dropout_add(norm->forward(h), Tensor(), drop->p, drop->is_training());
}

RobertaModel::RobertaModel(const BertConfig& c, bool add_pooling_layer) : config(c), family_config(c) {
  config.validate();
  embeddings = register_module("embeddings", std::make_shared<RobertaEmbeddings>(c));
  encoder = register_module("encoder", std::make_shared<BertEncoder>(c));
  if (add_pooling_layer) pooler = register_module("pooler", std::make_shared<BertPooler>(c));
}

EncoderOutputs RobertaModel::forward(const Tensor& ids, const Tensor& attention_mask,
                                     const Tensor& token_type_ids) const {
  const Tensor mask_bias = attention_mask_bias(attention_mask, ids, embeddings->word_embeddings->weight);
  Tensor h = encoder->forward(embeddings->forward(ids, token_type_ids), mask_bias);
  return {h, pooler ? pooler->forward(h) : Tensor()};
}

RobertaLMHead::RobertaLMHead(const BertConfig& c, std::shared_ptr<Embedding> tied) : decoder(std::move(tied)) {
  dense = register_module("dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, c.initializer_range));
  layer_norm = register_module("layer_norm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  register_parameter("bias", bias, zeros({c.vocab_size}));
}

Tensor RobertaLMHead::forward(const Tensor& h) const {
  Tensor x = layer_norm->forward(dense->forward_gelu(h));                      // (N, C)
  return linear_fused(x, decoder->weight, bias);                               // (N, V), Note [Bias in the GEMM]
}

RobertaForMaskedLM::RobertaForMaskedLM(const BertConfig& c) {
  roberta = register_module("roberta", std::make_shared<RobertaModel>(c, false));
  lm_head = register_module("lm_head", std::make_shared<RobertaLMHead>(c, roberta->embeddings->word_embeddings));
}

MaskedLMOutput RobertaForMaskedLM::forward(const Tensor& ids, const Tensor& attention_mask,
                                           const Tensor& token_type_ids, const Tensor& labels) const {
  Tensor h = roberta->forward(ids, attention_mask, token_type_ids).last_hidden_state;
  if (!labels.defined()) return {Tensor(), lm_head->forward(h)};
  auto [rows, targets] = labelled_rows(h, labels);
  Tensor logits = lm_head->forward(rows);  // (M, V)
  return {cross_entropy(logits, targets), logits};
}

RobertaClassificationHead::RobertaClassificationHead(const BertConfig& c, int64_t num_labels) {
  dense = register_module("dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, c.initializer_range));
  drop = register_module("dropout", std::make_shared<Dropout>(c.classifier_dropout.value_or(c.hidden_dropout_prob)));
  out_proj = register_module("out_proj", std::make_shared<Linear>(c.hidden_size, num_labels, true, c.initializer_range));
}

Tensor RobertaClassificationHead::forward(const Tensor& h) const {
  Tensor x = drop->forward(select(h, 1, 0));           // (B, C): the first token (<s>)
  x = drop->forward(tanh(dense->forward(x)));          // (B, C)
  return out_proj->forward(x);                         // (B, num_labels)
}

RobertaForSequenceClassification::RobertaForSequenceClassification(const BertConfig& c, int64_t labels)
    : SequenceClassifier(labels, c.problem_type) {
  roberta = register_module("roberta", std::make_shared<RobertaModel>(c, false));
  classifier = register_module("classifier", std::make_shared<RobertaClassificationHead>(c, labels));
}

ClassificationOutput RobertaForSequenceClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                               const Tensor& token_type_ids,
                                                               const Tensor& labels) const {
  Tensor logits = classifier->forward(roberta->forward(ids, attention_mask, token_type_ids).last_hidden_state);
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

RobertaForTokenClassification::RobertaForTokenClassification(const BertConfig& c, int64_t labels)
    : TokenClassifier(labels) {
  roberta = register_module("roberta", std::make_shared<RobertaModel>(c, false));
  drop = register_module("dropout", std::make_shared<Dropout>(c.classifier_dropout.value_or(c.hidden_dropout_prob)));
  classifier = register_module("classifier", std::make_shared<Linear>(c.hidden_size, labels, true, c.initializer_range));
}

ClassificationOutput RobertaForTokenClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                            const Tensor& token_type_ids, const Tensor& labels) const {
  Tensor h = roberta->forward(ids, attention_mask, token_type_ids).last_hidden_state;  // (B, T, C)
  Tensor logits = classifier->forward(drop->forward(h));                               // (B, T, num_labels)
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

}  // namespace kiln::nn
