#include "export/bert_export.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "nn/auto.h"
#include "nn/lora.h"
#include "nn/models/bert.h"
#include "ops/ops.h"

namespace kiln::onnx_export {

const std::vector<std::string>& bert_tasks() {
  static const std::vector<std::string> t = {"embed", "masked-lm", "sequence-classification", "token-classification",
                                             "causal-lm"};
  return t;
}

namespace {

const ModelConfig& config_of(const nn::Module& m, const std::string& task) {
  // the task's interface (Note [Task model interfaces]): any family's model
  if (task == "embed") return dynamic_cast<const nn::EncoderModel&>(m).model_config();
  if (task == "masked-lm") return dynamic_cast<const nn::MaskedLanguageModel&>(m).model_config();
  if (task == "sequence-classification") return dynamic_cast<const nn::SequenceClassifier&>(m).model_config();
  if (task == "causal-lm") return dynamic_cast<const nn::CausalLanguageModel&>(m).model_config();
  return dynamic_cast<const nn::TokenClassifier&>(m).model_config();
}

// Trace inputs: valid token ids (never the padding id where attended), rows
// padded with it to different lengths (row 0 full), a second segment in each
// row's second half, so the mask and the token types take part in the trace.
std::vector<Tensor> bert_inputs(const AxisSizes& s, int64_t vocab, int64_t type_vocab, int64_t pad) {
  const int64_t B = s.at("batch"), T = s.at("sequence");
  std::vector<int64_t> ids(static_cast<size_t>(B * T)), mask(ids.size()), types(ids.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = std::max<int64_t>(1, T - b * 2);
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * T + t);
      const bool on = t < len;
      int64_t token = 1 + (b * 131 + t * 17) % (vocab - 1);
      if (token == pad) token = (pad + 1) % vocab;
      ids[i] = on ? token : pad;
      mask[i] = on;
      types[i] = on && type_vocab > 1 && t >= len / 2;
    }
  }
  return {tensor_from(ids, {B, T}), tensor_from(mask, {B, T}), tensor_from(types, {B, T})};
}

}  // namespace

ExportSpec bert_export_spec(const nn::Module& model, const std::string& task, bool normalize) {
  KILN_CHECK(std::find(bert_tasks().begin(), bert_tasks().end(), task) != bert_tasks().end(), "unknown export task '",
             task, "' (embed, masked-lm, sequence-classification, token-classification or causal-lm)");
  KILN_CHECK(!model.is_training(), "ONNX export: put the model in eval() mode first (dropout)");
  const ConfigFacts& c = config_of(model, task).facts();
  ExportSpec spec;
  const std::map<int64_t, std::string> axes{{0, "batch"}, {1, "sequence"}};
  spec.inputs = {{"input_ids", axes}, {"attention_mask", axes}, {"token_type_ids", axes}};
  spec.module = &model;
  const int64_t vocab = c.vocab_size, types = c.type_vocab_size, pad = c.pad_token_id.value_or(0);
  spec.example_inputs = [vocab, types, pad](const AxisSizes& s) { return bert_inputs(s, vocab, types, pad); };
  const nn::Module* m = &model;
  if (task == "embed") {
    spec.outputs = {"last_hidden_state", "sentence_embedding"};
    spec.forward = [m, normalize](const std::vector<Tensor>& in) {
      Tensor h = static_cast<const nn::EncoderModel*>(m)->forward(in[0], in[1], in[2]).last_hidden_state;
      Tensor pooled = nn::mean_pool(h, in[1]);  // as tools/cmd_embed.cpp
      if (normalize) pooled = div(pooled, clamp(sqrt(sum(mul(pooled, pooled), {1}, true)), 1e-12, std::nullopt));
      return std::vector<Tensor>{h, pooled};
    };
  } else {
    spec.outputs = {"logits"};
    spec.forward = [m, task](const std::vector<Tensor>& in) {
      if (task == "masked-lm")
        return std::vector<Tensor>{dynamic_cast<const nn::MaskedLanguageModel*>(m)->forward(in[0], in[1], in[2]).logits};
      if (task == "sequence-classification")
        return std::vector<Tensor>{dynamic_cast<const nn::SequenceClassifier*>(m)->forward(in[0], in[1], in[2]).logits};
      if (task == "causal-lm")  // a decoder's next-token logits at every position; token_type_ids unused
        return std::vector<Tensor>{dynamic_cast<const nn::CausalLanguageModel*>(m)->forward(in[0], in[1]).logits};
      return std::vector<Tensor>{dynamic_cast<const nn::TokenClassifier*>(m)->forward(in[0], in[1], in[2]).logits};
    };
  }
  return spec;
}

std::shared_ptr<nn::Module> load_bert_for_export(const std::string& dir, std::string& task, const std::string& adapter) {
  const std::string config_dir = adapter.empty() ? dir : adapter;  // in messages
  // With an adapter, its task model's (nn::adapter_task_config)
  const ModelConfig config =
      adapter.empty() ? nn::load_model_config(dir) : nn::adapter_task_config(nn::load_model_config(dir), adapter);
  if (task.empty()) {  // a fine-tuned classifier's or a decoder's own head; else the embeddings
    const std::optional<nn::ModelTask> t = nn::task_of(config);
    const std::string own = t ? nn::ModelFamily::task_name(*t) : "";
    task = own == "sequence-classification" || own == "token-classification" || own == "causal-lm" ? own : "embed";
  }
  std::shared_ptr<nn::Module> m;
  if (task == "embed") {
    m = nn::AutoModel::from_pretrained(dir);
  } else if (task == "masked-lm") {
    m = nn::AutoModelForMaskedLM::from_pretrained(dir);
  } else if (task == "causal-lm") {
    m = nn::AutoModelForCausalLM::from_pretrained(dir);
  } else if (task == "sequence-classification" || task == "token-classification") {
    const std::vector<std::string> labels = config.id2label(config_dir + "/config.json");
    KILN_CHECK(!labels.empty(), config_dir, "/config.json has no id2label, so the number of labels is unknown (is it a "
               "fine-tuned classifier? kiln finetune writes one)");
    const int64_t n = static_cast<int64_t>(labels.size());
    if (task == "sequence-classification")
      m = nn::AutoModelForSequenceClassification::from_pretrained(dir, n);
    else
      m = nn::AutoModelForTokenClassification::from_pretrained(dir, n);
  } else {
    fail("unknown export task '", task, "' (embed, masked-lm, sequence-classification, token-classification or causal-lm)");
  }
  if (!adapter.empty()) {
    nn::load_adapter(*m, adapter, task == "embed" ? nn::weight_names_for(config.model_type()).base_prefix : "");
    nn::merge_and_unload(*m);
  }
  m->eval();
  return m;
}

}  // namespace kiln::onnx_export
