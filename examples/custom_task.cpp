// kiln's Trainer on a task of your own (docs/tutorial.md, "A custom
// TrainTask"): a BERT encoder with a regression head learns how many words a
// sentence has, from SST-2's sentences. The task supplies the model, its data
// loader, the forward pass that yields a loss and its metric; train() does the
// rest (AdamW, schedule, clipping, logging, checkpoints, exact resume).
//
//   custom_task SST2_DIR VOCAB_TXT OUTPUT_DIR [--steps N]
//
// Exits non-zero unless the trained model's mean absolute error (in words) on
// the dev sentences is below 0.7x that of predicting the training mean.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using kiln::Tensor;
namespace data = kiln::data;
namespace nn = kiln::nn;
namespace train = kiln::train;

namespace {

struct Example {
  std::vector<int32_t> ids;  // [CLS] ... [SEP]
  float words = 0;           // the target
};
struct Batch {
  Tensor ids, mask;  // (B, T) int64, padded to the longest
  Tensor words;      // (B) float32
  int64_t tokens = 0;
};

// The text column ("sentence" or "content") of an SST-2 TSV file (header first), at most `limit`.
std::vector<std::string> sentences(const std::string& path, size_t limit) {
  std::ifstream in(path);
  KILN_CHECK(in.good(), "custom_task: cannot read ", path);
  auto fields = [](std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> f;
    std::istringstream s(line);
    for (std::string x; std::getline(s, x, '\t');) f.push_back(x);
    return f;
  };
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = fields(line);
  size_t col = 0;
  while (col < header.size() && header[col] != "sentence" && header[col] != "content") ++col;
  KILN_CHECK(col < header.size(), "custom_task: ", path, " has no \"sentence\" or \"content\" column");
  std::vector<std::string> out;
  while (out.size() < limit && std::getline(in, line)) {
    const std::vector<std::string> f = fields(line);
    KILN_CHECK(col < f.size(), "custom_task: ", path, ": a line without a sentence");
    out.push_back(f[col]);
  }
  return out;
}

std::vector<Example> encode(const data::BertTokenizer& tok, const std::vector<std::string>& texts) {
  std::vector<Example> out;
  for (const std::string& t : texts) {
    std::istringstream words(t);
    float n = 0;
    for (std::string w; words >> w;) ++n;
    out.push_back({tok.encode(t).ids, n});
  }
  return out;
}

Batch collate(std::vector<Example> examples, int32_t pad) {
  const int64_t B = static_cast<int64_t>(examples.size());
  size_t T = 0;
  for (const Example& e : examples) T = std::max(T, e.ids.size());
  std::vector<int64_t> ids(static_cast<size_t>(B) * T, pad), mask(ids.size(), 0);
  std::vector<double> words;
  Batch b;
  for (int64_t i = 0; i < B; ++i) {
    const Example& e = examples[static_cast<size_t>(i)];
    for (size_t t = 0; t < e.ids.size(); ++t) {
      ids[static_cast<size_t>(i) * T + t] = e.ids[t];
      mask[static_cast<size_t>(i) * T + t] = 1;
    }
    words.push_back(e.words);
    b.tokens += static_cast<int64_t>(e.ids.size());
  }
  const int64_t Tn = static_cast<int64_t>(T);
  b.ids = kiln::tensor_from(ids, {B, Tn});
  b.mask = kiln::tensor_from(mask, {B, Tn});
  b.words = kiln::tensor(words, {B});
  return b;
}

// The model: BERT (no pooler), mean pooling, one linear output (words / 10).
class WordCounter : public nn::Module, public nn::Callable<WordCounter> {
 public:
  explicit WordCounter(const kiln::BertConfig& c) {
    bert = register_module("bert", std::make_shared<nn::BertModel>(c, /*add_pooling_layer=*/false));
    head = register_module("head", std::make_shared<nn::Linear>(c.hidden_size, 1, true, c.initializer_range));
  }
  // ids, mask (B, T) -> predicted words (B)
  Tensor forward(const Tensor& ids, const Tensor& mask) const {
    const Tensor pooled = nn::mean_pool((*bert)(ids, mask).last_hidden_state, mask);  // (B, C)
    return (*head)(pooled).reshape({ids.size(0)}) * 10.0;
  }
  std::shared_ptr<nn::BertModel> bert;
  std::shared_ptr<nn::Linear> head;
};

// [custom-task]
class WordCountTask final : public train::TrainTask {
 public:
  using Loader = data::DataLoader<Example, Batch>;

