// BERT forward passes. Shapes: B batch, T sequence, C hidden, NH heads,
// HS head size, V vocabulary.
#include "nn/models/bert.h"

#include <cmath>
#include <limits>

#include "ops/decoder_ops.h"
#include "ops/fused.h"

namespace kiln::nn {

Tensor activation(const Tensor& x, HiddenAct act) {
  switch (act) {
    case HiddenAct::Gelu: return gelu(x);
    case HiddenAct::GeluTanh: return gelu(x, "tanh");
    case HiddenAct::Relu: return relu(x);
    case HiddenAct::Silu: return mul(x, sigmoid(x));
    case HiddenAct::Tanh: return tanh(x);
  }
  fail("activation: unknown hidden_act");
}

Tensor gated(const Tensor& a, const Tensor& b, HiddenAct act) {
  switch (act) {
    case HiddenAct::Gelu: return gated_activation(a, b, "gelu");
    case HiddenAct::GeluTanh: return gated_activation(a, b, "gelu_tanh");
    case HiddenAct::Silu: return gated_activation(a, b, "silu");
    case HiddenAct::Relu:
    case HiddenAct::Tanh: return mul(activation(a, act), b);
  }
  fail("gated: unknown hidden_act");
}

BertEmbeddings::BertEmbeddings(const BertConfig& c) {
  const double s = c.initializer_range;
  word_embeddings = register_module("word_embeddings", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, c.pad_token_id, s));
  position_embeddings = register_module("position_embeddings",
                                        std::make_shared<Embedding>(c.max_position_embeddings, c.hidden_size, std::nullopt, s));
  token_type_embeddings = register_module("token_type_embeddings",
                                          std::make_shared<Embedding>(c.type_vocab_size, c.hidden_size, std::nullopt, s));
  norm = register_module("LayerNorm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  drop = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
  register_buffer("position_ids", position_ids, arange(static_cast<double>(c.max_position_embeddings)).reshape({1, -1}));
}

Tensor BertEmbeddings::forward(const Tensor& ids, const Tensor& token_type_ids) const {
  KILN_CHECK(ids.defined() && ids.dim() == 2, "BertEmbeddings: input ids must be (batch, seq), got ",
             ids.defined() ? shape_str(ids.sizes()) : std::string("undefined"));
  const int64_t T = ids.size(1);
  KILN_CHECK(T <= position_embeddings->weight.size(0), "BertEmbeddings: sequence length ", T,
             " exceeds max_position_embeddings ", position_embeddings->weight.size(0));
  Tensor pos = slice(position_ids, 1, 0, T);                                   // (1, T)
  Tensor types = token_type_ids.defined() ? token_type_ids : zeros(ids.sizes(), TensorOptions(DType::Int64, ids.device()));
  KILN_CHECK(types.sizes() == ids.sizes(), "BertEmbeddings: token_type_ids ", shape_str(types.sizes()),
             " do not match input ids ", shape_str(ids.sizes()));
  Tensor h = add(add(word_embeddings->forward(ids), position_embeddings->forward(pos)),
                 token_type_embeddings->forward(types));                      // (B, T, C)
  return dropout_add(norm->forward(h), Tensor(), drop->p, drop->is_training());
}

BertSelfAttention::BertSelfAttention(const BertConfig& c)
    : heads(c.num_attention_heads), head_size(c.hidden_size / c.num_attention_heads) {
  const double s = c.initializer_range;
  query = register_module("query", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, s));
  key = register_module("key", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, s));
  value = register_module("value", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, s));
  drop = register_module("dropout", std::make_shared<Dropout>(c.attention_probs_dropout_prob));
}

Tensor BertSelfAttention::forward(const Tensor& x, const Tensor& mask_bias) const {
  // q, k, v from one (C, 3C) projection (the three weights concatenated per
  // call: one GEMM, and one (B, T, 3C) gradient that backward feeds straight
  // into the fused attention's; Note [Fused attention] in ops/fused.cpp).
  Tensor qkv = fused_projection(x, {query.get(), key.get(), value.get()}, &qkv_weights);  // (B, T, 3C)
  return multi_head_attention_qkv(qkv, heads, mask_bias, drop->p, drop->is_training());  // (B, T, C)
}

