// `kiln merge-adapter --model BASE --adapter DIR --output OUT`: a LoRA
// adapter (PEFT's, or kiln finetune --lora-r's) folded into its base model's
// weights (nn::merge_and_unload, Note [LoRA] in nn/lora.h), written as a
// whole model directory that every kiln command and transformers load
// without the adapter: config.json, model.safetensors and the tokenizer
// files.
#include <filesystem>
#include <iostream>
#include <memory>

#include "core/error.h"
#include "core/file_util.h"
#include "kiln.h"
#include "tools/command.h"

namespace kiln::tools {
namespace {
namespace fs = std::filesystem;

struct MergeCommand {
  std::string model, adapter, output;
};

// The tokenizer files a model directory may hold (Note [Choosing a tokenizer]).
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",  "tokenizer_config.json",   "special_tokens_map.json",
                                           "vocab.txt",       "vocab.json",              "merges.txt",
                                           "spm.model",       "sentencepiece.bpe.model", "tokenizer.model"};

int run_merge(const MergeCommand& c) {
  nn::check_model_dir(c.model, true, "--model");
  KILN_CHECK(nn::is_adapter_dir(c.adapter), "--adapter ", c.adapter, ": no adapter_config.json (not an adapter directory)");
  std::error_code ec;
  for (const std::string& in : {c.model, c.adapter})
    KILN_CHECK(!fs::exists(c.output, ec) || !fs::equivalent(c.output, in, ec), "--output ", c.output,
               " is an input directory (", in, "); choose another --output");
  for (const char* name : {"config.json", "model.safetensors", "model.safetensors.index.json"})
    KILN_CHECK(!fs::exists(fs::path(c.output) / name, ec), "--output ", c.output, " already holds ", name,
               "; choose an empty or new directory (kiln never replaces a model)");
  // The task model: the adapter's config.json names its head and labels (kiln writes one), else a PEFT
  // classifier adapter's head on the base's config, else the base's (nn::adapter_task_config).
  const std::string config_dir = c.adapter;  // in messages
  const ModelConfig config = nn::adapter_task_config(nn::load_model_config(c.model), c.adapter);
  const nn::ModelTask task = nn::task_of(config).value_or(nn::ModelTask::Base);
  const bool classifier = task == nn::ModelTask::SequenceClassification || task == nn::ModelTask::TokenClassification;
  const int64_t labels = classifier ? static_cast<int64_t>(config.id2label(config_dir + "/config.json").size()) : 2;
  KILN_CHECK(!classifier || labels > 0, config_dir, "/config.json names a classifier but no id2label");
  std::shared_ptr<nn::Module> model = nn::AutoModel::from_pretrained(c.model, task, nullptr, labels);
  const std::string prefix =
      task == nn::ModelTask::Base ? nn::weight_names_for(config.model_type()).base_prefix : std::string();
  const nn::LoraConfig lora = nn::load_adapter(*model, c.adapter, prefix);
  const size_t layers = nn::adapted_layers(*model).size();
  nn::merge_and_unload(*model);
  fs::create_directories(c.output);
  config.to_json_file((fs::path(c.output) / "config.json").string());
  nn::save_safetensors((fs::path(c.output) / "model.safetensors").string(), model->state_dict());
  for (const char* name : kTokenizerFiles)
    for (const std::string& dir : {c.adapter, c.model})
      if (fs::is_regular_file(fs::path(dir) / name, ec)) {
        fs::copy_file(fs::path(dir) / name, fs::path(c.output) / name, fs::copy_options::skip_existing);
        break;
      }
  std::cerr << "merged the rank-" << lora.r << " adapter of " << layers << " layers into " << c.model << ": "
            << c.output << " (" << nn::ModelFamily::task_name(task) << ")\n";
  return 0;
}

const Registrar reg("merge-adapter", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("merge-adapter", "Fold a LoRA adapter into its base model: a whole model directory "
                                                  "(PEFT's merge_and_unload)");
  auto c = std::make_shared<MergeCommand>();
  cmd->add_option("--model", c->model, "the base model directory the adapter was trained on")->required();
  cmd->add_option("--adapter", c->adapter, "the adapter directory (adapter_config.json, adapter_model.safetensors)")
      ->required();
  cmd->add_option("--output", c->output, "the merged model's directory (new or empty; never over a model)")->required();
  return [c] { return run_merge(*c); };
});

}  // namespace
}  // namespace kiln::tools
