// GPT-2 forward passes (nn/models/gpt2.h). Shapes: B batch, T new positions,
// S attended positions (cached + new), C n_embd, F n_inner, V vocabulary.
#include "nn/models/gpt2.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "nn/lora.h"
#include "nn/models/bert.h"
#include "ops/fused.h"

namespace kiln::nn {

Conv1D::Conv1D(int64_t out, int64_t in, double init_std) {
  KILN_CHECK(in > 0 && out > 0, "Conv1D: features must be positive, got in=", in, " out=", out);
  register_parameter("weight", weight, randn({in, out}) * init_std);
  register_parameter("bias", bias, zeros({out}));
}

// x W + b as linear_fused's x (W^T)^T + b: the (in, out) weight seen as an
// (out, in) view, so the GEMM reads it in place.
Tensor Conv1D::forward(const Tensor& x) const {
  return with_adapter(linear_fused(x, transpose(weight, 0, 1), bias), x);
}

Tensor Conv1D::forward_gelu(const Tensor& x, const std::string& approximate) const {
  if (!adapter_term_needed(*this)) return linear_gelu(x, transpose(weight, 0, 1), bias, approximate);
  return gelu(forward(x), approximate);
}

GPT2Attention::GPT2Attention(const GPT2Config& c, int64_t idx) : heads(c.n_head), layer_idx(idx) {
  const double s = c.initializer_range;
  // transformers' _init_weights: c_proj gets std / sqrt(2 n_layer) (GPT-2's scaled residual init)
  c_attn = register_module("c_attn", std::make_shared<Conv1D>(3 * c.n_embd, c.n_embd, s));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd, s / std::sqrt(2.0 * c.n_layer)));
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(c.attn_pdrop));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(c.resid_pdrop));
  // The fused attention scales scores by 1/sqrt(d); GPT-2 scales by that when
  // scale_attn_weights, and by 1/(layer_idx + 1) when scale_attn_by_inverse_layer_idx.
  const double d = static_cast<double>(c.n_embd / c.n_head);
  q_scale = (c.scale_attn_weights ? 1.0 : std::sqrt(d)) /
            (c.scale_attn_by_inverse_layer_idx ? static_cast<double>(idx + 1) : 1.0);
}

Tensor GPT2Attention::forward(const Tensor& x, const Tensor& mask_bias, KVCache* cache) const {
  const int64_t C = x.size(2);
  Tensor qkv = c_attn->forward(x);  // (B, T, 3C)
  Tensor y;
  if (!cache && q_scale == 1.0) {
    y = multi_head_attention_qkv(qkv, heads, mask_bias, attn_dropout->p, attn_dropout->is_training(), nullptr,
                                 /*causal=*/true);  // (B, T, C)
  } else {
    const std::vector<Tensor> p = split(qkv, C, 2);  // q, k, v (B, T, C)
    Tensor q = q_scale == 1.0 ? p[0] : mul(p[0], q_scale), k = p[1], v = p[2];
    if (cache) std::tie(k, v) = cache->append(layer_idx, k, v);  // (B, S, C)
    y = multi_head_attention(q, k, v, heads, mask_bias, attn_dropout->p, attn_dropout->is_training(), nullptr,
                             /*causal=*/true);  // (B, T, C)
  }
  return c_proj->forward(y);  // (B, T, C); resid_dropout is applied with the residual (GPT2Block)
}

GPT2MLP::GPT2MLP(const GPT2Config& c) : act(c.act()) {
  const double s = c.initializer_range;
  c_fc = register_module("c_fc", std::make_shared<Conv1D>(c.inner(), c.n_embd, s));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.inner(), s / std::sqrt(2.0 * c.n_layer)));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.resid_pdrop));
}

Tensor GPT2MLP::forward(const Tensor& x) const {
  Tensor mid = linear_act(*c_fc, x, act);  // (B, T, F), Note [Linear and GELU]
  return c_proj->forward(mid);                                                     // (B, T, C)
}

GPT2Block::GPT2Block(const GPT2Config& c, int64_t idx) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon));
  attn = register_module("attn", std::make_shared<GPT2Attention>(c, idx));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon));
  mlp = register_module("mlp", std::make_shared<GPT2MLP>(c));
}

Tensor GPT2Block::forward(const Tensor& x, const Tensor& mask_bias, KVCache* cache) const {
  const Dropout& ad = *attn->resid_dropout;
  const Dropout& md = *mlp->dropout;
  Tensor h = dropout_add(attn->forward(ln_1->forward(x), mask_bias, cache), x, ad.p, ad.is_training());  // (B, T, C)
  return dropout_add(mlp->forward(ln_2->forward(h)), h, md.p, md.is_training());
}

GPT2Model::GPT2Model(const GPT2Config& c, bool /*add_pooling_layer*/)
    : config(c), family_config(ModelConfig::from_json_string(c.to_json_string(), "GPT2Config")) {
  const double s = c.initializer_range;
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, std::nullopt, s));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd, std::nullopt, s));
  drop = register_module("drop", std::make_shared<Dropout>(c.embd_pdrop));
  h = register_module("h", std::make_shared<ModuleList<GPT2Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<GPT2Block>(c, i));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon));
}

Tensor GPT2Model::hidden(const Tensor& ids, const Tensor& attention_mask, KVCache* cache) const {
  KILN_CHECK(ids.defined() && ids.dim() == 2, "GPT2Model: input ids must be (batch, seq), got ",
             ids.defined() ? shape_str(ids.sizes()) : std::string("undefined"));
  const int64_t B = ids.size(0), T = ids.size(1), start = cache ? cache->length() : 0, S = start + T;
  KILN_CHECK(S <= config.n_positions, "GPT2Model: sequence length ", S, " exceeds n_positions ", config.n_positions);
  Tensor mask_bias;
  if (attention_mask.defined()) {
    KILN_CHECK(attention_mask.sizes() == Shape({B, S}), "GPT2Model: attention_mask ", shape_str(attention_mask.sizes()),
               " must be (batch, cached + new positions) = ", shape_str({B, S}));
    mask_bias = attention_mask_bias(attention_mask, attention_mask, wte->weight);  // (B, 1, 1, S)
  }
  const Tensor pos = arange(static_cast<double>(start), static_cast<double>(S), 1.0,
                            TensorOptions(DType::Int64, ids.device()))
                         .reshape({1, T});                                     // (1, T)
  Tensor x = drop->forward(add(wte->forward(ids), wpe->forward(pos)));        // (B, T, C)
  for (const auto& block : h->items)  // Note [Gradient checkpointing in the models]; never with a KV cache
    x = checkpoint_layer(
        *block, [block, cache](const TensorList& in) { return block->forward(in[0], in[1], cache); }, {x, mask_bias},
        cache == nullptr);
  return ln_f->forward(x);
}

EncoderOutputs GPT2Model::forward(const Tensor& ids, const Tensor& attention_mask, const Tensor& /*token_type_ids*/) const {
  return {hidden(ids, attention_mask, nullptr), Tensor()};
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c) {
  transformer = register_module("transformer", std::make_shared<GPT2Model>(c));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false, c.initializer_range));
}

Tensor GPT2LMHeadModel::head(const Tensor& h) const {
  return linear(h, lm_head ? lm_head->weight : transformer->wte->weight);  // (..., V)
}

CausalLMOutput GPT2LMHeadModel::forward(const Tensor& ids, const Tensor& attention_mask, const Tensor& labels,
                                        KVCache* cache) const {
  return causal_lm_output(transformer->hidden(ids, attention_mask, cache), labels,
                          [this](const Tensor& h) { return head(h); });
}

}  // namespace kiln::nn
