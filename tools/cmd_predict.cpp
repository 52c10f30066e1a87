// `kiln predict`: a fine-tuned model's predictions on a file.
//
//   token classification (CoNLL input, words in the first column, other
//   columns ignored): text = one line per input token, "word<TAB>label",
//   with a blank line between sentences (the CoNLL layout); jsonl = one
//   object per sentence, {"tokens": [...], "labels": [...]}.
//   sequence classification (TSV/CSV/JSONL input, a label column ignored):
//   text = one line per example: the label; multi-label: the predicted labels
//   joined by commas (empty when none); regression: the score. jsonl =
//   {"label": L, "score": p} (p its softmax probability), {"labels": [...]},
//   or {"score": x}.
// Output goes to stdout or --output FILE, written atomically once every
// prediction is made (an input error leaves nothing half-written), and never
// over an existing file unless --overwrite, nor over the input.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "kiln.h"
#include "nn/safetensors.h"
#include "tools/command.h"
#include "train/classification_task.h"
#include "train/tasks.h"
#include "train/token_classification_task.h"

namespace kiln::tools {
namespace {
namespace fs = std::filesystem;

struct PredictCommand {
  train::TrainingArguments args;
  std::string input, output, format = "text";
  bool overwrite = false;
};

std::string predict_tokens(train::TokenClassificationTask& task, const std::string& input, bool jsonl) {
  const data::ConllDataset words = task.read_words(input);
  const std::vector<std::vector<int32_t>> labels = task.predict(words);
  const std::vector<std::string>& names = task.label_set();
  std::ostringstream out;
  for (size_t s = 0; s < words.sentences.size(); ++s) {
    const std::vector<std::string>& w = words.sentences[s].words;
    if (jsonl) {
      nlohmann::json j = {{"tokens", w}, {"labels", nlohmann::json::array()}};
      for (int32_t id : labels[s]) j["labels"].push_back(names.at(static_cast<size_t>(id)));
      out << j.dump() << "\n";
      continue;
    }
    if (s > 0) out << "\n";
    for (size_t i = 0; i < w.size(); ++i) out << w[i] << "\t" << names.at(static_cast<size_t>(labels[s][i])) << "\n";
  }
  return out.str();
}

std::string predict_sequences(train::ClassificationTask& task, const std::string& input, bool jsonl) {
  const data::LabeledDataset examples = task.read_inputs(input);
  const Tensor logits = task.predict(examples);  // (N, L)
  const int64_t N = logits.size(0), L = logits.size(1);
  const std::vector<std::string>& names = task.label_set();
  const std::string& problem = task.problem_type();
  const std::vector<double> z = logits.to(DType::Float64).to_vector<double>();
  const std::vector<double> p =
      problem == "single_label_classification" ? softmax(logits.to(DType::Float64), 1).to_vector<double>() : z;
  std::ostringstream out;
  out.precision(6);
  for (int64_t i = 0; i < N; ++i) {
    const double* row = z.data() + i * L;
    if (problem == "regression") {
      if (jsonl)
        out << nlohmann::json({{"score", row[0]}}).dump() << "\n";
      else
        out << row[0] << "\n";
    } else if (problem == "multi_label_classification") {
      std::vector<std::string> on;
      for (int64_t j = 0; j < L; ++j)
        if (row[j] > 0) on.push_back(names.at(static_cast<size_t>(j)));
      if (jsonl) {
        out << nlohmann::json({{"labels", on}}).dump() << "\n";
      } else {
        for (size_t k = 0; k < on.size(); ++k) out << (k ? "," : "") << on[k];
        out << "\n";
      }
    } else {
      int64_t best = 0;
      for (int64_t j = 1; j < L; ++j)
        if (row[j] > row[best]) best = j;
      const std::string& label = names.at(static_cast<size_t>(best));
      if (jsonl)
        out << nlohmann::json({{"label", label}, {"score", p[static_cast<size_t>(i * L + best)]}}).dump() << "\n";
      else
        out << label << "\n";
    }
  }
  return out.str();
}

int run_predict(PredictCommand& c) {
  train::TrainingArguments& a = c.args;
  KILN_CHECK(!a.model.empty(), "--model DIR is required (a fine-tuned model)");
  nn::check_model_dir(a.model, true, "--model");
  KILN_CHECK(!c.input.empty(), "--input FILE is required");
  KILN_CHECK(c.format == "text" || c.format == "jsonl", "--format must be text or jsonl, got '", c.format, "'");
  KILN_CHECK(fs::is_regular_file(c.input), "--input ", c.input, " is not a readable file");
  if (!c.output.empty()) {
    std::error_code ec;
    KILN_CHECK(!fs::exists(c.output, ec) || !fs::equivalent(c.output, c.input, ec), "--output ", c.output,
               " is the --input file; choose another --output");
    KILN_CHECK(c.overwrite || !fs::exists(c.output, ec), "--output ", c.output,
               " exists; give --overwrite to replace it");
  }
  const std::string kind = train::task_name_of(a);  // an adapter's head, with --adapter
  KILN_CHECK(kind == "sequence-classification" || kind == "token-classification", a.model,
             " is not a fine-tuned classifier (its config.json's architectures name neither a "
             "*ForSequenceClassification nor a *ForTokenClassification of its family)");
  a.task = kind == "token-classification" ? "token-classification" : a.task;
  const bool jsonl = c.format == "jsonl";
  std::unique_ptr<train::TrainTask> task = train::make_finetune_task(a, std::cerr, /*for_training=*/false);
  std::string text;
  if (auto* t = dynamic_cast<train::TokenClassificationTask*>(task.get()))
    text = predict_tokens(*t, c.input, jsonl);
  else
    text = predict_sequences(dynamic_cast<train::ClassificationTask&>(*task), c.input, jsonl);
  if (c.output.empty()) {
    std::cout << text << std::flush;
  } else {
    write_file_atomic(c.output, text);
    std::cerr << "predictions written to " << c.output << "\n";
  }
  return 0;
}

const Registrar reg_predict("predict", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("predict", "Predict with a fine-tuned model: a label per token (CoNLL input) or "
                                            "per example (TSV, CSV, JSONL)");
  auto c = std::make_shared<PredictCommand>();
  train::TrainingArguments& a = c->args;
  cmd->add_option("--model", a.model, "fine-tuned model directory (kiln finetune's output), or the base model of --adapter")->required();
  cmd->add_option("--adapter", a.adapter, "a LoRA adapter directory (kiln finetune --lora-r's output, or PEFT's) "
                                          "applied to --model");
  cmd->add_option("--input", c->input, "CoNLL file (token classification) or TSV/CSV/JSONL (sequence classification)")
      ->required();
  cmd->add_option("--output", c->output, "write the predictions here (default: stdout); never over an existing file "
                                         "without --overwrite");
  cmd->add_flag("--overwrite", c->overwrite, "replace an existing --output file");
  cmd->add_option("--format", c->format, "text or jsonl")->capture_default_str();
  cmd->add_option("--vocab", a.vocab, "a BERT vocab.txt (default: the model directory's tokenizer)");
  cmd->add_option("--tokenizer", a.tokenizer,
                  "a tokenizer.json or model directory, any family (default: the model directory's tokenizer.json, "
                  "else its vocab.txt or other tokenizer files)");
  cmd->add_flag("--cased", a.cased, "keep case and accents of a BERT WordPiece vocabulary (default: as tokenizer_config.json says)");
  cmd->add_option("--max-seq-length", a.max_seq_length, "tokens per window, [CLS] and [SEP] included")
      ->capture_default_str();
  cmd->add_option("--batch-size", a.batch_size, "examples per batch")->capture_default_str();
  cmd->add_option("--device", a.device, "cpu or cuda[:N]")->capture_default_str();
  add_finetune_data_flags(cmd, a);
  return [c] { return run_predict(*c); };
});

}  // namespace
}  // namespace kiln::tools
