// ONNX export of the BERT models (what `kiln export` runs; docs/onnx.md):
// inputs input_ids, attention_mask, token_type_ids (int64, dynamic axes
// "batch" and "sequence"), outputs by task.
#pragma once

#include <memory>
#include <string>

#include "kiln/export/onnx.h"
#include "kiln/nn/module.h"

namespace kiln::onnx_export {

// The tasks and what they output:
//   embed                    BertModel: last_hidden_state (B, T, C) and
//                            sentence_embedding (B, C), the mean over attended
//                            tokens that `kiln embed` prints (L2-normalised
//                            when normalize, as `kiln embed --normalize`)
//   masked-lm                BertForMaskedLM: logits (B, T, V)
//   sequence-classification  BertForSequenceClassification: logits (B, L)
//   token-classification     BertForTokenClassification: logits (B, T, L)
//   causal-lm                a decoder (GPT2LMHeadModel): logits (B, T, V),
//                            no KV cache (token_type_ids unused)
const std::vector<std::string>& bert_tasks();

// The spec for `model` (of the task's class, in eval mode; kept alive by the
// caller while the spec is used).
ExportSpec bert_export_spec(const nn::Module& model, const std::string& task, bool normalize = false);

// Loads a model directory (config.json, model.safetensors) for `task` ("":
// the classifier or causal-LM head config.json names, else embed), in eval mode.
// With `adapter` (a LoRA adapter directory, nn/lora.h): its config.json,
// when it has one, names the task and labels; the adapter is loaded onto the
// model from `dir` and merged into its weights (nn::merge_and_unload), so
// the graph is the plain model's.
std::shared_ptr<nn::Module> load_bert_for_export(const std::string& dir, std::string& task,
                                                 const std::string& adapter = "");

}  // namespace kiln::onnx_export
