#include "train/classification_task.h"

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "kiln.h"
#include "nn/auto.h"
#include "nn/hf_checkpoint.h"
#include "nn/model_size.h"
#include "train/metrics.h"
#include "train/task_loader.h"
#include "train/task_metrics.h"
#include "train/task_util.h"

namespace kiln::train {

namespace {

// The label kind a problem type reads its labels as.
data::LabelKind kind_of(const std::string& problem_type) {
  if (problem_type == "regression") return data::LabelKind::Float;
  if (problem_type == "multi_label_classification") return data::LabelKind::MultiLabel;
  return data::LabelKind::Class;
}

std::string problem_of(data::LabelKind kind) {
  if (kind == data::LabelKind::Float) return "regression";
  if (kind == data::LabelKind::MultiLabel) return "multi_label_classification";
  return "single_label_classification";
}

// The problem type the flags ask for, or "" when they leave it to the data.
std::string requested_problem(const TrainingArguments& a) {
  if (a.task == "regression") return "regression";
  if (a.multi_label) return "multi_label_classification";
  return "";
}

}  // namespace

MicroBatch classification_forward(const nn::SequenceClassifier& model,
                                  const data::ClassificationBatch& batch, Tensor* logits_out) {
  // inputs: (B, T); labels: (B) int64 / (B) float (regression) / (B, L) float
  // (multi-label); logits: (B, L). The inputs go to the model's device; the
  // counts below read the CPU batch.
  const data::PaddedBatch& in = batch.inputs;
  const Device dev = model_device(model);
  nn::ClassificationOutput o = model.forward(on_device(in.input_ids, dev), on_device(in.attention_mask, dev),
                                             on_device(in.token_type_ids, dev), on_device(batch.labels, dev));
  MicroBatch mb;
  mb.loss = o.loss;
  mb.tokens = sum(in.attention_mask).item<int64_t>();
  const Tensor logits = to_device(o.logits.detach(), kCPU);
  const std::string problem = model.problem_type_for(batch.labels);
  const int64_t B = logits.size(0), L = logits.size(1);
  if (problem == "single_label_classification") {
    const std::vector<int64_t> predicted = argmax(logits, 1).to_vector<int64_t>();
    const std::vector<int64_t> labels = batch.labels.to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) mb.correct += predicted[i] == labels[i] ? 1 : 0;
    mb.predicted = B;
  } else if (problem == "multi_label_classification") {
    const std::vector<float> z = logits.to(DType::Float32).to_vector<float>();
    const std::vector<float> y = batch.labels.to(DType::Float32).to_vector<float>();
    for (int64_t i = 0; i < B; ++i) {
      bool all = true;
      for (int64_t j = 0; j < L; ++j) all = all && ((z[static_cast<size_t>(i * L + j)] > 0) == (y[static_cast<size_t>(i * L + j)] > 0.5f));
      mb.correct += all ? 1 : 0;
    }
    mb.predicted = B;
  }  // regression: no accuracy
  if (logits_out) *logits_out = logits;
  return mb;
}

