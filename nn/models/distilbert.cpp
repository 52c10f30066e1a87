// DistilBERT forward passes (nn/models/distilbert.h). Shapes: B batch, T
// sequence, C dim, F hidden_dim, V vocabulary.
#include "nn/models/distilbert.h"

#include <cmath>
#include <vector>

#include "nn/models/bert.h"
#include "ops/fused.h"

namespace kiln::nn {

SinusoidalPositions::SinusoidalPositions(int64_t positions, int64_t dim) {
  // transformers' create_sinusoidal_embeddings: angle pos / 10000^(2 (j / 2) / dim),
  // sin at even j, cos at odd j.
  std::vector<double> w(static_cast<size_t>(positions * dim));
  for (int64_t pos = 0; pos < positions; ++pos)
    for (int64_t j = 0; j < dim; ++j) {
      const double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * static_cast<double>(j / 2) / static_cast<double>(dim));
      w[static_cast<size_t>(pos * dim + j)] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  register_buffer("weight", weight, tensor(w, {positions, dim}));  // float32, as transformers
}

TiedProjection::TiedProjection(std::shared_ptr<Embedding> t, int64_t out, bool with_bias) : tied(std::move(t)) {
  if (with_bias) register_parameter("bias", bias, zeros({out}));
}

Tensor TiedProjection::forward(const Tensor& x) const { return linear_fused(x, tied->weight, bias); }

DistilBertEmbeddings::DistilBertEmbeddings(const DistilBertConfig& c) {
  const double s = c.initializer_range;
  word_embeddings = register_module("word_embeddings", std::make_shared<Embedding>(c.vocab_size, c.dim, c.pad_token_id, s));
  if (c.sinusoidal_pos_embds)
    fixed_positions = register_module("position_embeddings",
                                      std::make_shared<SinusoidalPositions>(c.max_position_embeddings, c.dim));
  else
    position_embeddings = register_module(
        "position_embeddings", std::make_shared<Embedding>(c.max_position_embeddings, c.dim, std::nullopt, s));
  norm = register_module("LayerNorm", std::make_shared<LayerNorm>(c.dim, DistilBertConfig::kLayerNormEps));
  drop = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor DistilBertEmbeddings::forward(const Tensor& ids) const {
  KILN_CHECK(ids.defined() && ids.dim() == 2, "DistilBertEmbeddings: input ids must be (batch, seq), got ",
             ids.defined() ? shape_str(ids.sizes()) : std::string("undefined"));
  const int64_t T = ids.size(1);
  const int64_t P = fixed_positions ? fixed_positions->weight.size(0) : position_embeddings->weight.size(0);
  KILN_CHECK(T <= P, "DistilBertEmbeddings: sequence length ", T, " exceeds max_position_embeddings ", P);
  const Tensor pos = arange(static_cast<double>(T), TensorOptions(DType::Int64, ids.device())).reshape({1, T});  // (1, T)
  const Tensor p = fixed_positions ? fixed_positions->forward(pos) : position_embeddings->forward(pos);  // (1, T, C)
  Tensor h = add(word_embeddings->forward(ids), p);                                                       // (B, T, C)
  return dropout_add(norm->forward(h), Tensor(), drop->p, drop->is_training());
}

DistilBertAttention::DistilBertAttention(const DistilBertConfig& c) : heads(c.n_heads) {
  const double s = c.initializer_range;
  q_lin = register_module("q_lin", std::make_shared<Linear>(c.dim, c.dim, true, s));
  k_lin = register_module("k_lin", std::make_shared<Linear>(c.dim, c.dim, true, s));
  v_lin = register_module("v_lin", std::make_shared<Linear>(c.dim, c.dim, true, s));
  out_lin = register_module("out_lin", std::make_shared<Linear>(c.dim, c.dim, true, s));
  drop = register_module("dropout", std::make_shared<Dropout>(c.attention_dropout));
}

Tensor DistilBertAttention::forward(const Tensor& x, const Tensor& mask_bias) const {
  // One (C, 3C) projection into the fused attention, as BertSelfAttention.
  // transformers masks with masked_fill(finfo.min); the additive bias of the
  // same value gives the same softmax (exp underflows to 0 either way).
  Tensor qkv = fused_projection(x, {q_lin.get(), k_lin.get(), v_lin.get()}, &qkv_weights);  // (B, T, 3C)
  Tensor ctx = multi_head_attention_qkv(qkv, heads, mask_bias, drop->p, drop->is_training());  // (B, T, C)
  return out_lin->forward_fused(ctx);                                                          // (B, T, C)
}

DistilBertFFN::DistilBertFFN(const DistilBertConfig& c) : act(c.act()) {
  lin1 = register_module("lin1", std::make_shared<Linear>(c.dim, c.hidden_dim, true, c.initializer_range));
  lin2 = register_module("lin2", std::make_shared<Linear>(c.hidden_dim, c.dim, true, c.initializer_range));
  drop = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

TransformerBlock::TransformerBlock(const DistilBertConfig& c) {
  attention = register_module("attention", std::make_shared<DistilBertAttention>(c));
  sa_layer_norm = register_module("sa_layer_norm", std::make_shared<LayerNorm>(c.dim, DistilBertConfig::kLayerNormEps));
  ffn = register_module("ffn", std::make_shared<DistilBertFFN>(c));
  output_layer_norm =
      register_module("output_layer_norm", std::make_shared<LayerNorm>(c.dim, DistilBertConfig::kLayerNormEps));
}

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& mask_bias) const {
  Tensor sa = sa_layer_norm->forward(add(attention->forward(x, mask_bias), x));  // (B, T, C), no dropout here
  Tensor mid = linear_act(*ffn->lin1, sa, ffn->act);  // (B, T, F)
  Tensor y = ffn->lin2->forward_fused(mid);            // (B, T, C)
  return output_layer_norm->forward(dropout_add(y, sa, ffn->drop->p, ffn->drop->is_training()));
}

DistilBertTransformer::DistilBertTransformer(const DistilBertConfig& c) {
  layer = register_module("layer", std::make_shared<ModuleList<TransformerBlock>>());
  for (int64_t i = 0; i < c.n_layers; ++i) layer->push_back(std::make_shared<TransformerBlock>(c));
}

Tensor DistilBertTransformer::forward(const Tensor& x, const Tensor& mask_bias) const {
  Tensor h = x;
  for (const auto& l : layer->items)  // Note [Gradient checkpointing in the models]
    h = checkpoint_layer(*l, [l](const TensorList& in) { return l->forward(in[0], in[1]); }, {h, mask_bias});
  return h;
}

DistilBertModel::DistilBertModel(const DistilBertConfig& c, bool /*add_pooling_layer*/)
    : config(c), family_config(ModelConfig::from_json_string(c.to_json_string(), "DistilBertConfig")) {
  embeddings = register_module("embeddings", std::make_shared<DistilBertEmbeddings>(c));
  transformer = register_module("transformer", std::make_shared<DistilBertTransformer>(c));
}

EncoderOutputs DistilBertModel::forward(const Tensor& ids, const Tensor& attention_mask,
                                        const Tensor& /*token_type_ids*/) const {
  const Tensor mask_bias = attention_mask_bias(attention_mask, ids, embeddings->word_embeddings->weight);
  return {transformer->forward(embeddings->forward(ids), mask_bias), Tensor()};
}

DistilBertForMaskedLM::DistilBertForMaskedLM(const DistilBertConfig& c) {
  distilbert = register_module("distilbert", std::make_shared<DistilBertModel>(c));
  vocab_transform = register_module("vocab_transform", std::make_shared<Linear>(c.dim, c.dim, true, c.initializer_range));
  vocab_layer_norm = register_module("vocab_layer_norm", std::make_shared<LayerNorm>(c.dim, DistilBertConfig::kLayerNormEps));
  vocab_projector = register_module(
      "vocab_projector", std::make_shared<TiedProjection>(distilbert->embeddings->word_embeddings, c.vocab_size));
}

Tensor DistilBertForMaskedLM::head(const Tensor& h) const {
  Tensor x = linear_act(*vocab_transform, h, distilbert->config.act());  // (N, C)
  return vocab_projector->forward(vocab_layer_norm->forward(x));                   // (N, V)
}

MaskedLMOutput DistilBertForMaskedLM::forward(const Tensor& ids, const Tensor& attention_mask,
                                              const Tensor& token_type_ids, const Tensor& labels) const {
  Tensor h = distilbert->forward(ids, attention_mask, token_type_ids).last_hidden_state;  // (B, T, C)
  if (!labels.defined()) return {Tensor(), head(h)};
  auto [rows, targets] = labelled_rows(h, labels);
  Tensor logits = head(rows);  // (M, V)
  return {cross_entropy(logits, targets), logits};
}

DistilBertForSequenceClassification::DistilBertForSequenceClassification(const DistilBertConfig& c, int64_t labels)
    : SequenceClassifier(labels, c.problem_type) {
  distilbert = register_module("distilbert", std::make_shared<DistilBertModel>(c));
  pre_classifier = register_module("pre_classifier", std::make_shared<Linear>(c.dim, c.dim, true, c.initializer_range));
  classifier = register_module("classifier", std::make_shared<Linear>(c.dim, labels, true, c.initializer_range));
  drop = register_module("dropout", std::make_shared<Dropout>(c.seq_classif_dropout));
}

ClassificationOutput DistilBertForSequenceClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                                  const Tensor& token_type_ids,
                                                                  const Tensor& labels) const {
  Tensor h = distilbert->forward(ids, attention_mask, token_type_ids).last_hidden_state;  // (B, T, C)
  Tensor x = drop->forward(relu(pre_classifier->forward(select(h, 1, 0))));              // (B, C)
  Tensor logits = classifier->forward(x);                                                 // (B, num_labels)
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

DistilBertForTokenClassification::DistilBertForTokenClassification(const DistilBertConfig& c, int64_t labels)
    : TokenClassifier(labels) {
  distilbert = register_module("distilbert", std::make_shared<DistilBertModel>(c));
  drop = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  classifier = register_module("classifier", std::make_shared<Linear>(c.dim, labels, true, c.initializer_range));
}

ClassificationOutput DistilBertForTokenClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                               const Tensor& token_type_ids,
                                                               const Tensor& labels) const {
  Tensor h = distilbert->forward(ids, attention_mask, token_type_ids).last_hidden_state;  // (B, T, C)
  Tensor logits = classifier->forward(drop->forward(h));                                  // (B, T, num_labels)
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

}  // namespace kiln::nn
