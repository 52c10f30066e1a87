// TrainingArguments (train/trainer.h): range checks of the flags, the JSON
// recorded in every checkpoint, and where a run may write.
#include <cmath>
#include <filesystem>

#include "train/trainer.h"

namespace kiln::train {
namespace fs = std::filesystem;

namespace {

// An absolute path with symbolic links resolved as far as it exists, without a trailing separator.
fs::path canonical_dir(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) p = fs::absolute(path).lexically_normal();
  if (p.filename().empty() && p.has_relative_path()) p = p.parent_path();
  return p;
}

// Same directory: equal canonical paths, or the same file (bind mounts).
bool same_directory(const fs::path& a, const fs::path& b) {
  if (a == b) return true;
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

// `inner` is `outer` or lies somewhere below it.
bool is_within(fs::path inner, const fs::path& outer) {
  for (;;) {
    if (same_directory(inner, outer)) return true;
    if (!inner.has_relative_path()) return false;
    inner = inner.parent_path();
  }
}

}  // namespace

namespace {

// kiln::Error when the output directory is `dir` (the input of `flag`) or
// contains it; with `nested_too`, also when it lies inside `dir`.
void check_apart(const TrainingArguments& a, const std::string& dir, const char* flag, const char* kind,
                 const char* what, bool nested_too) {
  const fs::path in = canonical_dir(dir), out = canonical_dir(a.output_dir);
  const std::string both = "--output-dir " + a.output_dir + " and " + flag + " " + dir;
  KILN_CHECK(!same_directory(out, in), both, " are the same directory: the run would overwrite the ", what,
             " it starts from (and --overwrite-output-dir would delete them); choose another --output-dir");
  KILN_CHECK(!nested_too || !is_within(out, in), both, ": the output directory lies inside the input ", kind,
             " directory (", in.string(), "), so the run would write into the ", kind,
             " it starts from; choose a --output-dir outside it");
  KILN_CHECK(!is_within(in, out), both, ": the output directory contains the input ", kind, " directory (",
             in.string(), "), so --overwrite-output-dir or --save-total-limit could delete the ", what,
             " the run starts from; choose a --output-dir that does not contain it");
}

}  // namespace

void check_output_dir_apart_from_model(const TrainingArguments& a) {
  if (a.output_dir.empty()) return;
  if (!a.model.empty()) check_apart(a, a.model, "--model", "model", "pretrained weights", true);
  // A tokenizer given by path: its directory (a run may write below it).
  for (const auto& [path, flag] : {std::pair{a.tokenizer, "--tokenizer"}, std::pair{a.vocab, "--vocab"}}) {
    if (path.empty()) continue;
    const fs::path p(path);
    const fs::path dir = fs::is_directory(p) ? p : (p.has_parent_path() ? p.parent_path() : fs::path("."));
    check_apart(a, dir.string(), flag, "tokenizer", "tokenizer files", false);
  }
}

std::pair<int64_t, int64_t> parse_profile_steps(const std::string& value) {
  const auto bad = [&](const char* why) {
    fail("--profile-steps '", value, "': ", why, " (expected A:B, the first and last step to profile, 1 <= A <= B)");
  };
  const size_t colon = value.find(':');
  if (colon == std::string::npos) bad("no ':'");
  int64_t v[2] = {0, 0};
  const std::string parts[2] = {value.substr(0, colon), value.substr(colon + 1)};
  for (int i = 0; i < 2; ++i) {
    const std::string& p = parts[i];
    if (p.empty() || p.size() > 15 || p.find_first_not_of("0123456789") != std::string::npos)
      bad("A and B must be positive integers");
    v[i] = std::stoll(p);
  }
  if (v[0] < 1) bad("steps count from 1");
  if (v[0] > v[1]) bad("A is after B");
  return {v[0], v[1]};
}

void TrainingArguments::validate() const {
  auto positive = [](const char* flag, int64_t v) { KILN_CHECK(v >= 1, flag, " must be >= 1, got ", v); };
  positive("--batch-size", batch_size);
  positive("--grad-accum", grad_accum);
  KILN_CHECK(max_tokens_per_batch >= 0, "--max-tokens-per-batch must be >= 0 (0: off), got ", max_tokens_per_batch);
  KILN_CHECK(max_tokens_per_batch == 0 || task == "sequence-classification" || task == "token-classification",
             "--max-tokens-per-batch is for sequence-classification and token-classification; the ", task,
             " task's examples all have --max-seq-length tokens");
  positive("--max-seq-length", max_seq_length);
  positive("--logging-steps", logging_steps);
  KILN_CHECK(eval_batch_size >= 0, "--eval-batch-size must be >= 0, got ", eval_batch_size);
  KILN_CHECK(workers >= 0, "--workers must be >= 0, got ", workers);
  KILN_CHECK(shard_optimizer >= 0 && shard_optimizer <= 2, "--shard-optimizer must be 0, 1 or 2 (ZeRO stage), got ",
             shard_optimizer);
  KILN_CHECK(!(shard_optimizer == 2 && amp == "fp16"),
             "--shard-optimizer 2 with --amp fp16 is not supported (the loss scaler would see only this rank's "
             "gradients); use --shard-optimizer 1 or --amp bf16");
  KILN_CHECK(std::isfinite(lr) && lr >= 0, "--lr must be a finite number >= 0, got ", lr);
  KILN_CHECK(warmup_ratio >= 0 && warmup_ratio <= 1, "--warmup-ratio must be in [0, 1], got ", warmup_ratio);
  KILN_CHECK(warmup_steps >= 0, "--warmup-steps must be >= 0, got ", warmup_steps);
  KILN_CHECK(max_steps > 0 || (std::isfinite(epochs) && epochs > 0),
             "--epochs must be > 0 (or give --max-steps), got ", epochs);
  KILN_CHECK(weight_decay >= 0, "--weight-decay must be >= 0, got ", weight_decay);
  KILN_CHECK(optimizer == "adamw" || optimizer == "lamb" || optimizer == "sgd",
             "--optimizer must be adamw, lamb or sgd, got '", optimizer, "'");
  KILN_CHECK(lr_scheduler == "linear" || lr_scheduler == "cosine" || lr_scheduler == "constant" ||
                 lr_scheduler == "constant_with_warmup" || lr_scheduler == "polynomial",
             "--lr-scheduler must be linear, cosine, constant, constant_with_warmup or polynomial, got '",
             lr_scheduler, "'");
  KILN_CHECK(mlm_probability > 0 && mlm_probability <= 1, "--mlm-probability must be in (0, 1], got ",
             mlm_probability);
  KILN_CHECK(validation_split_percentage >= 0 && validation_split_percentage < 100,
             "--validation-split-percentage must be in [0, 100), got ", validation_split_percentage);
  KILN_CHECK(synthetic_documents >= 10, "--synthetic-documents must be >= 10, got ", synthetic_documents);
  KILN_CHECK(stop_after_steps >= 0, "--stop-after-steps must be >= 0, got ", stop_after_steps);
  KILN_CHECK(std::isfinite(max_grad_norm), "--max-grad-norm must be finite");
  KILN_CHECK(vocab.empty() || tokenizer.empty(), "give --vocab (a BERT vocab.txt) or --tokenizer, not both");
  KILN_CHECK(task == "sequence-classification" || task == "regression" || task == "token-classification" ||
                 task == "masked-lm" || task == "causal-lm",
             "--task must be sequence-classification, regression, token-classification, masked-lm or causal-lm, got '",
             task, "'");
  KILN_CHECK(!multi_label || task == "sequence-classification", "--multi-label applies to --task "
             "sequence-classification, not ", task);
  KILN_CHECK(!label_all_tokens || task == "token-classification",
             "--label-all-tokens applies to --task token-classification, not ", task);
  if (!profile_steps.empty()) parse_profile_steps(profile_steps);
  KILN_CHECK(amp == "none" || amp == "bf16" || amp == "fp16", "--amp must be none, bf16 or fp16, got '", amp, "'");
  KILN_CHECK(lora_r >= 0, "--lora-r must be >= 0 (0: no LoRA), got ", lora_r);
  if (lora_r > 0) {
    KILN_CHECK(!lora_target.empty() || !lora_target_regex.empty(),
               "--lora-r needs --lora-target (layer names such as query,value or q_proj,v_proj, or all-linear) or "
               "--lora-target-regex");
    KILN_CHECK(lora_target.empty() || lora_target_regex.empty(), "give --lora-target or --lora-target-regex, not both");
    KILN_CHECK(adapter.empty(), "--lora-r trains a new adapter; --adapter applies a trained one (not both)");
  } else {
    KILN_CHECK(lora_target.empty() && lora_target_regex.empty() && lora_modules_to_save.empty(),
               "--lora-target, --lora-target-regex and --lora-modules-to-save need --lora-r (the adapter's rank)");
  }
}

nlohmann::json TrainingArguments::to_json() const {
  return {{"model", model},
          {"config", config},
          {"vocab", vocab},
          {"tokenizer", tokenizer},
          {"cased", cased},
          {"train_file", train_file},
          {"validation_file", validation_file},
          {"validation_split_percentage", validation_split_percentage},
          {"synthetic_documents", synthetic_documents},
          {"max_seq_length", max_seq_length},
          {"text_column", text_column},
          {"pair_column", pair_column},
          {"label_column", label_column},
          {"task", task},
          {"multi_label", multi_label},
          {"label_all_tokens", label_all_tokens},
          {"no_header", no_header},
          {"mlm_probability", mlm_probability},
          {"whole_word_mask", whole_word_mask},
          {"workers", workers},
          {"batch_size", batch_size},
          {"eval_batch_size", eval_batch_size},
          {"grad_accum", grad_accum},
          {"max_tokens_per_batch", max_tokens_per_batch},
          {"lr", lr},
          {"warmup_ratio", warmup_ratio},
          {"warmup_steps", warmup_steps},
          {"epochs", epochs},
          {"max_steps", max_steps},
          {"weight_decay", weight_decay},
          {"optimizer", optimizer},
          {"lr_scheduler", lr_scheduler},
          {"adam_beta1", adam_beta1},
          {"adam_beta2", adam_beta2},
          {"adam_epsilon", adam_epsilon},
          {"momentum", momentum},
          {"max_grad_norm", max_grad_norm},
          {"seed", seed},
          {"output_dir", output_dir},
          {"save_steps", save_steps},
          {"save_total_limit", save_total_limit},
          {"eval_steps", eval_steps},
          {"logging_steps", logging_steps},
          {"device", device},
          {"world_size", world_size},
          {"amp", amp},
          {"freeze", freeze},
          {"lora_r", lora_r},
          {"lora_alpha", lora_alpha},
          {"lora_dropout", lora_dropout},
          {"lora_target", lora_target},
          {"lora_target_regex", lora_target_regex},
          {"lora_modules_to_save", lora_modules_to_save},
          {"lora_bias", lora_bias},
          {"lora_rslora", lora_rslora},
          {"adapter", adapter},
          {"gradient_checkpointing", gradient_checkpointing},
          {"shard_optimizer", shard_optimizer}};
}

}  // namespace kiln::train