ClassificationTask::ClassificationTask(const TrainingArguments& args, std::ostream& out, bool for_training)
    : args_(args) {
  args.validate();
  KILN_CHECK(args.task != "token-classification", "ClassificationTask: --task token-classification is "
             "TokenClassificationTask's (train/token_classification_task.h)");
  KILN_CHECK(!args.model.empty(), "--model DIR is required (a pretrained model directory)");
  KILN_CHECK(!for_training || !args.train_file.empty(), "--train-file is required");
  manual_seed(args.seed);  // classifier initialisation and dropout

  tokenizer_ = load_tokenizer(args.model, args.vocab, args.tokenizer, args.cased);
  tokenizer_files_ = tokenizer_->files();
  const int32_t pad = tokenizer_->pad_id();
  KILN_CHECK(pad >= 0, "the tokenizer has no pad token ([PAD], <pad>, or tokenizer_config.json's pad_token)");
  pad_id_ = pad;

  const std::string config_dir = task_config_dir(args);  // the adapter's, with --adapter
  const ModelConfig base = task_model_config(args);
  const std::string config_path = config_dir + "/config.json";
  // Ids past the embedding matrix would only fail deep inside the first step.
  check_vocab_matches(base, tokenizer_->vocab_size(), config_path);
  check_max_seq_length(args.max_seq_length, base);
  // the family's class: BertForSequenceClassification, RobertaForSequenceClassification, ...
  const std::string architecture =
      nn::model_family(base.model_type(), config_path).architecture(nn::ModelTask::SequenceClassification);
  label_set_ = finetuned_labels(base, architecture, config_path);
  KILN_CHECK(for_training || !label_set_.empty(), config_dir,
             " is not a fine-tuned classifier (its config.json has no ", architecture, " id2label)");
  // Note [Problem types]: a fine-tuned classifier's problem type, else the flags', else the data's.
  const std::string requested = requested_problem(args);
  if (!label_set_.empty()) {
    problem_type_ = base.problem_type().value_or(label_set_.size() == 1 ? "regression" : "single_label_classification");
    KILN_CHECK(requested.empty() || requested == problem_type_, args.model, " is a ", problem_type_,
               " model (problem_type in its config.json); the flags ask for ", requested);
    if (problem_type_ == "regression") label_set_.clear();  // id2label {"0": "LABEL_0"} names no class
  } else if (!requested.empty()) {
    problem_type_ = requested;
  } else {
    problem_type_.clear();  // decided by the training file
  }
  if (for_training) {
    data::LabeledDataset train = data::read_labeled_file(args.train_file, file_options());
    KILN_CHECK(train.size() > 0, "--train-file ", args.train_file, " holds no example");
    if (problem_type_.empty()) problem_type_ = problem_of(train.kind);
    label_set_ = train.label_set;
    if (problem_type_ == "single_label_classification")
      KILN_CHECK(label_set_.size() >= 2, "--train-file ", args.train_file, " has ", label_set_.size(),
                 " distinct label(s); classification needs at least 2");
    if (problem_type_ == "multi_label_classification")
      KILN_CHECK(label_set_.size() >= 2, "--train-file ", args.train_file, " names ", label_set_.size(),
                 " distinct label(s); --multi-label needs at least 2");
    train_set_ = vector_dataset(data::encode_labeled(train, *tokenizer_, static_cast<size_t>(args.max_seq_length)));
    out << "fine-tuning: " << train.size() << " training examples (text column '" << train.text_column << "'"
        << (train.has_pair() ? ", pair column '" + train.pair_column + "'" : std::string()) << "), "
        << (problem_type_ == "regression" ? std::string("regression")
                                          : std::to_string(label_set_.size()) + " labels" +
                                                (problem_type_ == "multi_label_classification" ? " (multi-label)" : ""))
        << "\n";
  }
  if (!args.validation_file.empty()) {
    data::LabeledDataset valid = data::read_labeled_file(args.validation_file, file_options());
    KILN_CHECK(valid.kind == label_kind(), "--validation-file ", args.validation_file, " holds ",
               problem_of(valid.kind), " labels; the training data's are ", problem_type_);
    valid_set_ = vector_dataset(data::encode_labeled(valid, *tokenizer_, static_cast<size_t>(args.max_seq_length)));
  }

  const int64_t num_labels = problem_type_ == "regression" ? 1 : static_cast<int64_t>(label_set_.size());
  nn::LoadReport report;
  model_ = nn::AutoModelForSequenceClassification::from_pretrained(args.model, num_labels, &report);
  model_->problem_type = problem_type_;
  apply_adapter(*model_, args, out);
  if (!report.new_heads.empty() && for_training)
    out << "note: a new classifier head (" << report.new_heads.size() << " tensors) starts from a fresh initialisation\n";
  move_model_to_device(*model_, args.device);
  config_ = model_->model_config().with_field("problem_type", nlohmann::json(problem_type_).dump());
  set_label_maps(config_, architecture,
                 problem_type_ == "regression" ? std::vector<std::string>{"LABEL_0"} : label_set_);

  if (train_set_ || valid_set_) train_loader_ = make_loader(train_set_ ? train_set_ : valid_set_, true, args.batch_size);
}

ClassificationTask::~ClassificationTask() = default;

std::string ClassificationTask::kind() const {
  if (problem_type_ == "regression") return "regression";
  if (problem_type_ == "multi_label_classification") return "multi-label-classification";
  return "classification";
}

data::LabelKind ClassificationTask::label_kind() const {
  return problem_type_.empty() ? data::LabelKind::Auto : kind_of(problem_type_);
}

data::LabeledFileOptions ClassificationTask::file_options(bool labelled) const {
  const TrainingArguments& a = args_;
  data::LabeledFileOptions o;
  if (!a.text_column.empty()) o.text_column = a.text_column;
  if (!a.pair_column.empty()) o.pair_column = a.pair_column == "none" ? "" : a.pair_column;
  o.label_column = labelled ? a.label_column : "";
  o.label_set = label_set_;
  o.no_header = a.no_header;
  o.label_kind = label_kind();
  return o;
}

