// Llama-style forward passes (nn/models/llama.h). Shapes: B batch, T new
// positions, S attended positions (cached + new), C hidden_size, H heads,
// K key/value heads, D head size, F intermediate_size, V vocabulary.
#include "nn/models/llama.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "nn/models/bert.h"
#include "nn/rotary.h"
#include "ops/decoder_ops.h"
#include "ops/fused.h"

namespace kiln::nn {

RMSNorm::RMSNorm(int64_t dim, double e) : eps(e) {
  KILN_CHECK(dim > 0, "RMSNorm: dim must be positive, got ", dim);
  register_parameter("weight", weight, ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps); }  // statistics in float32

std::pair<Tensor, Tensor> rotary_tables(const LlamaConfig& c, int64_t start, int64_t T, int64_t total,
                                        TensorOptions opts) {
  const int64_t D = c.head_dim();
  double theta = c.rope_theta;
  double position_scale = 1.0;
  if (c.rope_scaling && c.rope_scaling->type == "linear") position_scale = 1.0 / c.rope_scaling->factor;
  if (c.rope_scaling && c.rope_scaling->type == "dynamic" && total > c.max_position_embeddings) {
    const double f = c.rope_scaling->factor;
    theta *= std::pow(f * static_cast<double>(total) / static_cast<double>(c.max_position_embeddings) - (f - 1.0),
                      static_cast<double>(D) / static_cast<double>(D - 2));
  }
  return rope_tables(D, theta, start, T, opts, position_scale);
}

namespace {

// k or v (B, S, K D) -> (B, S, H D): key/value head j serves query heads
// j * (H / K) ... (j + 1) * (H / K) - 1, as transformers' repeat_kv.
Tensor repeat_kv(const Tensor& x, int64_t kv_heads, int64_t heads) {
  if (kv_heads == heads) return x;
  const int64_t B = x.size(0), S = x.size(1), D = x.size(2) / kv_heads;
  return expand(x.reshape({B, S, kv_heads, 1, D}), {B, S, kv_heads, heads / kv_heads, D}).reshape({B, S, heads * D});
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c, int64_t idx)
    : heads(c.num_attention_heads), kv_heads(c.num_key_value_heads), layer_idx(idx), dropout(c.attention_dropout) {
  const int64_t C = c.hidden_size, D = c.head_dim();
  const double s = c.initializer_range;
  const bool b = c.qkv_bias();
  q_proj = register_module("q_proj", std::make_shared<Linear>(C, heads * D, b, s));
  k_proj = register_module("k_proj", std::make_shared<Linear>(C, kv_heads * D, b, s));
  v_proj = register_module("v_proj", std::make_shared<Linear>(C, kv_heads * D, b, s));
  o_proj = register_module("o_proj", std::make_shared<Linear>(heads * D, C, c.o_bias(), s));
}

Tensor LlamaAttention::forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin,
                               KVCache* cache) const {
  Tensor q = apply_rotary(q_proj->forward_fused(x), cos, sin, heads);     // (B, T, H D)
  Tensor k = apply_rotary(k_proj->forward_fused(x), cos, sin, kv_heads);  // (B, T, K D)
  Tensor v = v_proj->forward_fused(x);                                   // (B, T, K D)
  if (cache) std::tie(k, v) = cache->append(layer_idx, k, v);                                 // (B, S, K D)
  Tensor y = multi_head_attention(q, repeat_kv(k, kv_heads, heads), repeat_kv(v, kv_heads, heads), heads, mask,
                                  dropout, is_training(), nullptr, /*causal=*/true);  // (B, T, H D)
  return o_proj->forward_fused(y);                                                   // (B, T, C)
}

LlamaMLP::LlamaMLP(const LlamaConfig& c) : act(c.act()) {
  const double s = c.initializer_range;
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, false, s));
  up_proj = register_module("up_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, false, s));
  down_proj = register_module("down_proj", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, false, s));
}

