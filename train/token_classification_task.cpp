#include "train/token_classification_task.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "kiln.h"
#include "nn/auto.h"
#include "nn/hf_checkpoint.h"
#include "nn/model_size.h"
#include "train/task_loader.h"
#include "train/task_metrics.h"
#include "train/task_util.h"

namespace kiln::train {

namespace {

// --label-column for CoNLL files: the default ("label") or "" is the last
// column; otherwise a 1-based column index.
int64_t conll_label_column(const std::string& flag) {
  if (flag.empty() || flag == "label") return 0;
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(flag.data(), flag.data() + flag.size(), v);
  KILN_CHECK(ec == std::errc() && p == flag.data() + flag.size() && v >= 1,
             "--label-column must be a 1-based column index for --task token-classification (default: the last "
             "column), got '", flag, "'");
  return v;
}

}  // namespace

MicroBatch token_classification_forward(const nn::TokenClassifier& model,
                                        const data::TokenClassificationBatch& batch,
                                        std::vector<int64_t>* predictions) {
  // inputs, labels: (B, T); logits: (B, T, L). The inputs go to the model's
  // device; the counts read the CPU batch.
  const data::PaddedBatch& in = batch.inputs;
  const Device dev = model_device(model);
  const nn::ClassificationOutput o =
      model.forward(on_device(in.input_ids, dev), on_device(in.attention_mask, dev),
                    on_device(in.token_type_ids, dev), on_device(batch.labels, dev));
  MicroBatch mb;
  mb.loss = o.loss;
  const std::vector<int64_t> predicted = argmax(o.logits.detach(), 2).to_vector<int64_t>();
  const std::vector<int64_t> labels = batch.labels.to_vector<int64_t>();
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == data::kIgnoreLabel) continue;
    mb.correct += predicted[i] == labels[i] ? 1 : 0;
    ++mb.predicted;
  }
  mb.tokens = sum(in.attention_mask).item<int64_t>();
  if (predictions) *predictions = predicted;
  return mb;
}

TokenClassificationTask::TokenClassificationTask(const TrainingArguments& args, std::ostream& out,
                                                 bool for_training)
    : args_(args) {
  args.validate();
  KILN_CHECK(!args.model.empty(), "--model DIR is required (a pretrained model directory)");
  KILN_CHECK(!for_training || !args.train_file.empty(), "--train-file is required");
  (void)conll_label_column(args.label_column);  // a bad flag fails before any file is read
  manual_seed(args.seed);                        // classifier initialisation and dropout

  tokenizer_ = load_tokenizer(args.model, args.vocab, args.tokenizer, args.cased);
  tokenizer_files_ = tokenizer_->files();
  const int32_t pad = tokenizer_->pad_id();
  KILN_CHECK(pad >= 0, "the tokenizer has no pad token ([PAD], <pad>, or tokenizer_config.json's pad_token)");
  pad_id_ = pad;

  const std::string config_path = task_config_dir(args) + "/config.json";  // the adapter's, with --adapter
  const ModelConfig base = task_model_config(args);
  check_vocab_matches(base, tokenizer_->vocab_size(), config_path);
  check_max_seq_length(args.max_seq_length, base);
  // the family's class: BertForTokenClassification, RobertaForTokenClassification, ...
  const std::string architecture =
      nn::model_family(base.model_type(), config_path).architecture(nn::ModelTask::TokenClassification);
  label_set_ = finetuned_labels(base, architecture, config_path);
  KILN_CHECK(for_training || !label_set_.empty(), task_config_dir(args),
             " is not a fine-tuned token classifier (its config.json has no ", architecture, " id2label)");
  const size_t max_len = static_cast<size_t>(args.max_seq_length);
  if (for_training) {
    data::ConllDataset train = data::read_conll(args.train_file, file_options());
    label_set_ = train.label_set;
    KILN_CHECK(label_set_.size() >= 2, "--train-file ", args.train_file, " has ", label_set_.size(),
               " distinct label(s); token classification needs at least 2");
    std::vector<data::TokenEncoding> enc = data::encode_conll(train, *tokenizer_, max_len, args.label_all_tokens);
    out << "token classification: " << train.sentences.size() << " training sentences (" << enc.size()
        << " windows of at most " << max_len << " tokens), " << label_set_.size() << " labels\n";
    train_set_ = vector_dataset(std::move(enc));
  }
  if (!args.validation_file.empty()) {
    valid_ = data::read_conll(args.validation_file, file_options());
    valid_encodings_ = data::encode_conll(*valid_, *tokenizer_, max_len, /*label_all_tokens=*/false);
  }

  nn::LoadReport report;
  model_ = nn::AutoModelForTokenClassification::from_pretrained(args.model, static_cast<int64_t>(label_set_.size()),
                                                                &report);
  apply_adapter(*model_, args, out);
  if (!report.new_heads.empty() && for_training)
    out << "note: a new token classifier head (" << report.new_heads.size()
        << " tensors) starts from a fresh initialisation\n";
  move_model_to_device(*model_, args.device);
  config_ = model_->model_config();
  set_label_maps(config_, architecture, label_set_);
  if (train_set_) train_loader_ = make_loader(train_set_, true, args.batch_size);
}