BertResidualOutput::BertResidualOutput(int64_t in, const BertConfig& c) {
  dense = register_module("dense", std::make_shared<Linear>(in, c.hidden_size, true, c.initializer_range));
  norm = register_module("LayerNorm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  drop = register_module("dropout", std::make_shared<Dropout>(c.hidden_dropout_prob));
}

Tensor BertResidualOutput::forward(const Tensor& h, const Tensor& residual) const {
  // dense with its bias inside the GEMM, then dropout + residual in one pass
  // (Notes [Bias in the GEMM] and [Dropout and residual], ops/fused.cpp)
  Tensor y = dense->forward_fused(h);
  return norm->forward(dropout_add(y, residual, drop->p, drop->is_training()));
}

BertAttention::BertAttention(const BertConfig& c) {
  self = register_module("self", std::make_shared<BertSelfAttention>(c));
  output = register_module("output", std::make_shared<BertResidualOutput>(c.hidden_size, c));
}

Tensor BertAttention::forward(const Tensor& x, const Tensor& mask_bias) const {
  return output->forward(self->forward(x, mask_bias), x);
}

BertIntermediate::BertIntermediate(const BertConfig& c) : act(c.activation()) {
  dense = register_module("dense", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, true, c.initializer_range));
}

BertLayer::BertLayer(const BertConfig& c) {
  attention = register_module("attention", std::make_shared<BertAttention>(c));
  intermediate = register_module("intermediate", std::make_shared<BertIntermediate>(c));
  output = register_module("output", std::make_shared<BertResidualOutput>(c.intermediate_size, c));
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& mask_bias) const {
  Tensor a = attention->forward(x, mask_bias);
  // intermediate->forward(a), with the bias inside the GEMM (Note [Bias in the
  // GEMM]); GELU too (Note [Linear and GELU]: on the CPU bit-identical to the composition)
  Tensor mid = linear_act(*intermediate->dense, a, intermediate->act);
  return output->forward(mid, a);
}

