#include "export/bert_export.h"

#include <algorithm>

#include "core/error.h"
#include "nn/bert.h"
#include "nn/hf_checkpoint.h"
#include "ops/ops.h"
#include "train/tasks.h"

namespace kiln::onnx_export {

const std::vector<std::string>& bert_tasks() {
  static const std::vector<std::string> t = {"embed", "masked-lm", "sequence-classification", "token-classification"};
  return t;
}

namespace {

const BertConfig& config_of(const nn::Module& m, const std::string& task) {
  if (task == "embed") return dynamic_cast<const nn::BertModel&>(m).config;
  if (task == "masked-lm") return dynamic_cast<const nn::BertForMaskedLM&>(m).bert->config;
  if (task == "sequence-classification") return dynamic_cast<const nn::BertForSequenceClassification&>(m).bert->config;
  return dynamic_cast<const nn::BertForTokenClassification&>(m).bert->config;
}

// Trace inputs: valid token ids (never the padding id 0 where attended), rows
// padded to different lengths (row 0 full), a second segment in each row's
// second half, so the mask and the token types take part in the trace.
std::vector<Tensor> bert_inputs(const AxisSizes& s, int64_t vocab, int64_t type_vocab) {
  const int64_t B = s.at("batch"), T = s.at("sequence");
  std::vector<int64_t> ids(static_cast<size_t>(B * T)), mask(ids.size()), types(ids.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = std::max<int64_t>(1, T - b * 2);
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * T + t);
      const bool on = t < len;
      ids[i] = on ? 1 + (b * 131 + t * 17) % (vocab - 1) : 0;
      mask[i] = on;
      types[i] = on && type_vocab > 1 && t >= len / 2;
    }
  }
  return {tensor_from(ids, {B, T}), tensor_from(mask, {B, T}), tensor_from(types, {B, T})};
}

}  // namespace

ExportSpec bert_export_spec(const nn::Module& model, const std::string& task, bool normalize) {
  KILN_CHECK(std::find(bert_tasks().begin(), bert_tasks().end(), task) != bert_tasks().end(), "unknown export task '",
             task, "' (embed, masked-lm, sequence-classification or token-classification)");
  KILN_CHECK(!model.is_training(), "ONNX export: put the model in eval() mode first (dropout)");
  const BertConfig& c = config_of(model, task);
  ExportSpec spec;
  const std::map<int64_t, std::string> axes{{0, "batch"}, {1, "sequence"}};
  spec.inputs = {{"input_ids", axes}, {"attention_mask", axes}, {"token_type_ids", axes}};
  spec.module = &model;
  const int64_t vocab = c.vocab_size, types = c.type_vocab_size;
  spec.example_inputs = [vocab, types](const AxisSizes& s) { return bert_inputs(s, vocab, types); };
  const nn::Module* m = &model;
  if (task == "embed") {
    spec.outputs = {"last_hidden_state", "sentence_embedding"};
    spec.forward = [m, normalize](const std::vector<Tensor>& in) {
      Tensor h = static_cast<const nn::BertModel*>(m)->forward(in[0], in[1], in[2]).last_hidden_state;
      Tensor pooled = nn::mean_pool(h, in[1]);  // as tools/cmd_embed.cpp
      if (normalize) pooled = div(pooled, clamp(sqrt(sum(mul(pooled, pooled), {1}, true)), 1e-12, std::nullopt));
      return std::vector<Tensor>{h, pooled};
    };
  } else {
    spec.outputs = {"logits"};
    spec.forward = [m, task](const std::vector<Tensor>& in) {
      if (task == "masked-lm")
        return std::vector<Tensor>{static_cast<const nn::BertForMaskedLM*>(m)->forward(in[0], in[1], in[2]).logits};
      if (task == "sequence-classification")
        return std::vector<Tensor>{
            static_cast<const nn::BertForSequenceClassification*>(m)->forward(in[0], in[1], in[2]).logits};
      return std::vector<Tensor>{
          static_cast<const nn::BertForTokenClassification*>(m)->forward(in[0], in[1], in[2]).logits};
    };
  }
  return spec;
}

std::shared_ptr<nn::Module> load_bert_for_export(const std::string& dir, std::string& task) {
  const BertConfig config = nn::load_config(dir);
  if (task.empty()) task = train::finetuned_task_of(dir);
  if (task.empty()) task = "embed";
  std::shared_ptr<nn::Module> m;
  if (task == "embed") {
    m = nn::from_pretrained<nn::BertModel>(dir);
  } else if (task == "masked-lm") {
    m = nn::from_pretrained<nn::BertForMaskedLM>(dir);
  } else if (task == "sequence-classification" || task == "token-classification") {
    const std::vector<std::string> labels = config.id2label(dir + "/config.json");
    KILN_CHECK(!labels.empty(), dir, "/config.json has no id2label, so the number of labels is unknown (is it a "
               "fine-tuned classifier? kiln finetune writes one)");
    const int64_t n = static_cast<int64_t>(labels.size());
    if (task == "sequence-classification")
      m = nn::from_pretrained<nn::BertForSequenceClassification>(dir, nullptr, n);
    else
      m = nn::from_pretrained<nn::BertForTokenClassification>(dir, nullptr, n);
  } else {
    fail("unknown export task '", task, "' (embed, masked-lm, sequence-classification or token-classification)");
  }
  m->eval();
  return m;
}

}  // namespace kiln::onnx_export
