#include "train/task_util.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/tokenizer/bert_tokenizer.h"
#include "data/tokenizer/pipeline_tokenizer.h"
#include "data/tokenizer/tokenizer_config.h"
#include "nn/lora.h"
#include "nn/auto.h"
#include "ops/ops.h"
#include "train/trainer.h"

namespace kiln::train {
namespace fs = std::filesystem;

bool model_lowercase(const std::string& dir, bool cased) {
  // tokenizer_config.json read bounded (Note [Bounded input]); no file: lower-case.
  return !cased && data::model_dir_lowercase(dir);
}

std::unique_ptr<data::TextTokenizer> load_tokenizer(const std::string& model_dir, const std::string& vocab_file,
                                                    const std::string& tokenizer_path, bool cased) {
  KILN_CHECK(vocab_file.empty() || tokenizer_path.empty(), "give --vocab (a BERT vocab.txt) or --tokenizer, not both");
  if (!vocab_file.empty())
    return std::make_unique<data::BertTokenizer>(
        data::BertTokenizer::from_vocab_file(vocab_file, model_lowercase(model_dir, cased)));
  if (!tokenizer_path.empty()) return data::open_text_tokenizer(tokenizer_path, cased);
  KILN_CHECK(!model_dir.empty(), "no tokenizer: give --tokenizer (a tokenizer.json or model directory), --vocab "
                                 "(a BERT vocab.txt), or --model DIR holding one");
  return data::open_text_tokenizer(model_dir, cased);
}

void check_max_seq_length(int64_t max_seq_length, const ModelConfig& config) {
  const ConfigFacts& f = config.facts();
  KILN_CHECK(max_seq_length > 2, "--max-seq-length must be > 2, got ", max_seq_length);
  KILN_CHECK(max_seq_length <= f.max_sequence_length, "--max-seq-length ", max_seq_length, " exceeds the ",
             f.max_sequence_length, " tokens the model's max_position_embeddings (", f.max_position_embeddings,
             ") allow");
}

void move_model_to_device(nn::Module& model, const std::string& device) {
  const Device d = Device::parse(device);
  KILN_CHECK(d.is_cpu() || cuda_built(), "--device ", device, ": ", cuda_unavailable_reason());
  bool there = true;
  model.for_each_tensor([&](const std::string&, Tensor& t, bool) { there = there && t.device() == d; });
  if (!there) model.to(d);
}

std::vector<std::string> finetuned_labels(const ModelConfig& config, const std::string& architecture,
                                          const std::string& source) {
  for (const std::string& a : config.architectures())
    if (a == architecture) return config.id2label(source);
  return {};
}

void set_label_maps(ModelConfig& config, const std::string& architecture, const std::vector<std::string>& labels) {
  nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
  for (size_t i = 0; i < labels.size(); ++i) {
    id2label[std::to_string(i)] = labels[i];
    label2id[labels[i]] = i;
  }
  config = config.with_field("architectures", nlohmann::json::array({architecture}).dump())
               .with_field("id2label", id2label.dump())
               .with_field("label2id", label2id.dump());
}

void set_label_maps(BertConfig& config, const std::string& architecture, const std::vector<std::string>& labels) {
  ModelConfig c(config);
  set_label_maps(c, architecture, labels);
  config = c.as<BertConfig>();
}

Device model_device(const nn::Module& model) {
  for (const auto& [name, p] : model.named_parameters()) return p.device();
  return kCPU;
}

Tensor on_device(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  return to_device(t, device);
}

std::shared_ptr<const data::Corpus> open_text_corpus(const std::string& file, const char* flag,
                                                     const data::TextTokenizer& tokenizer, const fs::path& prepared_dir,
                                                     std::ostream& out, const dist::ProcessGroupPtr& group) {
  if (fs::is_directory(file)) {
    KILN_CHECK(fs::exists(fs::path(file) / "index.json"), flag, " ", file,
               " is a folder without index.json (prepare it with `kiln prepare`, or give a text file)");
    auto corpus = data::TokenCorpus::open(file);
    corpus->check_tokenizer(tokenizer);
    return corpus;
  }
  KILN_CHECK(fs::is_regular_file(file), flag, " ", file, " not found");
  if (!group || group->rank() == 0) {
    out << "preparing " << file << " into " << prepared_dir.string() << "\n";
    const data::PrepareStats s = data::prepare_corpus({file}, tokenizer, prepared_dir.string());
    out << "  " << s.documents << " documents, " << s.sentences << " sentences, " << s.tokens << " tokens\n";
  }
  if (group) {  // the other ranks open what rank 0 wrote
    // Preparing a large corpus may take longer than the collective timeout:
    // the others wait for it without one (a rank 0 that dies ends the job through mpirun).
    const double timeout = group->timeout_seconds();
    group->set_timeout_seconds(std::max(timeout, 7 * 24 * 3600.0));
    group->barrier();
    group->set_timeout_seconds(timeout);
  }
  return data::TokenCorpus::open(prepared_dir.string());
}

}  // namespace kiln::train

namespace kiln::train {

std::string task_config_dir(const TrainingArguments& args) {
  if (args.adapter.empty()) return args.model;
  std::error_code ec;
  KILN_CHECK(fs::is_directory(args.adapter, ec), "--adapter ", args.adapter, ": no such directory");
  KILN_CHECK(nn::is_adapter_dir(args.adapter), "--adapter ", args.adapter,
             ": no adapter_config.json (not a LoRA adapter directory)");
  (void)nn::LoraConfig::from_file((fs::path(args.adapter) / "adapter_config.json").string());  // its errors first
  return args.adapter;
}

ModelConfig task_model_config(const TrainingArguments& args) {
  const ModelConfig base = nn::load_model_config(args.model);
  return args.adapter.empty() ? base : nn::adapter_task_config(base, task_config_dir(args));
}

std::string task_name_of(const TrainingArguments& args) {
  (void)nn::model_type_of(args.model);  // an unsupported family is that error
  const std::optional<nn::ModelTask> t = nn::task_of(task_model_config(args));
  return t ? nn::ModelFamily::task_name(*t) : "";
}

void apply_adapter(nn::Module& model, const TrainingArguments& args, std::ostream& out) {
  if (args.adapter.empty()) return;
  const nn::LoraConfig c = nn::load_adapter(model, args.adapter);
  out << "adapter: " << args.adapter << " (LoRA rank " << c.r << " on " << nn::adapted_layers(model).size()
      << " layers)\n";
}

}  // namespace kiln::train
