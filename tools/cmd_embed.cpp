// `kiln embed --model DIR`: one mean-pooled sentence embedding per line of
// standard input (sentence-transformers pooling over the last hidden state),
// printed as space-separated floats, in input order.
//
// Note [Embedding by length]: a batch is padded to its longest sentence, so a
// batch of mixed lengths spends most of its work on padding. As
// sentence-transformers' encode() does, each chunk of --sort-chunk lines is
// tokenized, ordered by token count (longest first, stable), batched in that
// order, and the embeddings are written back in input order; memory stays
// bounded by the chunk. --no-sort batches in input order (for comparison).
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "data/tokenizer/pipeline_tokenizer.h"
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
  int sort_chunk = 4096;  // lines read, sorted by length and embedded at a time
  bool no_sort = false;
  std::string adapter;  // a LoRA adapter directory (nn/lora.h)
};

// Embeddings (B, C) of the encodings enc[order[0..B)], one text line each, into out[order[i]].
void embed_batch(const nn::EncoderModel& model, const std::vector<data::Encoding>& enc, const std::vector<size_t>& order,
                 const EmbedOptions& o, int32_t pad, std::vector<std::string>& out) {
  const int64_t B = static_cast<int64_t>(order.size());
  size_t T = 0;
  for (size_t i : order) T = std::max(T, enc[i].size());
  std::vector<int64_t> ids(static_cast<size_t>(B) * T, pad), mask(ids.size(), 0), types(ids.size(), 0);
  for (size_t b = 0; b < order.size(); ++b) {
    const data::Encoding& e = enc[order[b]];
    for (size_t i = 0; i < e.size(); ++i) {
      ids[b * T + i] = e.ids[i];
      mask[b * T + i] = e.attention_mask[i];
      types[b * T + i] = e.type_ids[i];
    }
  }
  NoGradGuard no_grad;
  const int64_t Tn = static_cast<int64_t>(T);
  Tensor mask_t = tensor_from(mask, {B, Tn});
  Tensor h = model.forward(tensor_from(ids, {B, Tn}), mask_t, tensor_from(types, {B, Tn})).last_hidden_state;
  Tensor pooled = nn::mean_pool(h, mask_t);
  if (o.normalize) pooled = div(pooled, clamp(sqrt(sum(mul(pooled, pooled), {1}, true)), 1e-12, std::nullopt));
  const std::vector<float> v = pooled.to_vector<float>();
  const int64_t C = pooled.size(1);
  for (int64_t b = 0; b < B; ++b) {
    std::string& line = out[order[static_cast<size_t>(b)]];
    char buf[32];
    for (int64_t c = 0; c < C; ++c) {
      std::snprintf(buf, sizeof buf, c ? " %.8g" : "%.8g", static_cast<double>(v[static_cast<size_t>(b * C + c)]));
      line += buf;
    }
  }
}

// One chunk of lines: tokenized, batched by length (Note [Embedding by
// length]) or in input order, printed in input order.
void embed_chunk(const nn::EncoderModel& model, const data::TextTokenizer& tok, const std::vector<std::string>& lines,
                 const EmbedOptions& o, size_t max_len) {
  data::EncodeOptions eo;
  eo.max_length = max_len;
  const std::vector<data::Encoding> enc = tok.encode_batch(lines, eo);
  std::vector<size_t> order(enc.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!o.no_sort)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return enc[a].size() > enc[b].size(); });
  std::vector<std::string> out(lines.size());
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(o.batch_size)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(o.batch_size));
    embed_batch(model, enc, std::vector<size_t>(order.begin() + static_cast<std::ptrdiff_t>(start),
                                                order.begin() + static_cast<std::ptrdiff_t>(end)),
                o, std::max(tok.pad_id(), 0), out);
  }
  for (const std::string& line : out) std::cout << line << '\n';
}

int run_embed(const EmbedOptions& o) {
  nn::check_model_dir(o.model, true, "--model");
  // Note [Choosing a tokenizer]: tokenizer.json, else the older files.
  const std::unique_ptr<data::TextTokenizer> tok = data::open_text_tokenizer(o.model, o.cased);
  auto model = nn::AutoModel::from_pretrained(o.model);  // the family's base model (nn/auto.h)
  if (!o.adapter.empty()) {  // a task model's adapter onto the base model: its head left out
    const nn::LoraConfig c = nn::load_adapter(*model, o.adapter, nn::weight_names_for(model->model_config().model_type()).base_prefix);
    std::cerr << "adapter: " << o.adapter << " (LoRA rank " << c.r << ")\n";
  }
  model->eval();
  const ModelConfig& config = model->model_config();
  check_vocab_matches(config, tok->vocab_size(), o.model + "/config.json");
  const int64_t positions = config.facts().max_sequence_length;
  KILN_CHECK(o.max_seq_length <= positions, "--max-seq-length ", o.max_seq_length, " exceeds the ", positions,
             " tokens the model's max_position_embeddings (", config.facts().max_position_embeddings, ") allow");
  const size_t max_len = static_cast<size_t>(o.max_seq_length > 0 ? o.max_seq_length : positions);
  // Without sorting a chunk is one batch, so output starts after the first batch.
  const size_t chunk = static_cast<size_t>(o.no_sort ? o.batch_size : std::max(o.sort_chunk, o.batch_size));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(std::cin, line)) {
    lines.push_back(line);
    if (lines.size() == chunk) {
      embed_chunk(*model, *tok, lines, o, max_len);
      lines.clear();
    }
  }
  if (!lines.empty()) embed_chunk(*model, *tok, lines, o, max_len);
  std::cout.flush();
  return 0;
}

const Registrar reg("embed", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("embed",
                                 "Print one mean-pooled sentence embedding per line of standard input "
                                 "(space-separated floats), from a Hugging Face BERT model directory");
  auto o = std::make_shared<EmbedOptions>();
  cmd->add_option("--model", o->model, "model directory (config.json, model.safetensors, and tokenizer.json or vocab.txt)")->required();
  cmd->add_option("--batch-size", o->batch_size, "sentences per forward pass")->check(CLI::PositiveNumber);
  cmd->add_option("--max-seq-length", o->max_seq_length, "truncate longer inputs (default: model maximum)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--cased", o->cased, "do not lower-case a BERT WordPiece vocabulary (default: tokenizer_config.json, else uncased)");
  cmd->add_flag("--normalize", o->normalize, "L2-normalise each embedding");
  cmd->add_option("--adapter", o->adapter, "a LoRA adapter directory (PEFT's, or kiln finetune --lora-r's) applied to "
                                           "--model's encoder");
  cmd->add_option("--sort-chunk", o->sort_chunk,
                  "lines sorted by length and batched together (Note [Embedding by length])")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-sort", o->no_sort, "batch in input order (no length sorting)");
  return [o] { return run_embed(*o); };
});

}  // namespace
}  // namespace kiln::tools
