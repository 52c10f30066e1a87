// `kiln embed --model DIR`: one mean-pooled sentence embedding per line of
// standard input (sentence-transformers pooling over the last hidden state),
// printed as space-separated floats.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "data/tokenizer/bert_tokenizer.h"
#include "kiln.h"
#include "nn/hf_checkpoint.h"
#include "tools/command.h"
#include "train/task_util.h"

namespace kiln::tools {
namespace {

struct EmbedOptions {
  std::string model;
  int batch_size = 32;
  int max_seq_length = 0;  // 0: the model's max_position_embeddings
  bool cased = false;
  bool normalize = false;
};

// do_lower_case from tokenizer_config.json when present (default: true).
void embed_batch(const nn::BertModel& model, const data::BertTokenizer& tok, const std::vector<std::string>& lines,
                 const EmbedOptions& o, size_t max_len) {
  data::EncodeOptions eo;
  eo.max_length = max_len;
  eo.pad_to_longest = true;
  const std::vector<data::Encoding> enc = tok.encode_batch(lines, eo);
  const int64_t B = static_cast<int64_t>(enc.size()), T = static_cast<int64_t>(enc[0].size());
  std::vector<int64_t> ids, mask, types;
  for (const auto& e : enc)
    for (size_t i = 0; i < e.size(); ++i) {
      ids.push_back(e.ids[i]);
      mask.push_back(e.attention_mask[i]);
      types.push_back(e.type_ids[i]);
    }
  NoGradGuard no_grad;
  Tensor mask_t = tensor_from(mask, {B, T});
  Tensor h = model.forward(tensor_from(ids, {B, T}), mask_t, tensor_from(types, {B, T})).last_hidden_state;
  Tensor pooled = nn::mean_pool(h, mask_t);
  if (o.normalize) pooled = div(pooled, clamp(sqrt(sum(mul(pooled, pooled), {1}, true)), 1e-12, std::nullopt));
  const std::vector<float> v = pooled.to_vector<float>();
  const int64_t C = pooled.size(1);
  std::string line;
  for (int64_t b = 0; b < B; ++b) {
    line.clear();
    char buf[32];
    for (int64_t c = 0; c < C; ++c) {
      std::snprintf(buf, sizeof buf, c ? " %.8g" : "%.8g", static_cast<double>(v[static_cast<size_t>(b * C + c)]));
      line += buf;
    }
    std::cout << line << '\n';
  }
}

int run_embed(const EmbedOptions& o) {
  KILN_CHECK(std::filesystem::exists(o.model + "/vocab.txt"), o.model, "/vocab.txt: file not found");
  auto model = nn::from_pretrained<nn::BertModel>(o.model);
  model->eval();
  const auto tok = data::BertTokenizer::from_vocab_file(o.model + "/vocab.txt", train::model_lowercase(o.model, o.cased));
  const int64_t positions = model->config.max_position_embeddings;
  KILN_CHECK(o.max_seq_length <= positions, "--max-seq-length ", o.max_seq_length,
             " exceeds the model's max_position_embeddings ", positions);
  const size_t max_len = static_cast<size_t>(o.max_seq_length > 0 ? o.max_seq_length : positions);
  std::vector<std::string> batch;
  std::string line;
  while (std::getline(std::cin, line)) {
    batch.push_back(line);
    if (static_cast<int>(batch.size()) == o.batch_size) {
      embed_batch(*model, tok, batch, o, max_len);
      batch.clear();
    }
  }
  if (!batch.empty()) embed_batch(*model, tok, batch, o, max_len);
  std::cout.flush();
  return 0;
}

const Registrar reg("embed", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("embed",
                                 "Print one mean-pooled sentence embedding per line of standard input "
                                 "(space-separated floats), from a Hugging Face BERT model directory");
  auto o = std::make_shared<EmbedOptions>();
  cmd->add_option("--model", o->model, "model directory (config.json, vocab.txt, model.safetensors)")->required();
  cmd->add_option("--batch-size", o->batch_size, "sentences per forward pass")->check(CLI::PositiveNumber);
  cmd->add_option("--max-seq-length", o->max_seq_length, "truncate longer inputs (default: model maximum)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--cased", o->cased, "do not lower-case (default: tokenizer_config.json, else uncased)");
  cmd->add_flag("--normalize", o->normalize, "L2-normalise each embedding");
  return [o] { return run_embed(*o); };
});

}  // namespace
}  // namespace kiln::tools
