// Pieces shared by the training tasks (train/mlm_task.h,
// train/classification_task.h) and the kiln tool: loading a model
// directory's tokenizer, the tokenizer files written beside checkpoints, a
// view of part of a dataset, and placing the model and its batches on the
// training device (--device).
#pragma once
#include <cstddef>
#include <filesystem>
#include <ostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/data/corpus.h"
#include "kiln/data/dataset.h"
#include "kiln/dist/process_group.h"
#include "kiln/data/tokenizer/text_tokenizer.h"
#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/model_config.h"
#include "kiln/nn/module.h"

namespace kiln::train {

struct TrainingArguments;  // train/trainer.h

// do_lower_case from dir/tokenizer_config.json when present, else true;
// `cased` forces false. A malformed tokenizer_config.json is a kiln::Error.
bool model_lowercase(const std::string& dir, bool cased);

// The tokenizer of a model: vocab_file (a BERT vocab.txt) when given, else
// tokenizer_path's, else model_dir's (Note [Choosing a tokenizer],
// data/tokenizer/pipeline_tokenizer.h: a tokenizer.json, or the older
// files). kiln::Error naming the flags when none gives one.
std::unique_ptr<data::TextTokenizer> load_tokenizer(const std::string& model_dir, const std::string& vocab_file,
                                                    const std::string& tokenizer_path, bool cased);

// The corpus of --train-file / --validation-file (`flag` names it in
// errors): a folder made by `kiln prepare` (checked against the tokenizer),
// or a text file prepared into `prepared_dir` first (with a process group,
// rank 0 prepares and the others wait for it).
std::shared_ptr<const data::Corpus> open_text_corpus(const std::string& file, const char* flag,
                                                     const data::TextTokenizer& tokenizer,
                                                     const std::filesystem::path& prepared_dir, std::ostream& out,
                                                     const dist::ProcessGroupPtr& group);

// kiln::Error unless 2 < max_seq_length <= config.max_position_embeddings.
void check_max_seq_length(int64_t max_seq_length, const ModelConfig& config);

// Moves `model` to `device` ("cpu", "cuda", "cuda:N") with Module::to(),
// unless every parameter and buffer is already there: a CPU model on CPU is
// left untouched (same tensors, same bits). Call it before creating the
// optimizer (which holds the parameter tensors). kiln::Error for a CUDA
// device in a build without CUDA.
void move_model_to_device(nn::Module& model, const std::string& device);

// --adapter (TrainingArguments::adapter): the task model's config
// (nn::adapter_task_config: the adapter's config.json, which kiln finetune
// --lora-r writes with the head's labels, or a PEFT classifier adapter's head
// on --model's config; --model's without --adapter), the directory named in
// messages about it, and the adapter applied to a model built from --model
// (nn::load_adapter; nothing without --adapter).
ModelConfig task_model_config(const TrainingArguments& args);
std::string task_config_dir(const TrainingArguments& args);
// nn::task_of(task_model_config(args)) as the CLI's task names ("" for none).
std::string task_name_of(const TrainingArguments& args);
void apply_adapter(nn::Module& model, const TrainingArguments& args, std::ostream& out);

// The device of a model's first parameter (CPU for a model without any).
Device model_device(const nn::Module& model);

// t on `device`: t itself when undefined or already there, else a copy.
// Tasks move each batch's tensors with it; counts read from a batch use the
// CPU batch itself.
Tensor on_device(const Tensor& t, Device device);

// The label names of a model fine-tuned as `architecture` (e.g.
// "BertForTokenClassification"): its config's id2label in id order; empty
// when the config is not that architecture or has no id2label. A malformed
// id2label is a kiln::Error naming `source`.
std::vector<std::string> finetuned_labels(const ModelConfig& config, const std::string& architecture,
                                          const std::string& source);

// Sets architectures = {architecture} and id2label / label2id from `labels`
// (label i has id i), as transformers writes them.
void set_label_maps(ModelConfig& config, const std::string& architecture, const std::vector<std::string>& labels);
void set_label_maps(BertConfig& config, const std::string& architecture, const std::vector<std::string>& labels);

// An in-memory dataset over `examples`.
template <typename Example>
std::shared_ptr<const data::Dataset<Example>> vector_dataset(std::vector<Example> examples) {
  auto shared = std::make_shared<const std::vector<Example>>(std::move(examples));
  return std::make_shared<data::FunctionDataset<Example>>(shared->size(),
                                                          [shared](size_t i, Generator&) { return (*shared)[i]; });
}

// Examples [begin, end) of another dataset, renumbered from 0.
template <typename Example>
class SubsetDataset final : public data::Dataset<Example> {
 public:
  SubsetDataset(std::shared_ptr<const data::Dataset<Example>> base, size_t begin, size_t end)
      : base_(std::move(base)), begin_(begin), end_(end) {
    KILN_CHECK(base_ != nullptr && begin <= end && end <= base_->size(), "SubsetDataset: range [", begin, ", ",
               end, ") is outside the dataset");
  }
  size_t size() const override { return end_ - begin_; }
  Example get(size_t index, Generator& rng) const override {
    KILN_CHECK(index < size(), "SubsetDataset: index ", index, " out of range");
    return base_->get(begin_ + index, rng);
  }

 private:
  std::shared_ptr<const data::Dataset<Example>> base_;
  size_t begin_, end_;
};

}  // namespace kiln::train
