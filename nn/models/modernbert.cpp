// ModernBERT forward passes (nn/models/modernbert.h). Shapes: B batch, T
// positions, C hidden_size, H heads, D head size, F intermediate_size,
// V vocabulary, N rows given to a head.
#include "nn/models/modernbert.h"

#include <limits>
#include <tuple>

#include "nn/models/bert.h"
#include "nn/rotary.h"
#include "ops/fused.h"

namespace kiln::nn {

namespace {

std::shared_ptr<LayerNorm> norm_of(const ModernBertConfig& c) {
  return std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, c.norm_bias);
}

// (B, 1, 1, T) key bias -> (B, 1, T, T): also the lowest float where
// |t - s| > w (transformers' sliding_window_mask: a masked_fill, so a key
// both padded and outside the window stays at the lowest value, never -inf).
Tensor local_mask(const Tensor& key_bias, int64_t B, int64_t T, int64_t w, const Tensor& like) {
  const double lowest = static_cast<double>(std::numeric_limits<float>::lowest());
  const Tensor pos = arange(static_cast<double>(T), TensorOptions(DType::Int64, like.device()));  // (T)
  const Tensor distance = abs(sub(pos.reshape({T, 1}), pos.reshape({1, T})));                     // (T, T)
  const Tensor window = where(gt(distance, static_cast<double>(w)), lowest,
                              zeros({}, TensorOptions(like.dtype(), like.device())))
                            .reshape({1, 1, T, T});
  if (!key_bias.defined()) return expand(window, {B, 1, T, T});
  return minimum(key_bias, window);  // (B, 1, T, T)
}

}  // namespace

ModernBertEmbeddings::ModernBertEmbeddings(const ModernBertConfig& c) {
  tok_embeddings = register_module(
      "tok_embeddings", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, c.pad_token_id, c.initializer_range));
  norm = register_module("norm", norm_of(c));
  drop = register_module("drop", std::make_shared<Dropout>(c.embedding_dropout));
}

Tensor ModernBertEmbeddings::forward(const Tensor& ids) const {
  return drop->forward(norm->forward(tok_embeddings->forward(ids)));
}

ModernBertAttention::ModernBertAttention(const ModernBertConfig& c, int64_t /*layer_idx*/)
    : heads(c.num_attention_heads), dropout(c.attention_dropout) {
  const int64_t C = c.hidden_size;
  const double s = c.initializer_range;
  Wqkv = register_module("Wqkv", std::make_shared<Linear>(C, 3 * C, c.attention_bias, s));
  Wo = register_module("Wo", std::make_shared<Linear>(C, C, c.attention_bias, s));
  out_drop = register_module("out_drop", std::make_shared<Dropout>(c.attention_dropout));
}

Tensor ModernBertAttention::forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin) const {
  const int64_t C = x.size(2);
  const Tensor qkv = Wqkv->forward_fused(x);  // (B, T, 3C): q | k | v, each (H, D)
  const Tensor q = apply_rotary(qkv.narrow(2, 0, C), cos, sin, heads);
  const Tensor k = apply_rotary(qkv.narrow(2, C, C), cos, sin, heads);
  Tensor y = multi_head_attention(q, k, qkv.narrow(2, 2 * C, C), heads, mask, dropout, is_training());  // (B, T, C)
  return out_drop->forward(Wo->forward_fused(y));
}

ModernBertMLP::ModernBertMLP(const ModernBertConfig& c) : act(c.act()) {
  const double s = c.initializer_range;
  Wi = register_module("Wi", std::make_shared<Linear>(c.hidden_size, 2 * c.intermediate_size, c.mlp_bias, s));
  drop = register_module("drop", std::make_shared<Dropout>(c.mlp_dropout));
  Wo = register_module("Wo", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, c.mlp_bias, s));
}

Tensor ModernBertMLP::forward(const Tensor& x) const {
  const int64_t F = Wo->weight.size(1);
  const Tensor h = Wi->forward_fused(x);                                                  // (B, T, 2F)
  const Tensor glu = gated(h.narrow(-1, 0, F), h.narrow(-1, F, F), act);                    // (B, T, F), GeGLU
  return Wo->forward_fused(drop->forward(glu));                                           // (B, T, C)
}

ModernBertEncoderLayer::ModernBertEncoderLayer(const ModernBertConfig& c, int64_t idx) : global(c.is_global_layer(idx)) {
  if (idx > 0) attn_norm = register_module("attn_norm", norm_of(c));
  attn = register_module("attn", std::make_shared<ModernBertAttention>(c, idx));
  mlp_norm = register_module("mlp_norm", norm_of(c));
  mlp = register_module("mlp", std::make_shared<ModernBertMLP>(c));
}

Tensor ModernBertEncoderLayer::forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin) const {
  const Tensor h = add(x, attn->forward(attn_norm ? attn_norm->forward(x) : x, mask, cos, sin));  // (B, T, C)
  return add(h, mlp->forward(mlp_norm->forward(h)));
}

ModernBertModel::ModernBertModel(const ModernBertConfig& c, bool /*add_pooling_layer*/)
    : config(c), family_config(ModelConfig::from_json_string(c.to_json_string(), "ModernBertConfig")) {
  embeddings = register_module("embeddings", std::make_shared<ModernBertEmbeddings>(c));
  layers = register_module("layers", std::make_shared<ModuleList<ModernBertEncoderLayer>>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<ModernBertEncoderLayer>(c, i));
  final_norm = register_module("final_norm", norm_of(c));
  global_rope = std::make_shared<RopeCache>(c.head_dim(), c.global_rope_theta, c.max_position_embeddings);
  local_rope = std::make_shared<RopeCache>(c.head_dim(), c.rope_theta_of_layer(1), c.max_position_embeddings);
}