  WordCountTask(const train::TrainingArguments& args, const std::string& sst2, const std::string& vocab)
      : tok_(data::BertTokenizer::from_vocab_file(vocab)), config_(kiln::BertConfig::preset("bert-tiny")) {
    config_.vocab_size = static_cast<int64_t>(tok_.vocab().size());
    model_ = std::make_shared<WordCounter>(config_);
    train_ = encode(tok_, sentences(sst2 + "/train.tsv", 4000));
    valid_ = encode(tok_, sentences(sst2 + "/dev.tsv", 400));
    const auto set = std::make_shared<data::FunctionDataset<Example>>(
        train_.size(), [this](size_t i, kiln::Generator&) { return train_[i]; });
    const int32_t pad = tok_.pad_id();
    loader_ = std::make_unique<Loader>(
        set, std::make_shared<data::BatchSampler>(train::training_sampler(args, set->size()), args.batch_size),
        [pad](std::vector<Example> b) { return collate(std::move(b), pad); });
  }

  nn::Module& model() override { return *model_; }
  kiln::ModelConfig model_config() const override { return config_; }
  std::string kind() const override { return "word-count"; }
  size_t batches_per_epoch() const override { return loader_->num_batches(); }
  data::LoaderState loader_state() const override { return loader_->state(); }
  void load_loader_state(const data::LoaderState& s) override { loader_->load_state(s); }
  void start_epoch(int64_t epoch) override { loader_->set_epoch(epoch); }
  double loader_wait_seconds() const override { return loader_->wait_seconds(); }

  // The loss of the next batch: mean squared error in words.
  std::optional<train::MicroBatch> forward_next() override {
    std::optional<Batch> b = loader_->next();
    if (!b) return std::nullopt;
    const Tensor err = (*model_)(b->ids, b->mask) - b->words;
    return train::MicroBatch{kiln::mean(err * err), b->tokens, 0, 0};
  }

  // Mean absolute error in words on the dev sentences, and the same for
  // always predicting the training mean.
  std::map<std::string, double> evaluate() override {
    kiln::NoGradGuard no_grad;
    double mean = 0, mae = 0, baseline = 0;
    for (const Example& e : train_) mean += e.words / static_cast<double>(train_.size());
    for (size_t i = 0; i < valid_.size(); i += 64) {
      std::vector<Example> part(valid_.begin() + static_cast<std::ptrdiff_t>(i),
                                valid_.begin() + static_cast<std::ptrdiff_t>(std::min(i + 64, valid_.size())));
      const Batch b = collate(part, tok_.pad_id());
      mae += kiln::sum(kiln::abs((*model_)(b.ids, b.mask) - b.words)).item<double>();
      for (const Example& e : part) baseline += std::abs(e.words - mean);
    }
    const double n = static_cast<double>(valid_.size());
    return {{"mae_words", mae / n}, {"mean_baseline_mae_words", baseline / n}};
  }

 private:
  data::BertTokenizer tok_;
  kiln::BertConfig config_;
  std::shared_ptr<WordCounter> model_;
  std::vector<Example> train_, valid_;
  std::unique_ptr<Loader> loader_;
};
// [custom-task]

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 4) {
    std::fprintf(stderr, "usage: custom_task SST2_DIR VOCAB_TXT OUTPUT_DIR [--steps N]\n");
    return 2;
  }
  // [trainer]
  train::TrainingArguments args;
  args.output_dir = argv[3];
  args.max_steps = argc >= 6 && std::string(argv[4]) == "--steps" ? std::stoll(argv[5]) : 200;
  args.batch_size = 32;
  args.lr = 1e-3;
  args.warmup_ratio = 0.1;
  args.weight_decay = 0.01;
  args.logging_steps = 50;
  args.save_steps = 0;  // save at the end only
  WordCountTask task(args, argv[1], argv[2]);
  const train::TrainResult r = train::train(args, task, std::cout);
  // [trainer]
  const double mae = r.eval.at("mae_words"), baseline = r.eval.at("mean_baseline_mae_words");
  std::printf("custom_task: dev MAE %.2f words, predicting the mean %.2f\n", mae, baseline);
  return mae < 0.7 * baseline ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