Tensor LlamaMLP::forward(const Tensor& x) const {
  // SwiGLU (with silu): the gate's activation times the up projection, one fused op
  return down_proj->forward(gated(gate_proj->forward(x), up_proj->forward(x), act));  // (B, T, C)
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, int64_t idx) {
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c, idx));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(c));
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps));
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, const Tensor& mask, const Tensor& cos, const Tensor& sin,
                                  KVCache* cache) const {
  Tensor h = add(x, self_attn->forward(input_layernorm->forward(x), mask, cos, sin, cache));  // (B, T, C)
  return add(h, mlp->forward(post_attention_layernorm->forward(h)));
}

LlamaModel::LlamaModel(const LlamaConfig& c, bool /*add_pooling_layer*/)
    : config(c), family_config(ModelConfig::from_json_string(c.to_json_string(), "LlamaConfig")) {
  embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size,
                                                                             c.pad_token_id, c.initializer_range));
  layers = register_module("layers", std::make_shared<ModuleList<LlamaDecoderLayer>>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<LlamaDecoderLayer>(c, i));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps));
}

Tensor LlamaModel::hidden(const Tensor& ids, const Tensor& attention_mask, KVCache* cache) const {
  KILN_CHECK(ids.defined() && ids.dim() == 2, "LlamaModel: input ids must be (batch, seq), got ",
             ids.defined() ? shape_str(ids.sizes()) : std::string("undefined"));
  const int64_t B = ids.size(0), T = ids.size(1), start = cache ? cache->length() : 0, S = start + T;
  const Tensor& like = embed_tokens->weight;
  Tensor mask;  // additive: 0 attended, the float's lowest masked (transformers' finfo.min)
  if (attention_mask.defined()) {
    KILN_CHECK(attention_mask.sizes() == Shape({B, S}), "LlamaModel: attention_mask ", shape_str(attention_mask.sizes()),
               " must be (batch, cached + new positions) = ", shape_str({B, S}));
    mask = attention_mask_bias(attention_mask, attention_mask, like);  // (B, 1, 1, S)
  }
  if (config.sliding_window && S > *config.sliding_window) {
    // query t (position start + t) attends keys s > start + t - w (and s <= start + t: the causal flag)
    const double lowest = static_cast<double>(std::numeric_limits<float>::lowest());
    const TensorOptions i64(DType::Int64, ids.device());
    const double first = static_cast<double>(start - *config.sliding_window);
    const Tensor pos = arange(first, first + static_cast<double>(T), 1.0, i64).reshape({T, 1});
    const Tensor keys = arange(static_cast<double>(S), i64).reshape({1, S});
    const Tensor window = where(gt(keys, pos), zeros({}, TensorOptions(like.dtype(), like.device())), lowest)
                              .reshape({1, 1, T, S});  // (1, 1, T, S)
    mask = mask.defined() ? minimum(mask, window) : window;  // transformers masks where either does
  }
  const auto [cos, sin] = rotary_tables(config, start, T, S, TensorOptions(like.dtype(), like.device()));
  Tensor x = embed_tokens->forward(ids);  // (B, T, C)
  for (const auto& layer : layers->items)  // Note [Gradient checkpointing in the models]; never with a KV cache
    x = checkpoint_layer(
        *layer, [layer, cache](const TensorList& in) { return layer->forward(in[0], in[1], in[2], in[3], cache); },
        {x, mask, cos, sin}, cache == nullptr);
  return norm->forward(x);
}

EncoderOutputs LlamaModel::forward(const Tensor& ids, const Tensor& attention_mask, const Tensor& /*token_type_ids*/) const {
  return {hidden(ids, attention_mask, nullptr), Tensor()};
}

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c) {
  model = register_module("model", std::make_shared<LlamaModel>(c));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", std::make_shared<Linear>(c.hidden_size, c.vocab_size, false, c.initializer_range));
}

Tensor LlamaForCausalLM::head(const Tensor& h) const {
  return linear(h, lm_head ? lm_head->weight : model->embed_tokens->weight);  // (..., V)
}

CausalLMOutput LlamaForCausalLM::forward(const Tensor& ids, const Tensor& attention_mask, const Tensor& labels,
                                        KVCache* cache) const {
  return causal_lm_output(model->hidden(ids, attention_mask, cache), labels,
                          [this](const Tensor& h) { return head(h); });
}

}  // namespace kiln::nn
