// Llama, Mistral and Qwen2 as model families (nn/model_family.h): modules and
// config in nn/models/llama.h; here the weight-name map, config reader and
// builders, which the three share.
#include "nn/model_family.h"
#include "nn/models/llama.h"

namespace kiln::nn {

namespace {

ConfigFacts read_llama_config(const std::string& text, const std::string& source, std::string& normalized) {
  const LlamaConfig c = LlamaConfig::from_json_string(text, source);
  normalized = c.to_json_string();
  ConfigFacts f;
  f.vocab_size = c.vocab_size;
  f.hidden_size = c.hidden_size;
  f.num_layers = c.num_hidden_layers;
  f.num_heads = c.num_attention_heads;
  f.max_position_embeddings = c.max_position_embeddings;
  f.max_sequence_length = c.max_position_embeddings;
  f.type_vocab_size = 0;  // kiln passes decoders no token types
  f.pad_token_id = c.pad_token_id;
  f.shape_fields = {{"vocab_size", c.vocab_size},
                    {"hidden_size", c.hidden_size},
                    {"intermediate_size", c.intermediate_size},
                    {"num_hidden_layers", c.num_hidden_layers},
                    {"num_attention_heads", c.num_attention_heads},
                    {"num_key_value_heads", c.num_key_value_heads},
                    {"attention_bias", c.attention_bias ? 1 : 0},
                    {"qkv_bias", c.qkv_bias() ? 1 : 0},
                    {"tie_word_embeddings", c.tie_word_embeddings ? 1 : 0}};
  return f;
}

// Names without the "model." prefix (a LlamaModel file; *ForCausalLM's add
// it, and lm_head.weight when untied).
TensorShapes llama_shapes(const ModelConfig& mc) {
  const LlamaConfig c = mc.as<LlamaConfig>();
  const int64_t V = c.vocab_size, C = c.hidden_size, F = c.intermediate_size, D = c.head_dim();
  const int64_t Q = c.num_attention_heads * D, KV = c.num_key_value_heads * D;
  TensorShapes s;
  s.required = {{"embed_tokens.weight", {V, C}}, {"norm.weight", {C}}};
  s.optional = {{"lm_head.weight", {V, C}}};
  s.layer_prefix = "layers.";
  s.layer = {{"input_layernorm.weight", {C}},   {"post_attention_layernorm.weight", {C}},
             {"self_attn.q_proj.weight", {Q, C}}, {"self_attn.k_proj.weight", {KV, C}},
             {"self_attn.v_proj.weight", {KV, C}}, {"self_attn.o_proj.weight", {C, Q}},
             {"mlp.gate_proj.weight", {F, C}},    {"mlp.up_proj.weight", {F, C}},
             {"mlp.down_proj.weight", {C, F}}};
  if (c.qkv_bias())
    s.layer.insert(s.layer.end(),
                   {{"self_attn.q_proj.bias", {Q}}, {"self_attn.k_proj.bias", {KV}}, {"self_attn.v_proj.bias", {KV}}});
  if (c.o_bias()) s.layer.push_back({"self_attn.o_proj.bias", {C}});
  s.num_layers = c.num_hidden_layers;
  s.layers_field = "num_hidden_layers";
  return s;
}

ModelFamily llama_like(const char* model_type, const char* class_prefix) {
  return ModelFamily{
      model_type,
      class_prefix,
      WeightNames{"model.", {"lm_head.weight"}, {}, {"lm_head."}, llama_shapes},
      read_llama_config,
      [](const ModelConfig& c, bool pool) -> std::shared_ptr<EncoderModel> {
        return std::make_shared<LlamaModel>(c.as<LlamaConfig>(), pool);
      },
      nullptr,  // no masked LM
      nullptr,  // transformers' *ForSequenceClassification / *ForTokenClassification: not yet in kiln
      nullptr,
      [](const ModelConfig& c) -> std::shared_ptr<CausalLanguageModel> {
        return std::make_shared<LlamaForCausalLM>(c.as<LlamaConfig>());
      },
      nullptr,  // LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
  };
}

}  // namespace

const ModelFamily& llama_family() {
  static const ModelFamily f = llama_like("llama", "Llama");
  return f;
}

const ModelFamily& mistral_family() {
  static const ModelFamily f = llama_like("mistral", "Mistral");
  return f;
}

const ModelFamily& qwen2_family() {
  static const ModelFamily f = llama_like("qwen2", "Qwen2");
  return f;
}

}  // namespace kiln::nn
