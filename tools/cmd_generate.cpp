// `kiln generate --model DIR --prompt TEXT`: the continuation of a prompt
// by a decoder (nn::AutoModelForCausalLM), printed as text. Greedy by
// default, as transformers' generate(); --do-sample draws from the
// temperature / top-k / top-p processed distribution (seeded by --seed);
// --repetition-penalty applies to both. Generation stops after
// --max-new-tokens, or at the config's eos_token_id (unless --ignore-eos).
// Runs on the KV cache (Note [KV cache], nn/generation.h).
#include <iostream>

#include <nlohmann/json.hpp>

#include "data/tokenizer/pipeline_tokenizer.h"
#include "kiln.h"
#include "nn/auto.h"
#include "nn/generation.h"
#include "tools/command.h"

namespace kiln::tools {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int64_t max_new_tokens = 20;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double repetition_penalty = 1.0;
  uint64_t seed = 42;
  bool ignore_eos = false;
  bool full_text = false;
};

// config.json's integer field, or nullopt when absent or null.
std::optional<int64_t> config_int(const ModelConfig& config, const char* key) {
  const nlohmann::json j = nlohmann::json::parse(config.to_json_string());
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

int run_generate(const GenerateOptions& o, const CLI::App& cmd) {
  if (!o.do_sample)
    for (const char* flag : {"--temperature", "--top-k", "--top-p", "--seed"})
      KILN_CHECK(cmd.count(flag) == 0, flag, " applies to sampling: add --do-sample (greedy decoding would ignore it)");
  nn::check_model_dir(o.model, true, "--model");
  // Note [Choosing a tokenizer]: tokenizer.json, else the older files.
  const std::unique_ptr<data::TextTokenizer> tok = data::open_text_tokenizer(o.model);
  auto model = nn::AutoModelForCausalLM::from_pretrained(o.model);  // a decoder, or the family's error
  model->eval();
  const ModelConfig& config = model->model_config();
  check_vocab_matches(config, tok->vocab_size(), o.model + "/config.json");

  std::vector<int64_t> ids;
  for (int32_t id : tok->encode(o.prompt).ids) ids.push_back(id);
  if (ids.empty()) {  // transformers starts an empty prompt from bos_token_id
    const std::optional<int64_t> bos = config_int(config, "bos_token_id");
    KILN_CHECK(bos, "--prompt gives no tokens and ", o.model, "/config.json has no bos_token_id to start from");
    ids.push_back(*bos);
  }
  const int64_t T0 = static_cast<int64_t>(ids.size()), limit = config.facts().max_sequence_length;
  KILN_CHECK(T0 + o.max_new_tokens <= limit, "--prompt (", T0, " tokens) + --max-new-tokens ", o.max_new_tokens,
             " exceeds the ", limit, " positions of ", o.model, "/config.json");

  nn::GenerationConfig g;
  g.max_new_tokens = o.max_new_tokens;
  g.do_sample = o.do_sample;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.top_p = o.top_p;
  g.repetition_penalty = o.repetition_penalty;
  if (!o.ignore_eos) g.eos_token_id = config_int(config, "eos_token_id");
  Generator gen(o.seed);
  const nn::DecoderStep step = [&](const Tensor& x, nn::KVCache* cache) {
    return model->forward(x, Tensor(), Tensor(), cache).logits;
  };
  const std::vector<int64_t> out = nn::generate(step, tensor_from(ids, {1, T0}), g, &gen).to_vector<int64_t>();
  std::vector<int32_t> shown;
  for (size_t i = o.full_text ? 0 : static_cast<size_t>(T0); i < out.size(); ++i)
    shown.push_back(static_cast<int32_t>(out[i]));
  std::cout << tok->decode(shown, /*skip_special_tokens=*/true) << '\n';
  return 0;
}

const Registrar reg("generate", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("generate",
                                 "Print a decoder's continuation of --prompt (greedy unless --do-sample), "
                                 "from a Hugging Face model directory (GPT-2, ...)");
  auto o = std::make_shared<GenerateOptions>();
  cmd->add_option("--model", o->model, "model directory (config.json, model.safetensors, tokenizer.json)")->required();
  cmd->add_option("--prompt", o->prompt, "the text to continue")->required();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate at most (default 20)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--do-sample", o->do_sample, "sample instead of greedy decoding");
  cmd->add_option("--temperature", o->temperature, "divide the logits by this before sampling (> 0)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", o->top_k, "sample from the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "sample from the smallest set with this much probability (0, 1]")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repetition-penalty", o->repetition_penalty,
                  "divide (multiply, when negative) the logits of tokens already present (1: off)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", o->seed, "seed of the sampling generator (default 42)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "do not stop at the config's eos_token_id");
  cmd->add_flag("--full-text", o->full_text, "print the prompt and the continuation (default: the continuation)");
  return [o, cmd] { return run_generate(*o, *cmd); };
});

}  // namespace
}  // namespace kiln::tools
