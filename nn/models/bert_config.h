// BertConfig: the hyper-parameters of a BERT-schema encoder, read from and
// written to a Hugging Face config.json. The families that share BERT's
// config schema (bert_schema_model_types(): "bert", "roberta",
// "xlm-roberta") read into it; `model_type` says which one, and the family's
// defaults apply (RoBERTa and XLM-R: pad_token_id 1, architectures
// ["RobertaModel"] / ["XLMRobertaModel"]). Which modules a model_type builds
// is the Auto layer's (nn/auto.h).
//
// Reading: the structural fields vocab_size, hidden_size, num_hidden_layers,
// num_attention_heads, intermediate_size, max_position_embeddings and
// type_vocab_size are required; every other field takes the Hugging Face
// BertConfig default when absent. Keys kiln does not model ("_name_or_path",
// "transformers_version", "id2label", ...) are kept verbatim in `extra` and
// written back. A config that is not valid (see validate()) is rejected, and
// so is one whose model would not fit in memory (Note [Model size limit],
// nn/model_size.h). The JSON text is parsed with the bounds of Note [Bounded
// JSON] (core/json_util.h: at most kMaxJsonBytes, nested at most 64 deep, no
// duplicate keys); from_json_file reads only a regular file (Note [Bounded input]).
//
// Invariants after from_json_*() / preset() / validate():
//   - every size is in [1, 2^31 - 1] and hidden_size % num_attention_heads == 0;
//   - dropout probabilities are in [0, 1); layer_norm_eps > 0 and finite;
//     initializer_range > 0 and finite;
//   - hidden_act is one of known_activations(); position_embedding_type is "absolute";
//   - pad_token_id, when set, is in [0, vocab_size);
//   - extra["id2label"], when present, is what id2label() accepts.
// Every error is a kiln::Error naming the source (file) and the field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// The activation function a hidden_act string names.
enum class HiddenAct {
  Gelu,      // "gelu", "gelu_python": x * Phi(x) with the exact erf
  GeluTanh,  // "gelu_new", "gelu_pytorch_tanh", "gelu_fast": the tanh approximation
  Relu,      // "relu"
  Silu,      // "silu", "swish"
  Tanh,      // "tanh"
};

struct BertConfig {
  std::string model_type = "bert";  // one of bert_schema_model_types()
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  std::optional<int64_t> pad_token_id = 0;     // JSON null -> nullopt
  std::optional<double> classifier_dropout;    // nullopt: use hidden_dropout_prob
  std::string position_embedding_type = "absolute";
  // How BertForSequenceClassification computes its loss, as transformers'
  // config.problem_type: "regression", "single_label_classification" or
  // "multi_label_classification"; nullopt (absent or null): decided from
  // num_labels and the labels' dtype (nn/bert.h).
  std::optional<std::string> problem_type;
  std::vector<std::string> architectures = {"BertModel"};
  // Other top-level keys of the file, each as its JSON text, written back unchanged.
  std::map<std::string, std::string> extra;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The most tokens a sequence may have: max_position_embeddings, less
  // pad_token_id + 1 for the families whose positions start after the padding
  // id (RoBERTa, XLM-R: 512 of 514; Note [Padding-offset positions]).
  int64_t max_sequence_length() const;
  HiddenAct activation() const;  // throws for an unknown hidden_act
  static const std::vector<std::string>& known_activations();

  // Throws kiln::Error "<source>: <field> ..." for the first invalid field.
  void validate(const std::string& source = "BertConfig") const;

  // The label names of extra["id2label"] in id order; empty when absent. The
  // keys must be the canonical decimal ids "0", "1", ..., n - 1, each once
  // (no sign, spaces or leading zeros: "00" and " 1" are errors, not aliases
  // of 0 and 1), the values strings; anything else is a kiln::Error.
  std::vector<std::string> id2label(const std::string& source = "BertConfig") const;

  static BertConfig from_json_string(const std::string& text,
                                     const std::string& source_name = "config.json");
  static BertConfig from_json_file(const std::string& path);
  // Hugging Face style: keys sorted, 2-space indent, the model_type, trailing newline.
  std::string to_json_string() const;
  void to_json_file(const std::string& path) const;  // atomic (temp file + rename)

  // "bert-tiny" (L2 H128 A2 F512), "bert-mini" (L4 H256 A4 F1024),
  // "bert-small" (L4 H512 A8 F2048), "bert-base" (L12 H768 A12 F3072); all
  // with vocab 30522, 512 positions, 2 token types and HF defaults otherwise.
  static BertConfig preset(const std::string& name);
  // The model_type values whose config.json this struct reads.
  static const std::vector<std::string>& bert_schema_model_types();
  static std::vector<std::string> preset_names();

  bool operator==(const BertConfig&) const = default;
};

}  // namespace kiln