BertEncoder::BertEncoder(const BertConfig& c) {
  layer = register_module("layer", std::make_shared<ModuleList<BertLayer>>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer->push_back(std::make_shared<BertLayer>(c));
}

Tensor BertEncoder::forward(const Tensor& x, const Tensor& mask_bias) const {
  Tensor h = x;
  for (const auto& l : layer->items)  // Note [Gradient checkpointing in the models]
    h = checkpoint_layer(*l, [l](const TensorList& in) { return l->forward(in[0], in[1]); }, {h, mask_bias});
  return h;
}

BertPooler::BertPooler(const BertConfig& c) {
  dense = register_module("dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, c.initializer_range));
}

Tensor BertPooler::forward(const Tensor& h) const { return tanh(dense->forward(select(h, 1, 0))); }

BertModel::BertModel(const BertConfig& c, bool add_pooling_layer) : config(c), family_config(c) {
  config.validate();
  embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(c));
  encoder = register_module("encoder", std::make_shared<BertEncoder>(c));
  if (add_pooling_layer) pooler = register_module("pooler", std::make_shared<BertPooler>(c));
}

BertOutputs BertModel::forward(const Tensor& ids, const Tensor& attention_mask, const Tensor& token_type_ids) const {
  const Tensor mask_bias = attention_mask_bias(attention_mask, ids, embeddings->word_embeddings->weight);  // (B, 1, 1, T)
  Tensor h = encoder->forward(embeddings->forward(ids, token_type_ids), mask_bias);
  return {h, pooler ? pooler->forward(h) : Tensor()};
}

Tensor mean_pool(const Tensor& hidden, const Tensor& attention_mask) {
  Tensor m = to_dtype(attention_mask, hidden.dtype()).unsqueeze(-1);  // (B, T, 1)
  Tensor total = sum(mul(hidden, m), {1});                              // (B, C)
  Tensor count = clamp(sum(m, {1}), 1e-9, std::nullopt);               // (B, 1)
  return div(total, count);
}

BertPredictionHeadTransform::BertPredictionHeadTransform(const BertConfig& c) : act(c.activation()) {
  dense = register_module("dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, c.initializer_range));
  norm = register_module("LayerNorm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
}

BertLMPredictionHead::BertLMPredictionHead(const BertConfig& c, std::shared_ptr<Embedding> tied)
    : decoder(std::move(tied)) {
  transform = register_module("transform", std::make_shared<BertPredictionHeadTransform>(c));
  register_parameter("bias", bias, zeros({c.vocab_size}));
}

Tensor BertLMPredictionHead::forward(const Tensor& h) const {
  return linear_fused(transform->forward(h), decoder->weight, bias);  // Note [Bias in the GEMM]
}

BertPreTrainingHeads::BertPreTrainingHeads(const BertConfig& c, std::shared_ptr<Embedding> tied, bool next_sentence) {
  predictions = register_module("predictions", std::make_shared<BertLMPredictionHead>(c, std::move(tied)));
  if (next_sentence)
    seq_relationship = register_module("seq_relationship", std::make_shared<Linear>(c.hidden_size, 2, true, c.initializer_range));
}

BertForMaskedLM::BertForMaskedLM(const BertConfig& c) {
  bert = register_module("bert", std::make_shared<BertModel>(c, false));
  cls = register_module("cls", std::make_shared<BertPreTrainingHeads>(c, bert->embeddings->word_embeddings, false));
}

MaskedLMOutput BertForMaskedLM::forward(const Tensor& ids, const Tensor& attention_mask, const Tensor& token_type_ids,
                                        const Tensor& labels) const {
  Tensor h = bert->forward(ids, attention_mask, token_type_ids).last_hidden_state;
  if (!labels.defined()) return {Tensor(), cls->predictions->forward(h)};
  auto [rows, targets] = labelled_rows(h, labels);
  Tensor logits = cls->predictions->forward(rows);  // (M, V)
  return {cross_entropy(logits, targets), logits};
}

BertForPreTraining::BertForPreTraining(const BertConfig& c) {
  bert = register_module("bert", std::make_shared<BertModel>(c, true));
  cls = register_module("cls", std::make_shared<BertPreTrainingHeads>(c, bert->embeddings->word_embeddings, true));
}

PreTrainingOutput BertForPreTraining::forward(const Tensor& ids, const Tensor& attention_mask,
                                              const Tensor& token_type_ids, const Tensor& mlm_labels,
                                              const Tensor& next_sentence_label) const {
  BertOutputs o = bert->forward(ids, attention_mask, token_type_ids);
  PreTrainingOutput out;
  out.nsp_logits = cls->seq_relationship->forward(o.pooler_output);
  if (mlm_labels.defined()) {
    auto [rows, targets] = labelled_rows(o.last_hidden_state, mlm_labels);
    out.mlm_logits = cls->predictions->forward(rows);
    out.mlm_loss = cross_entropy(out.mlm_logits, targets);
    out.loss = out.mlm_loss;
  } else {
    out.mlm_logits = cls->predictions->forward(o.last_hidden_state);
  }
  if (next_sentence_label.defined()) {
    out.nsp_loss = cross_entropy(out.nsp_logits, next_sentence_label.reshape({-1}));
    out.loss = out.loss.defined() ? add(out.loss, out.nsp_loss) : out.nsp_loss;
  }
  return out;
}

BertForSequenceClassification::BertForSequenceClassification(const BertConfig& c, int64_t labels)
    : SequenceClassifier(labels, c.problem_type) {
  bert = register_module("bert", std::make_shared<BertModel>(c, true));
  drop = register_module("dropout", std::make_shared<Dropout>(c.classifier_dropout.value_or(c.hidden_dropout_prob)));
  classifier = register_module("classifier", std::make_shared<Linear>(c.hidden_size, labels, true, c.initializer_range));
}

ClassificationOutput BertForSequenceClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                            const Tensor& token_type_ids, const Tensor& labels) const {
  // pooled (B, C) -> logits (B, num_labels)
  Tensor logits = classifier->forward(drop->forward(bert->forward(ids, attention_mask, token_type_ids).pooler_output));
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

BertForTokenClassification::BertForTokenClassification(const BertConfig& c, int64_t labels) : TokenClassifier(labels) {
  bert = register_module("bert", std::make_shared<BertModel>(c, false));
  drop = register_module("dropout", std::make_shared<Dropout>(c.classifier_dropout.value_or(c.hidden_dropout_prob)));
  classifier = register_module("classifier", std::make_shared<Linear>(c.hidden_size, labels, true, c.initializer_range));
}

ClassificationOutput BertForTokenClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                         const Tensor& token_type_ids, const Tensor& labels) const {
  // hidden (B, T, C) -> logits (B, T, num_labels)
  Tensor logits =
      classifier->forward(drop->forward(bert->forward(ids, attention_mask, token_type_ids).last_hidden_state));
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

}  // namespace kiln::nn