data::LabeledDataset ClassificationTask::read_inputs(const std::string& path) const {
  return data::read_labeled_file(path, file_options(/*labelled=*/false));  // a label column is ignored
}

std::unique_ptr<ClassificationTask::Loader> ClassificationTask::make_loader(
    std::shared_ptr<const data::Dataset<data::LabeledEncoding>> set, bool shuffle, int64_t batch_size) const {
  const int32_t pad = pad_id_;
  const data::LabelKind kind = kind_of(problem_type_);
  const size_t num_labels = label_set_.size();
  auto sampler = task_sampler(args_, set->size(), shuffle);
  return make_task_loader<data::LabeledEncoding, data::ClassificationBatch>(
      std::move(set), std::move(sampler), batch_size,
      [pad, kind, num_labels](std::vector<data::LabeledEncoding>&& ex) {
        return data::collate_classification(ex, pad, 1, kind, num_labels);
      },
      *model_, args_, shuffle,
      [](const data::LabeledEncoding& e) { return static_cast<int64_t>(e.encoding.ids.size()); });
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
  const bool regression = problem_type_ == "regression", multi = problem_type_ == "multi_label_classification";
  ClassificationMetrics single(std::max<int64_t>(2, static_cast<int64_t>(label_set_.size())));
  RegressionMetrics reg;
  std::optional<MultiLabelMetrics> multilabel;
  if (multi) multilabel.emplace(label_set_);
  double loss_sum = 0;
  int64_t count = 0;
  Tensor logits;
  while (std::optional<data::ClassificationBatch> b = loader->next()) {
    const MicroBatch mb = classification_forward(*model_, *b, &logits);
    const int64_t B = logits.size(0), L = logits.size(1);
    loss_sum += mb.loss.item<double>() * static_cast<double>(B);
    count += B;
    if (regression) {
      const std::vector<double> p = logits.to(DType::Float64).to_vector<double>();
      const std::vector<double> y = b->labels.to(DType::Float64).to_vector<double>();
      reg.add(p, y);
    } else if (multi) {
      const std::vector<float> z = logits.to(DType::Float32).to_vector<float>();
      const std::vector<float> y = b->labels.to(DType::Float32).to_vector<float>();
      std::vector<uint8_t> pi(static_cast<size_t>(L)), yi(static_cast<size_t>(L));
      for (int64_t i = 0; i < B; ++i) {
        for (int64_t j = 0; j < L; ++j) {
          pi[static_cast<size_t>(j)] = z[static_cast<size_t>(i * L + j)] > 0 ? 1 : 0;
          yi[static_cast<size_t>(j)] = y[static_cast<size_t>(i * L + j)] > 0.5f ? 1 : 0;
        }
        multilabel->add(pi, yi);
      }
    } else {
      single.add(argmax(logits, 1).to_vector<int64_t>(), b->labels.to_vector<int64_t>());
    }
  }
  std::map<std::string, double> m = regression ? reg.summary() : multi ? multilabel->summary() : single.summary();
  m["loss"] = loss_sum / static_cast<double>(count);
  return m;
}

Tensor ClassificationTask::predict(const data::LabeledDataset& dataset) {
  NoGradGuard no_grad;
  model_->eval();
  auto encodings = data::encode_labeled(dataset, *tokenizer_, static_cast<size_t>(args_.max_seq_length));
  for (data::LabeledEncoding& e : encodings) e.label = -1;  // the labels are not used
  const int32_t pad = pad_id_;
  std::vector<Tensor> parts;
  const size_t bs = static_cast<size_t>(args_.eval_batch_size > 0 ? args_.eval_batch_size : args_.batch_size);
  const Device dev = model_device(*model_);
  for (size_t i = 0; i < encodings.size(); i += bs) {
    std::vector<data::LabeledEncoding> chunk(encodings.begin() + static_cast<std::ptrdiff_t>(i),
                                             encodings.begin() + static_cast<std::ptrdiff_t>(std::min(encodings.size(), i + bs)));
    const data::PaddedBatch in = data::collate_classification(chunk, pad).inputs;
    parts.push_back(to_device(model_->forward(on_device(in.input_ids, dev), on_device(in.attention_mask, dev),
                                              on_device(in.token_type_ids, dev)).logits, kCPU));
  }
  KILN_CHECK(!parts.empty(), dataset.path, " holds no example");
  return cat(parts, 0);
}

}  // namespace kiln::train
