#include "train/classification_task.h"

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "data/device_staging.h"
#include "kiln.h"
#include "nn/hf_checkpoint.h"
#include "nn/model_size.h"
#include "train/metrics.h"
#include "train/task_util.h"

namespace kiln::train {

namespace {

bool is_classifier(const BertConfig& c) {
  for (const std::string& a : c.architectures)
    if (a == "BertForSequenceClassification") return true;
  return false;
}

// id2label of a fine-tuned classifier's config, in id order; empty when absent.
std::vector<std::string> config_labels(const BertConfig& c, const std::string& source) {
  auto it = c.extra.find("id2label");
  if (it == c.extra.end() || !is_classifier(c)) return {};
  const nlohmann::json j = nlohmann::json::parse(it->second);
  KILN_CHECK(j.is_object(), source, ": id2label must be an object");
  std::vector<std::string> labels(j.size());
  for (auto& [key, value] : j.items()) {
    size_t id = 0;
    try {
      id = std::stoul(key);
    } catch (const std::exception&) {
      fail(source, ": id2label key '", key, "' is not a label id");
    }
    KILN_CHECK(id < labels.size() && value.is_string(), source, ": id2label must map 0..", labels.size() - 1,
               " to label strings");
    labels[id] = value.get<std::string>();
  }
  return labels;
}

data::LabeledFileOptions file_options(const TrainingArguments& a, const std::vector<std::string>& label_set) {
  data::LabeledFileOptions o;
  if (!a.text_column.empty()) o.text_column = a.text_column;
  if (!a.pair_column.empty()) o.pair_column = a.pair_column == "none" ? "" : a.pair_column;
  o.label_column = a.label_column;
  o.label_set = label_set;
  return o;
}

std::shared_ptr<const data::Dataset<data::LabeledEncoding>> as_dataset(std::vector<data::LabeledEncoding> encodings) {
  auto shared = std::make_shared<const std::vector<data::LabeledEncoding>>(std::move(encodings));
  return std::make_shared<data::FunctionDataset<data::LabeledEncoding>>(
      shared->size(), [shared](size_t i, Generator&) { return (*shared)[i]; });
}

}  // namespace

MicroBatch classification_forward(const nn::BertForSequenceClassification& model,
                                  const data::ClassificationBatch& batch, std::vector<int64_t>* predictions) {
  // inputs: (B, T); labels: (B); logits: (B, num_labels)
  // The inputs go to the model's device; the counts below read the CPU batch.
  const data::PaddedBatch& in = batch.inputs;
  const Device dev = model_device(model);
  nn::ClassificationOutput o = model.forward(on_device(in.input_ids, dev), on_device(in.attention_mask, dev),
                                             on_device(in.token_type_ids, dev), on_device(batch.labels, dev));
  MicroBatch mb;
  mb.loss = o.loss;
  const std::vector<int64_t> predicted = argmax(o.logits.detach(), 1).to_vector<int64_t>();
  const std::vector<int64_t> labels = batch.labels.to_vector<int64_t>();
  for (size_t i = 0; i < labels.size(); ++i) mb.correct += predicted[i] == labels[i] ? 1 : 0;
  mb.predicted = static_cast<int64_t>(labels.size());
  mb.tokens = sum(in.attention_mask).item<int64_t>();
  if (predictions) *predictions = predicted;
  return mb;
}

ClassificationTask::ClassificationTask(const TrainingArguments& args, std::ostream& out, bool for_training)
    : args_(args) {
  args.validate();
  KILN_CHECK(!args.model.empty(), "--model DIR is required (a pretrained model directory)");
  KILN_CHECK(!for_training || !args.train_file.empty(), "--train-file is required");
  KILN_CHECK(for_training || !args.validation_file.empty(), "--validation-file is required");
  manual_seed(args.seed);  // classifier initialisation and dropout

  const data::BertTokenizer tokenizer = load_tokenizer(args.model, args.vocab, args.cased);
  tokenizer_files_ = tokenizer_files(tokenizer);
  const int32_t pad = tokenizer.token_to_id("[PAD]");
  KILN_CHECK(pad >= 0, "the vocabulary has no [PAD] token");
  pad_id_ = pad;

  const BertConfig base = nn::load_config(args.model);
  // Ids past the embedding matrix would only fail deep inside the first step.
  check_vocab_matches(base, tokenizer.vocab_size(), args.model + "/config.json");
  label_set_ = config_labels(base, args.model + "/config.json");
  KILN_CHECK(for_training || !label_set_.empty(), args.model,
             " is not a fine-tuned classifier (its config.json has no BertForSequenceClassification id2label)");
  if (for_training) {
    data::LabeledDataset train = data::read_labeled_file(args.train_file, file_options(args, label_set_));
    KILN_CHECK(train.size() > 0, "--train-file ", args.train_file, " holds no example");
    label_set_ = train.label_set;
    KILN_CHECK(label_set_.size() >= 2, "--train-file ", args.train_file, " has ", label_set_.size(),
               " distinct label(s); classification needs at least 2");
    train_set_ = as_dataset(data::encode_labeled(train, tokenizer, static_cast<size_t>(args.max_seq_length)));
    out << "fine-tuning: " << train.size() << " training examples (text column '" << train.text_column << "'"
        << (train.has_pair() ? ", pair column '" + train.pair_column + "'" : std::string()) << "), "
        << label_set_.size() << " labels\n";
  }
  check_max_seq_length(args.max_seq_length, base);
  if (!args.validation_file.empty()) {
    data::LabeledDataset valid = data::read_labeled_file(args.validation_file, file_options(args, label_set_));
    valid_set_ = as_dataset(data::encode_labeled(valid, tokenizer, static_cast<size_t>(args.max_seq_length)));
  }

  nn::LoadReport report;
  model_ = nn::from_pretrained<nn::BertForSequenceClassification>(args.model, &report,
                                                                  static_cast<int64_t>(label_set_.size()));
  if (!report.new_heads.empty() && for_training)
    out << "note: a new classifier head (" << report.new_heads.size() << " tensors) starts from a fresh initialisation\n";
  move_model_to_device(*model_, args.device);
  config_ = model_->bert->config;
  config_.architectures = {"BertForSequenceClassification"};
  nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
  for (size_t i = 0; i < label_set_.size(); ++i) {
    id2label[std::to_string(i)] = label_set_[i];
    label2id[label_set_[i]] = i;
  }
  config_.extra["id2label"] = id2label.dump();
  config_.extra["label2id"] = label2id.dump();

  train_loader_ = make_loader(train_set_ ? train_set_ : valid_set_, true, args.batch_size);
}

ClassificationTask::~ClassificationTask() = default;

std::unique_ptr<ClassificationTask::Loader> ClassificationTask::make_loader(
    std::shared_ptr<const data::Dataset<data::LabeledEncoding>> set, bool shuffle, int64_t batch_size) const {
  std::shared_ptr<const data::Sampler> sampler;
  if (shuffle)
    sampler = training_sampler(args_, set->size());
  else
    sampler = std::make_shared<data::SequentialSampler>(set->size());
  // Batches for the model's device: pinned and copied on a side stream when it
  // is a GPU (Note [Batch staging] in data/device_staging.h).
  const int32_t pad = pad_id_;
  const Device device = model_device(*model_);
  return std::make_unique<Loader>(
      set, std::make_shared<data::BatchSampler>(sampler, batch_size),
      data::pinned_collate<data::LabeledEncoding, data::ClassificationBatch>(
          [pad](std::vector<data::LabeledEncoding>&& ex) { return data::collate_classification(ex, pad); }, device),
      data::DataLoaderOptions{.num_workers = args_.workers, .seed = args_.seed},
      data::device_transfer<data::ClassificationBatch>(device));
}

std::optional<MicroBatch> ClassificationTask::forward_next() {
  std::optional<data::ClassificationBatch> batch = train_loader_->next();
  if (!batch) return std::nullopt;
  return classification_forward(*model_, *batch);
}

std::map<std::string, double> ClassificationTask::evaluate() {
  if (!valid_set_ || valid_set_->size() == 0) return {};
  NoGradGuard no_grad;
  model_->eval();
  auto loader = make_loader(valid_set_, false, args_.eval_batch_size > 0 ? args_.eval_batch_size : args_.batch_size);
  ClassificationMetrics metrics(static_cast<int64_t>(label_set_.size()));
  double loss_sum = 0;
  std::vector<int64_t> predicted;
  while (std::optional<data::ClassificationBatch> b = loader->next()) {
    const MicroBatch mb = classification_forward(*model_, *b, &predicted);
    metrics.add(predicted, b->labels.to_vector<int64_t>());
    loss_sum += mb.loss.item<double>() * static_cast<double>(mb.predicted);
  }
  std::map<std::string, double> m = metrics.summary();
  m["loss"] = loss_sum / static_cast<double>(metrics.count());
  return m;
}

}  // namespace kiln::train