EncoderOutputs ModernBertModel::forward(const Tensor& ids, const Tensor& attention_mask,
                                        const Tensor& /*token_type_ids*/) const {
  KILN_CHECK(ids.dim() == 2, "ModernBertModel: input_ids must be (batch, seq), got ", shape_str(ids.sizes()));
  const int64_t B = ids.size(0), T = ids.size(1);
  KILN_CHECK(T <= config.max_position_embeddings, "ModernBertModel: sequence length ", T,
             " exceeds max_position_embeddings ", config.max_position_embeddings);
  const Tensor& like = embeddings->tok_embeddings->weight;
  const Tensor key_bias = attention_mask_bias(attention_mask, ids, like);  // (B, 1, 1, T) or undefined
  const TensorOptions opts(like.dtype(), like.device());
  const auto [cos, sin] = global_rope->tables(0, T, opts);  // (T, D)
  // the local layers' mask and tables, made when a local layer runs
  Tensor window, local_cos, local_sin;
  Tensor x = embeddings->forward(ids);  // (B, T, C)
  for (const auto& layer : layers->items) {
    if (!layer->global && !window.defined()) {
      window = local_mask(key_bias, B, T, config.local_attention / 2, like);
      std::tie(local_cos, local_sin) = local_rope->tables(0, T, opts);
    }
    const TensorList in =
        layer->global ? TensorList{x, key_bias, cos, sin} : TensorList{x, window, local_cos, local_sin};
    // Note [Gradient checkpointing in the models]
    x = checkpoint_layer(
        *layer, [layer](const TensorList& a) { return layer->forward(a[0], a[1], a[2], a[3]); }, in);
  }
  return {final_norm->forward(x), Tensor()};
}

ModernBertPredictionHead::ModernBertPredictionHead(const ModernBertConfig& c) : act(c.classifier_act()) {
  dense = register_module(
      "dense", std::make_shared<Linear>(c.hidden_size, c.hidden_size, c.classifier_bias, c.initializer_range));
  norm = register_module("norm", norm_of(c));
}

Tensor ModernBertPredictionHead::forward(const Tensor& x) const {
  return norm->forward(activation(dense->forward_fused(x), act));
}

ModernBertForMaskedLM::ModernBertForMaskedLM(const ModernBertConfig& c) {
  model = register_module("model", std::make_shared<ModernBertModel>(c));
  head = register_module("head", std::make_shared<ModernBertPredictionHead>(c));
  if (c.tie_word_embeddings)
    tied_decoder = register_module(
        "decoder", std::make_shared<TiedProjection>(model->embeddings->tok_embeddings, c.vocab_size, c.decoder_bias));
  else
    decoder = register_module(
        "decoder", std::make_shared<Linear>(c.hidden_size, c.vocab_size, c.decoder_bias, c.initializer_range));
}

Tensor ModernBertForMaskedLM::logits_of(const Tensor& h) const {
  const Tensor x = head->forward(h);  // (N, C)
  return tied_decoder ? tied_decoder->forward(x) : decoder->forward_fused(x);  // (N, V)
}

MaskedLMOutput ModernBertForMaskedLM::forward(const Tensor& ids, const Tensor& attention_mask,
                                              const Tensor& token_type_ids, const Tensor& labels) const {
  Tensor h = model->forward(ids, attention_mask, token_type_ids).last_hidden_state;  // (B, T, C)
  if (!labels.defined()) return {Tensor(), logits_of(h)};
  auto [rows, targets] = labelled_rows(h, labels);
  Tensor logits = logits_of(rows);  // (M, V)
  return {cross_entropy(logits, targets), logits};
}

ModernBertForSequenceClassification::ModernBertForSequenceClassification(const ModernBertConfig& c, int64_t labels)
    : SequenceClassifier(labels, c.problem_type) {
  model = register_module("model", std::make_shared<ModernBertModel>(c));
  head = register_module("head", std::make_shared<ModernBertPredictionHead>(c));
  drop = register_module("drop", std::make_shared<Dropout>(c.classifier_dropout));
  classifier = register_module("classifier", std::make_shared<Linear>(c.hidden_size, labels, true, c.initializer_range));
}

ClassificationOutput ModernBertForSequenceClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                                  const Tensor& token_type_ids,
                                                                  const Tensor& labels) const {
  Tensor h = model->forward(ids, attention_mask, token_type_ids).last_hidden_state;  // (B, T, C)
  const bool mean = model->config.classifier_pooling == "mean";
  Tensor pooled = mean ? mean_pool(h, attention_mask.defined() ? attention_mask : ones_like(ids)) : select(h, 1, 0);
  Tensor logits = classifier->forward(drop->forward(head->forward(pooled)));  // (B, num_labels)
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

ModernBertForTokenClassification::ModernBertForTokenClassification(const ModernBertConfig& c, int64_t labels)
    : TokenClassifier(labels) {
  model = register_module("model", std::make_shared<ModernBertModel>(c));
  head = register_module("head", std::make_shared<ModernBertPredictionHead>(c));
  drop = register_module("drop", std::make_shared<Dropout>(c.classifier_dropout));
  classifier = register_module("classifier", std::make_shared<Linear>(c.hidden_size, labels, true, c.initializer_range));
}

ClassificationOutput ModernBertForTokenClassification::forward(const Tensor& ids, const Tensor& attention_mask,
                                                               const Tensor& token_type_ids,
                                                               const Tensor& labels) const {
  Tensor h = model->forward(ids, attention_mask, token_type_ids).last_hidden_state;  // (B, T, C)
  Tensor logits = classifier->forward(drop->forward(head->forward(h)));              // (B, T, num_labels)
  return {labels.defined() ? loss(logits, labels) : Tensor(), logits};
}

}  // namespace kiln::nn
