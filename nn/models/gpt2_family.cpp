// GPT-2 as a model family (nn/model_family.h): modules and config in
// nn/models/gpt2.h; here its weight-name map, config reader and builders.
#include "nn/model_family.h"
#include "nn/models/gpt2.h"

namespace kiln::nn {

namespace {

ConfigFacts read_gpt2_config(const std::string& text, const std::string& source, std::string& normalized) {
  const GPT2Config c = GPT2Config::from_json_string(text, source);
  normalized = c.to_json_string();
  ConfigFacts f;
  f.vocab_size = c.vocab_size;
  f.hidden_size = c.n_embd;
  f.num_layers = c.n_layer;
  f.num_heads = c.n_head;
  f.max_position_embeddings = c.n_positions;
  f.max_sequence_length = c.n_positions;
  f.type_vocab_size = 0;  // kiln passes decoders no token types
  f.pad_token_id = c.pad_token_id;
  f.shape_fields = {{"vocab_size", c.vocab_size}, {"n_embd", c.n_embd},           {"n_layer", c.n_layer},
                    {"n_head", c.n_head},         {"n_inner", c.inner()},         {"n_positions", c.n_positions},
                    {"tie_word_embeddings", c.tie_word_embeddings ? 1 : 0}};
  return f;
}

// Transformers' names without the "transformer." prefix (a GPT2Model file;
// GPT2LMHeadModel's add it, and lm_head.weight when untied). Layers' causal
// mask buffers (h.N.attn.bias, h.N.attn.masked_bias) of older files are not
// weights: the loader reports them as ignored.
TensorShapes gpt2_shapes(const ModelConfig& mc) {
  const GPT2Config c = mc.as<GPT2Config>();
  const int64_t V = c.vocab_size, C = c.n_embd, F = c.inner();
  TensorShapes s;
  s.required = {
      {"wte.weight", {V, C}},
      {"wpe.weight", {c.n_positions, C}},
      {"ln_f.weight", {C}},
      {"ln_f.bias", {C}},
  };
  s.optional = {{"lm_head.weight", {V, C}}};
  s.layer_prefix = "h.";
  s.layer = {{"ln_1.weight", {C}},         {"ln_1.bias", {C}},         {"attn.c_attn.weight", {C, 3 * C}},
             {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}},
             {"ln_2.weight", {C}},         {"ln_2.bias", {C}},         {"mlp.c_fc.weight", {C, F}},
             {"mlp.c_fc.bias", {F}},       {"mlp.c_proj.weight", {F, C}}, {"mlp.c_proj.bias", {C}}};
  s.num_layers = c.n_layer;
  s.layers_field = "n_layer";
  return s;
}

}  // namespace

const ModelFamily& gpt2_family() {
  static const ModelFamily f{
      "gpt2",
      "GPT2",
      WeightNames{"transformer.", {"lm_head.weight"}, {}, {"lm_head."}, gpt2_shapes},
      read_gpt2_config,
      [](const ModelConfig& c, bool pool) -> std::shared_ptr<EncoderModel> {
        return std::make_shared<GPT2Model>(c.as<GPT2Config>(), pool);
      },
      nullptr,  // no masked LM
      nullptr,  // transformers' GPT2ForSequenceClassification / TokenClassification: not yet in kiln
      nullptr,
      [](const ModelConfig& c) -> std::shared_ptr<CausalLanguageModel> {
        return std::make_shared<GPT2LMHeadModel>(c.as<GPT2Config>());
      },
      "GPT2LMHeadModel",
  };
  return f;
}

}  // namespace kiln::nn