TokenClassificationTask::~TokenClassificationTask() = default;

data::ConllOptions TokenClassificationTask::file_options() const {
  data::ConllOptions o;
  o.label_column = conll_label_column(args_.label_column);
  o.label_set = label_set_;  // empty for the training file of a new classifier
  return o;
}

data::ConllDataset TokenClassificationTask::read_words(const std::string& path) const {
  data::ConllOptions o;
  o.labeled = false;
  return data::read_conll(path, o);
}

std::unique_ptr<TokenClassificationTask::Loader> TokenClassificationTask::make_loader(
    std::shared_ptr<const data::Dataset<data::TokenEncoding>> set, bool shuffle, int64_t batch_size) const {
  const int32_t pad = pad_id_;
  auto sampler = task_sampler(args_, set->size(), shuffle);
  return make_task_loader<data::TokenEncoding, data::TokenClassificationBatch>(
      std::move(set), std::move(sampler), batch_size,
      [pad](std::vector<data::TokenEncoding>&& ex) { return data::collate_token_classification(ex, pad); }, *model_,
      args_, shuffle, [](const data::TokenEncoding& e) { return static_cast<int64_t>(e.encoding.ids.size()); });
}

std::optional<MicroBatch> TokenClassificationTask::forward_next() {
  std::optional<data::TokenClassificationBatch> batch = train_loader_->next();
  if (!batch) return std::nullopt;
  return token_classification_forward(*model_, *batch);
}

double TokenClassificationTask::run_eval(const data::ConllDataset& sentences,
                                         const std::vector<data::TokenEncoding>& encodings,
                                         std::vector<std::vector<int32_t>>& word_predictions) {
  NoGradGuard no_grad;
  model_->eval();
  const int64_t bs = args_.eval_batch_size > 0 ? args_.eval_batch_size : args_.batch_size;
  // The loader serves the encodings in order (sequential sampler), so the
  // rows of the batches are encodings 0, 1, 2, ...
  auto loader = make_loader(vector_dataset(encodings), false, bs);
  double loss_sum = 0;
  int64_t labelled = 0;
  std::vector<std::vector<int64_t>> rows;  // per encoding: the argmax at each position of its padded row
  rows.reserve(encodings.size());
  std::vector<int64_t> predicted;
  while (std::optional<data::TokenClassificationBatch> b = loader->next()) {
    const MicroBatch mb = token_classification_forward(*model_, *b, &predicted);
    if (mb.predicted > 0) {
      loss_sum += mb.loss.item<double>() * static_cast<double>(mb.predicted);
      labelled += mb.predicted;
    }
    const int64_t B = b->inputs.input_ids.size(0), T = b->inputs.input_ids.size(1);
    for (int64_t i = 0; i < B; ++i)
      rows.emplace_back(predicted.begin() + i * T, predicted.begin() + (i + 1) * T);
  }
  word_predictions = data::word_predictions(sentences, encodings, rows);
  return labelled > 0 ? loss_sum / static_cast<double>(labelled) : std::numeric_limits<double>::quiet_NaN();
}

std::map<std::string, double> TokenClassificationTask::evaluate() {
  if (!valid_ || valid_->sentences.empty()) return {};
  std::vector<std::vector<int32_t>> predicted;
  const double loss = run_eval(*valid_, valid_encodings_, predicted);
  EntityMetrics metrics;
  std::vector<std::string> truth, guess;
  for (size_t s = 0; s < predicted.size(); ++s) {
    const data::ConllSentence& sentence = valid_->sentences[s];
    truth.clear();
    guess.clear();
    for (size_t w = 0; w < sentence.words.size(); ++w) {
      truth.push_back(label_set_.at(static_cast<size_t>(sentence.labels[w])));
      guess.push_back(label_set_.at(static_cast<size_t>(predicted[s][w])));
    }
    metrics.add(truth, guess);
  }
  std::map<std::string, double> m = metrics.summary();
  m["loss"] = loss;
  return m;
}

std::vector<std::vector<int32_t>> TokenClassificationTask::predict(const data::ConllDataset& sentences) {
  const std::vector<data::TokenEncoding> enc =
      data::encode_conll(sentences, *tokenizer_, static_cast<size_t>(args_.max_seq_length), false);
  std::vector<std::vector<int32_t>> predicted;
  (void)run_eval(sentences, enc, predicted);
  return predicted;
}

}  // namespace kiln::train
