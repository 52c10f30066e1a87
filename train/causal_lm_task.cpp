#include "train/causal_lm_task.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "autograd/grad_mode.h"
#include "data/causal_lm.h"
#include "kiln.h"
#include "nn/auto.h"
#include "train/metrics.h"
#include "train/task_loader.h"
#include "train/task_util.h"

namespace kiln::train {
namespace fs = std::filesystem;

MicroBatch causal_lm_forward(const nn::CausalLanguageModel& model, const data::PretrainingBatch& batch) {
  // ids, mask, labels: (B, T); logits: (M, V) at the M positions whose next label is not -100, row-major.
  const Device dev = model_device(model);
  nn::CausalLMOutput o = model.forward(on_device(batch.input_ids, dev), on_device(batch.attention_mask, dev),
                                       on_device(batch.labels, dev));
  MicroBatch mb;
  const int64_t B = batch.labels.size(0), T = batch.labels.size(1);
  const std::vector<int64_t> labels = batch.labels.to_vector<int64_t>();
  const std::vector<int64_t> predicted =
      o.logits.size(0) > 0 ? argmax(o.logits.detach(), 1).to_vector<int64_t>() : std::vector<int64_t>{};
  size_t row = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 1; t < T; ++t) {
      const int64_t label = labels[static_cast<size_t>(b * T + t)];
      if (label == data::kIgnoreIndex) continue;
      KILN_CHECK(row < predicted.size(), "causal_lm_forward: fewer logits rows than predicted positions");
      mb.correct += predicted[row++] == label ? 1 : 0;
    }
  KILN_CHECK(row == predicted.size(), "causal_lm_forward: more logits rows than predicted positions");
  mb.predicted = static_cast<int64_t>(row);
  mb.loss = mb.predicted > 0 ? o.loss : sum(o.logits);  // Note [No masked tokens] (train/mlm_task.cpp)
  mb.tokens = sum(batch.attention_mask).item<int64_t>();
  return mb;
}

CausalLmTask::CausalLmTask(const TrainingArguments& args, std::ostream& out, bool for_training,
                           dist::ProcessGroupPtr group)
    : TextPretrainingTask(args) {
  args.validate();
  manual_seed(args.seed);  // model initialisation and dropout
  KILN_CHECK(!for_training || !args.train_file.empty(),
             "--task causal-lm needs --train-file (text, or a folder from kiln prepare)");
  KILN_CHECK(for_training || !args.validation_file.empty(), "--validation-file is required");
  const fs::path work = work_dir();
  const std::unique_ptr<data::TextTokenizer> tokenizer = load_tokenizer(args.model, args.vocab, args.tokenizer, args.cased);
  tokenizer_files_ = tokenizer->files();

  // Model.
  if (!args.model.empty()) {
    nn::LoadReport report;
    model_ = nn::AutoModelForCausalLM::from_pretrained(args.model, &report);
    apply_adapter(*model_, args, out);
    config_ = model_->model_config();
    if (!report.new_heads.empty())
      out << "note: " << args.model << " has no causal-LM head; " << report.new_heads.size()
          << " tensors start from a fresh initialisation\n";
  } else {
    KILN_CHECK(!args.config.empty() && fs::exists(args.config),
               "--task causal-lm needs --model DIR (a pretrained decoder) or --config (a decoder's config.json)");
    const std::string path = fs::is_directory(args.config) ? args.config + "/config.json" : args.config;
    config_ = ModelConfig::from_json_file(path);
    nn::model_family(config_.model_type()).require(nn::ModelTask::CausalLM, path);
    model_ = nn::AutoModelForCausalLM::from_config(config_);
  }
  move_model_to_device(*model_, args.device);
  check_vocab_matches(config_, tokenizer->vocab_size(), args.model.empty() ? args.config : args.model + "/config.json");
  vocab_size_ = config_.facts().vocab_size;
  config_ = config_.with_field(
      "architectures",
      nlohmann::json::array({nn::model_family(config_.model_type()).architecture(nn::ModelTask::CausalLM)}).dump());
  check_max_seq_length(args.max_seq_length, config_);

  // Blocks (Note [Causal-LM blocks]) and the training loader.
  const size_t block = static_cast<size_t>(args.max_seq_length);
  if (!args.validation_file.empty())
    valid_set_ = std::make_shared<data::CausalLmDataset>(
        open_text_corpus(args.validation_file, "--validation-file", *tokenizer, work / "corpus-validation", out, group),
        block);
  const std::string what = "block of " + std::to_string(block) + " tokens (--max-seq-length)";
  if (for_training)
    set_training_data(std::make_shared<data::CausalLmDataset>(
                          open_text_corpus(args.train_file, "--train-file", *tokenizer, work / "corpus-train", out, group),
                          block),
                      what);
  KILN_CHECK(for_training || valid_set_->size() > 0, "--validation-file ", args.validation_file, " gives no ", what);
  make_train_loader();  // every block has the same length: nothing is padded (pad_id_ is never written)
  if (for_training)
    out << "causal-LM training: " << train_set_->size() << " training and " << num_validation_examples()
        << " validation blocks of " << block << " tokens; model " << config_.model_type() << " L"
        << config_.facts().num_layers << " H" << config_.facts().hidden_size << " A" << config_.facts().num_heads
        << ", vocab " << vocab_size_ << "\n";
}

MicroBatch CausalLmTask::forward_batch(const data::PretrainingBatch& batch) const {
  return causal_lm_forward(*model_, batch);
}

std::map<std::string, double> CausalLmTask::evaluate() {
  std::map<std::string, double> m = evaluate_counts().summary();  // the counts of MLM: over predicted tokens
  if (const auto it = m.find("mlm_accuracy"); it != m.end()) {
    m["accuracy"] = it->second;
    m.erase(it);
  }
  return m;
}

double CausalLmTask::unigram_baseline_loss() const {
  if (!train_set_ || !valid_set_ || valid_set_->size() == 0) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> counts(static_cast<size_t>(vocab_size_), 0.0);
  double total = 0.0;
  Generator unused(0);
  for (size_t i = 0; i < train_set_->size(); ++i)
    for (int32_t id : train_set_->get(i, unused).input_ids) {
      counts[static_cast<size_t>(id)] += 1.0;
      total += 1.0;
    }
  std::vector<double> targets(counts.size(), 0.0);  // how often each token is predicted in validation
  double n = 0.0;
  for (size_t i = 0; i < valid_set_->size(); ++i) {
    const std::vector<int32_t> ids = valid_set_->get(i, unused).input_ids;
    for (size_t t = 1; t < ids.size(); ++t) {
      targets[static_cast<size_t>(ids[t])] += 1.0;
      n += 1.0;
    }
  }
  double best = std::numeric_limits<double>::infinity();
  for (const double alpha : {1.0, 0.5, 0.1, 0.05, 0.01}) {
    const double denominator = total + alpha * static_cast<double>(vocab_size_);
    double loss = 0.0;
    for (size_t v = 0; v < counts.size(); ++v)
      if (targets[v] > 0) loss -= targets[v] * std::log((counts[v] + alpha) / denominator);
    best = std::min(best, loss / n);
  }
  return best;
}

}  // namespace kiln::train
