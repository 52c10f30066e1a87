#include "train/mlm_task.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "autograd/grad_mode.h"
#include "data/corpus.h"
#include "data/synthetic_corpus.h"
#include "kiln.h"
#include "nn/hf_checkpoint.h"
#include "train/metrics.h"
#include "train/task_loader.h"
#include "train/task_util.h"

namespace kiln::train {
namespace fs = std::filesystem;

namespace {

// The small model of the synthetic demo: L2 H128 A2 F512, 128 positions.
BertConfig demo_config(int64_t vocab_size) {
  BertConfig c = BertConfig::preset("bert-tiny");
  c.vocab_size = vocab_size;
  c.max_position_embeddings = 128;
  return c;
}

}  // namespace

MicroBatch mlm_forward(const nn::MaskedLanguageModel& model, const data::PretrainingBatch& batch) {
  // ids, mask, type ids, labels: (B, T); logits: (M, V) at the M labelled positions, row-major order.
  // The inputs go to the model's device; the counts below read the CPU batch.
  const Device dev = model_device(model);
  nn::MaskedLMOutput o = model.forward(on_device(batch.input_ids, dev), on_device(batch.attention_mask, dev),
                                       on_device(batch.token_type_ids, dev), on_device(batch.labels, dev));
  MicroBatch mb;
  const std::vector<int64_t> labels = batch.labels.to_vector<int64_t>();
  const std::vector<int64_t> predicted =
      o.logits.size(0) > 0 ? argmax(o.logits.detach(), 1).to_vector<int64_t>() : std::vector<int64_t>{};
  size_t row = 0;
  for (int64_t label : labels) {
    if (label == data::kIgnoreIndex) continue;
    KILN_CHECK(row < predicted.size(), "mlm_forward: fewer logits rows than labelled positions");
    mb.correct += predicted[row++] == label ? 1 : 0;
  }
  KILN_CHECK(row == predicted.size(), "mlm_forward: more logits rows than labelled positions");
  mb.predicted = static_cast<int64_t>(row);
  // Note [No masked tokens]: the mean over zero targets is 0/0 = NaN (the
  // model's loss, as PyTorch's). Such a batch contributes zero loss and zero
  // gradient instead: the sum over the (empty) logits, still attached to the
  // graph so that backward() runs as for any batch and every parameter gets
  // an all-zero gradient (under data parallel, the other ranks' gradients
  // are averaged with it as usual).
  mb.loss = mb.predicted > 0 ? o.loss : sum(o.logits);
  mb.tokens = sum(batch.attention_mask).item<int64_t>();
  return mb;
}

MlmTask::MlmTask(const TrainingArguments& args, std::ostream& out, bool for_training, dist::ProcessGroupPtr group)
    : TextPretrainingTask(args), unigram_baseline_(std::numeric_limits<double>::quiet_NaN()) {
  args.validate();
  manual_seed(args.seed);  // model initialisation and dropout
  const bool synthetic = args.train_file.empty() && (for_training || args.validation_file.empty());
  KILN_CHECK(for_training || synthetic || !args.validation_file.empty(), "--validation-file is required");

  // Tokenizer and corpora.
  std::unique_ptr<data::TextTokenizer> tokenizer;
  data::MaskingVocab masking_vocab;
  std::shared_ptr<const data::Corpus> train_corpus, valid_corpus;
  const fs::path work = work_dir();
  if (synthetic) {
    data::SyntheticCorpusOptions so;
    so.seed = args.seed;
    so.num_documents = static_cast<size_t>(args.synthetic_documents);
    auto corpus = std::make_shared<data::SyntheticCorpus>(so);
    so.seed = args.seed + 1;
    so.num_documents = static_cast<size_t>(args.synthetic_documents / 10);
    valid_corpus = std::make_shared<data::SyntheticCorpus>(so);
    tokenizer = std::make_unique<data::BertTokenizer>(corpus->tokenizer());
    masking_vocab = corpus->masking_vocab();
    unigram_baseline_ = corpus->unigram_baseline_accuracy();
    train_corpus = corpus;
  } else {
    tokenizer = load_tokenizer(args.model, args.vocab, args.tokenizer, args.cased);
    masking_vocab = data::MaskingVocab::from_tokenizer(*tokenizer);
    KILN_CHECK(!args.whole_word_mask || !tokenizer->continuation_prefix().empty(),
               "--whole-word-mask needs a WordPiece tokenizer (its \"##\" pieces mark words); this tokenizer "
               "has no continuation prefix");
    if (for_training) train_corpus = open_text_corpus(args.train_file, "--train-file", *tokenizer, work / "corpus-train", out, group);
    if (!args.validation_file.empty())
      valid_corpus = open_text_corpus(args.validation_file, "--validation-file", *tokenizer, work / "corpus-validation", out, group);
  }
  tokenizer_files_ = tokenizer->files();
  pad_id_ = (train_corpus ? train_corpus : valid_corpus)->special_ids().pad;
  KILN_CHECK(pad_id_ >= 0, "the tokenizer has no pad token ([PAD], <pad>, or tokenizer_config.json's pad_token)");

  // Model.
  const int64_t vocab_size = static_cast<int64_t>(tokenizer->vocab_size());
  if (!args.model.empty()) {
    nn::LoadReport report;
    model_ = nn::AutoModelForMaskedLM::from_pretrained(args.model, &report);
    apply_adapter(*model_, args, out);
    config_ = model_->model_config();
    if (!report.new_heads.empty())
      out << "note: " << args.model << " has no masked-LM head; " << report.new_heads.size()
          << " tensors start from a fresh initialisation\n";
  } else {
    KILN_CHECK(!args.config.empty() || synthetic, "give --model DIR (a pretrained model) or --config "
                                                  "(a config.json or one of bert-tiny, bert-mini, bert-small, bert-base)");
    if (args.config.empty()) {
      config_ = demo_config(vocab_size);
    } else if (fs::exists(args.config)) {  // any family's config.json (Note [Model-agnostic config])
      config_ = ModelConfig::from_json_file(fs::is_directory(args.config) ? args.config + "/config.json" : args.config);
    } else {
      BertConfig preset = BertConfig::preset(args.config);
      preset.vocab_size = vocab_size;
      config_ = preset;
    }
    model_ = nn::AutoModelForMaskedLM::from_config(config_);
  }
  move_model_to_device(*model_, args.device);
  const ConfigFacts& facts = config_.facts();
  KILN_CHECK(facts.vocab_size == vocab_size, "the vocabulary has ", vocab_size, " tokens but the model's vocab_size is ",
             facts.vocab_size);
  config_ = config_.with_field(
      "architectures",
      nlohmann::json::array({nn::model_family(config_.model_type()).architecture(nn::ModelTask::MaskedLM)}).dump());
  check_max_seq_length(args.max_seq_length, config_);

  // Datasets and the training loader.
  data::PackingOptions packing{.max_seq_length = static_cast<size_t>(args.max_seq_length)};
  data::MaskingOptions masking{.mlm_probability = args.mlm_probability, .whole_word = args.whole_word_mask};
  if (valid_corpus)
    valid_set_ = std::make_shared<data::PretrainingDataset>(valid_corpus, masking_vocab, packing, masking);
  if (train_corpus)
    set_training_data(std::make_shared<data::PretrainingDataset>(train_corpus, masking_vocab, packing, masking),
                      "training example");
  make_train_loader();
  if (for_training) {
    out << "pretraining: " << train_set_->size() << " training and " << num_validation_examples()
        << " validation examples of up to " << args.max_seq_length << " tokens; model L" << config_.facts().num_layers
        << " H" << config_.facts().hidden_size << " A" << config_.facts().num_heads << ", vocab " << config_.facts().vocab_size
        << "\n";
    if (synthetic)
      out << "synthetic corpus (seed " << args.seed << "): unigram baseline accuracy " << unigram_baseline_ << "\n";
  }
}

MicroBatch MlmTask::forward_batch(const data::PretrainingBatch& batch) const { return mlm_forward(*model_, batch); }

}  // namespace kiln::train
