// `kiln pretrain`, `kiln finetune`, `kiln evaluate`: the training tools.
//
// Flags are named after the Hugging Face example scripts where they overlap
// and bound to train::TrainingArguments (train/trainer.h). Any flag can also
// come from a JSON file given with --args-file (tools/args_file.h); flags on
// the command line win over it.
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/error.h"
#include "core/file_util.h"
#include "cuda/cuda.h"
#include "dist/process_group.h"
#include "kiln.h"
#include "nn/safetensors.h"
#include "tools/command.h"
#include "train/causal_lm_task.h"
#include "train/mlm_task.h"
#include "train/task_util.h"
#include "train/tasks.h"
#include "train/preemption.h"
#include "train/trainer.h"

namespace kiln::tools {
namespace {
namespace fs = std::filesystem;
using train::TrainingArguments;

enum class Mode { Pretrain, Finetune, Evaluate };

struct TrainCommand {
  TrainingArguments args;
  bool overwrite_output_dir = false;
  bool memory_summary = false;
  std::string args_file;
};

}  // namespace

void add_finetune_data_flags(CLI::App* cmd, TrainingArguments& a) {
  cmd->add_option("--task", a.task,
                  "sequence-classification (a float label column: regression), regression, token-classification "
                  "(CoNLL files) or causal-lm (a decoder on text); evaluate/predict: the fine-tuned model's")
      ->capture_default_str();
  cmd->add_option("--text-column", a.text_column,
                  "text column (default: detected, e.g. sentence; with --no-header a 1-based index)");
  cmd->add_option("--pair-column", a.pair_column, "second text column (default: detected; 'none': no pair)");
  cmd->add_option("--label-column", a.label_column,
                  "label column (token-classification: a 1-based index, default the last column)")
      ->capture_default_str();
  cmd->add_flag("--no-header", a.no_header, "TSV/CSV files without a header line: column flags are 1-based indexes");
  cmd->add_flag("--multi-label", a.multi_label,
                "several labels per example (comma-separated; JSONL: an array): sigmoid outputs, binary cross-entropy");
  cmd->add_flag("--label-all-tokens", a.label_all_tokens,
                "token-classification: label every subword of a word, not only the first");
}

namespace {

// LoRA (Note [LoRA] in nn/lora.h), as PEFT's LoraConfig fields.
void add_lora_flags(CLI::App* cmd, TrainingArguments& a) {
  cmd->add_option("--lora-r", a.lora_r,
                  "train LoRA adapters of this rank (PEFT's r) on the --lora-target layers, everything else frozen; "
                  "the run saves only the adapter (PEFT format)");
  cmd->add_option("--lora-alpha", a.lora_alpha, "LoRA alpha: the adapter's term is scaled by alpha / r")
      ->capture_default_str();
  cmd->add_option("--lora-dropout", a.lora_dropout, "dropout on the adapters' input")->capture_default_str();
  cmd->add_option("--lora-target", a.lora_target,
                  "layers to adapt, by name as PEFT's target_modules (query,value; q_proj,v_proj; c_attn), or "
                  "all-linear")
      ->delimiter(',');
  cmd->add_option("--lora-target-regex", a.lora_target_regex,
                  "layers to adapt: a regular expression their full names match (PEFT's target_modules string)");
  cmd->add_option("--lora-modules-to-save", a.lora_modules_to_save,
                  "modules trained in full and saved with the adapter (the classification head always is)")
      ->delimiter(',');
  cmd->add_option("--lora-bias", a.lora_bias, "none, all or lora_only: which biases train")
      ->check(CLI::IsMember({"none", "all", "lora_only"}))
      ->capture_default_str();
  cmd->add_flag("--lora-rslora", a.lora_rslora, "rank-stabilised LoRA: scale by alpha / sqrt(r)");
}

void add_flags(CLI::App* cmd, TrainCommand& c, Mode mode) {
  TrainingArguments& a = c.args;
  const bool training = mode != Mode::Evaluate;
  cmd->add_option("--args-file", c.args_file,
                  "JSON file of flag values, e.g. {\"lr\": 1e-4, \"batch-size\": 16}; command-line flags win");
  cmd->add_option("--model", a.model,
                  mode == Mode::Pretrain ? "Hugging Face model directory to continue pretraining from"
                                         : "Hugging Face model directory (config.json, model.safetensors, tokenizer.json or vocab.txt)");
  if (mode == Mode::Pretrain)
    cmd->add_option("--task", a.task,
                    "masked-lm (an encoder, BERT-style masking) or causal-lm (a decoder: next-token prediction on "
                    "blocks of --max-seq-length tokens)")
        ->check(CLI::IsMember({"masked-lm", "causal-lm"}))
        ->capture_default_str();
  if (mode == Mode::Pretrain)
    cmd->add_option("--config", a.config,
                    "config of a new model: a config.json or a preset (bert-tiny, bert-mini, bert-small, bert-base); "
                    "default without --train-file: a small demo model");
  cmd->add_option("--vocab", a.vocab, "a BERT vocab.txt (default: the model directory's tokenizer)");
  cmd->add_option("--tokenizer", a.tokenizer,
                  "a tokenizer.json or model directory, any family (default: the model directory's tokenizer.json, "
                  "else its vocab.txt or other tokenizer files)");
  cmd->add_flag("--cased", a.cased, "keep case and accents of a BERT WordPiece vocabulary (default: lower-case unless tokenizer_config.json says)");
  if (training) {
    cmd->add_option("--train-file", a.train_file,
                    mode == Mode::Pretrain
                        ? "raw text (one sentence per line, blank lines between documents) or a `kiln prepare` "
                          "folder; default: a synthetic corpus generated from --seed"
                        : "labelled TSV, CSV or JSONL (GLUE layout)");
  }
  cmd->add_option("--validation-file", a.validation_file,
                  mode == Mode::Finetune ? "labelled file to evaluate on"
                                         : "text, `kiln prepare` folder or labelled file to evaluate on");
  cmd->add_option("--max-seq-length", a.max_seq_length, "tokens per sequence, [CLS] and [SEP] included")
      ->capture_default_str();
  cmd->add_option("--batch-size", a.batch_size, "examples per micro-batch")->capture_default_str();
  cmd->add_option("--eval-batch-size", a.eval_batch_size, "examples per evaluation batch (0: --batch-size)");
  cmd->add_option("--workers", a.workers, "data-loader worker threads (0: load in the training thread)")
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "random seed (initialisation, dropout, shuffling, masking)")->capture_default_str();
  cmd->add_option("--device", a.device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--amp", a.amp, "mixed precision: none, bf16 or fp16 (fp16 with dynamic loss scaling)")
      ->capture_default_str();
  if (training)
    cmd->add_option("--shard-optimizer", a.shard_optimizer,
                    "under mpirun: 1 shards the optimizer state over the ranks (ZeRO stage 1, the same results), "
                    "2 also reduce-scatters the gradients (stage 2); 0: every rank keeps all of it")
        ->capture_default_str();
  if (training)
    cmd->add_flag("--gradient-checkpointing", a.gradient_checkpointing,
                  "recompute each layer's activations in backward instead of keeping them: less memory, "
                  "about one more forward per step, the same results");
  cmd->add_option("--output-dir", a.output_dir,
                  training ? "where checkpoints, metrics and the final model go (required)"
                           : "also write eval_results.json here");
  if (mode != Mode::Finetune) {
    cmd->add_option("--mlm-probability", a.mlm_probability, "fraction of tokens to mask")->capture_default_str();
    cmd->add_flag("--whole-word-mask", a.whole_word_mask, "mask whole words (a word and its ## pieces)");
  }
  if (mode != Mode::Pretrain) add_finetune_data_flags(cmd, a);
  if (!training) {
    cmd->add_option("--adapter", a.adapter, "a LoRA adapter directory (PEFT's, or kiln finetune --lora-r's output) "
                                            "applied to --model");
    return;
  }
  cmd->add_option("--freeze", a.freeze,
                  "freeze the parameters whose names a regular expression finds (e.g. embeddings, "
                  "'encoder\\.layer\\.[0-3]\\.'): no gradient, no optimizer state; repeatable");
  if (mode == Mode::Finetune) add_lora_flags(cmd, a);
  if (mode == Mode::Finetune)
    cmd->add_option("--max-tokens-per-batch", a.max_tokens_per_batch,
                    "training batches of similar-length examples, at most --batch-size of them and at most this "
                    "many padded tokens each (sequence and token classification; 0: off)")
        ->capture_default_str();
  if (mode == Mode::Pretrain)
    cmd->add_option("--validation-split-percentage", a.validation_split_percentage,
                    "without --validation-file: % of the training examples held out for evaluation")
        ->capture_default_str();
  if (mode == Mode::Pretrain)
    cmd->add_option("--synthetic-documents", a.synthetic_documents,
                    "without --train-file: documents of the synthetic corpus (validation: a tenth as many)")
        ->capture_default_str();
  cmd->add_option("--grad-accum", a.grad_accum, "micro-batches per optimizer step (gradient accumulation)")
      ->capture_default_str();
  cmd->add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--warmup-ratio", a.warmup_ratio, "fraction of the steps with a linear warm-up")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", a.warmup_steps, "warm-up steps (overrides --warmup-ratio when > 0)");
  cmd->add_option("--epochs", a.epochs, "passes over the training data")->capture_default_str();
  cmd->add_option("--max-steps", a.max_steps, "optimizer steps (overrides --epochs when > 0)");
  cmd->add_option("--weight-decay", a.weight_decay, "decoupled weight decay (never on biases and LayerNorm)")
      ->capture_default_str();
  cmd->add_option("--optimizer", a.optimizer, "adamw, lamb or sgd")->capture_default_str();
  cmd->add_option("--lr-scheduler", a.lr_scheduler, "linear, cosine, constant, constant_with_warmup or polynomial")
      ->capture_default_str();
  cmd->add_option("--adam-beta1", a.adam_beta1, "AdamW/LAMB beta1")->capture_default_str();
  cmd->add_option("--adam-beta2", a.adam_beta2, "AdamW/LAMB beta2")->capture_default_str();
  cmd->add_option("--adam-epsilon", a.adam_epsilon, "AdamW/LAMB epsilon")->capture_default_str();
  cmd->add_option("--momentum", a.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--max-grad-norm", a.max_grad_norm, "clip the global gradient norm (<= 0: no clipping)")
      ->capture_default_str();
  cmd->add_option("--save-steps", a.save_steps, "save a checkpoint every N steps (<= 0: only at the end)")
      ->capture_default_str();
  cmd->add_option("--save-total-limit", a.save_total_limit, "keep only the newest N checkpoints (0: all)");
  cmd->add_option("--eval-steps", a.eval_steps, "evaluate every N steps (<= 0: only at the end)");
  cmd->add_option("--logging-steps", a.logging_steps, "log metrics every N steps")->capture_default_str();
  cmd->add_flag("--resume", a.resume,
                "continue from the newest checkpoint in --output-dir that verifies (SIGTERM/SIGINT stop a run "
                "after the current step with a checkpoint and exit status 75)");
  cmd->add_option("--stop-after-steps", a.stop_after_steps,
                  "stop this process after N steps, keeping the schedule of the full run (resume later)");
  cmd->add_option("--profile-steps", a.profile_steps,
                  "profile steps A..B (1-based, e.g. 2:3): their Chrome trace (Perfetto, chrome://tracing) and "
                  "key_averages table go to --profile-dir");
  cmd->add_option("--profile-dir", a.profile_dir,
                  "where --profile-steps writes trace-stepsA-B-rankR.json and .txt (default: <output-dir>/profile; "
                  "an existing file is never replaced)");
  cmd->add_flag("--memory-summary", c.memory_summary,
                "print the caching allocators' state (kiln::memory_summary()) at the end of the run");
  cmd->add_flag("--overwrite-output-dir", c.overwrite_output_dir,
                "remove a previous run's checkpoints, metrics and model from --output-dir first (never the --model "
                "directory)");
}

// Defaults of the synthetic demo for every flag the user did not give.
void apply_demo_defaults(CLI::App* cmd, TrainingArguments& a) {
  auto unset = [&](const char* flag) { return cmd->get_option(flag)->count() == 0; };
  if (unset("--lr")) a.lr = 1e-3;
  if (unset("--max-steps") && unset("--epochs")) a.max_steps = 600;
  if (unset("--warmup-ratio") && unset("--warmup-steps")) a.warmup_ratio = 0.05;
  if (unset("--max-seq-length")) a.max_seq_length = 64;
  if (unset("--weight-decay")) a.weight_decay = 0.01;
  if (unset("--logging-steps")) a.logging_steps = 25;
  if (unset("--eval-steps")) a.eval_steps = 100;
  if (unset("--save-steps")) a.save_steps = 200;
  if (unset("--output-dir")) a.output_dir = "kiln-demo";
}

void check_device(const std::string& name) {
  const Device d = Device::parse(name);
  if (d.type == DeviceType::CUDA) {
    KILN_CHECK(cuda_built(), "--device ", name, ": ", cuda_unavailable_reason());
    const int count = cuda::device_count();
    KILN_CHECK(d.index < count, "--device ", name, ": no such CUDA device (", count, " visible)");
  }
}

// Removes what a previous run wrote (never other files).
void clear_previous_run(const fs::path& dir) {
  if (!fs::is_directory(dir)) return;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool ours = name.rfind("checkpoint-", 0) == 0 || name.rfind(".checkpoint-", 0) == 0 ||
                      name.rfind("events.out.tfevents.", 0) == 0 || name == "metrics.jsonl" ||
                      name == "training.svg" || name == "config.json" || name == "model.safetensors" ||
                      name == "vocab.txt" || name == "tokenizer_config.json" || name == "tokenizer.json" ||
                      name == "special_tokens_map.json" || name == "eval_results.json" ||
                      name == "adapter_config.json" || name == "adapter_model.safetensors";
    if (ours) fs::remove_all(e.path());
  }
}

void write_eval_results(const std::string& dir, const std::map<std::string, double>& m) {
  if (dir.empty()) return;
  fs::create_directories(dir);
  const std::string text = nlohmann::json(m).dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "eval_results.json").string(), text);
}

int run_training(CLI::App* cmd, TrainCommand& c, Mode mode) {
  TrainingArguments& a = c.args;
  const bool demo = mode == Mode::Pretrain && a.train_file.empty();
  if (demo) apply_demo_defaults(cmd, a);
  check_device(a.device);
  if (!a.model.empty()) nn::check_model_dir(a.model, true, "--model");
  KILN_CHECK(!a.output_dir.empty(), "--output-dir is required");
  if (!a.profile_steps.empty()) train::parse_profile_steps(a.profile_steps);  // before any data is read
  KILN_CHECK(!(c.overwrite_output_dir && a.resume), "--overwrite-output-dir and --resume contradict each other");
  // Before anything is removed: never the model the run starts from.
  train::check_output_dir_apart_from_model(a);
  // Under mpirun: one process per rank (Note [Data-parallel training] in train/trainer.h);
  // with --device cuda the ranks reduce over NCCL, each on GPU local_rank % GPUs.
  dist::ProcessGroupOptions pg;
  if (Device::parse(a.device).is_cuda() && dist::launched_by_mpi()) {
    // The rank's own GPU is current before the group (or anything else) touches
    // CUDA, so no rank makes a context on GPU 0 (Note [NCCL device]).
    pg.backend = "nccl";
    pg.device = dist::local_rank() % cuda::device_count();
    cuda::set_device(pg.device);
  }
  const dist::ProcessGroupPtr group = dist::init_process_group(pg);
  if (group->device().is_cuda()) {
    cuda::set_device(group->device().index);
    a.device = group->device().str();
  }
  a.rank = group->rank();
  a.world_size = group->size();
  std::ostringstream discard;
  std::ostream& out = a.rank == 0 ? std::cout : discard;
  if (a.world_size > 1)
    out << "data parallel: " << a.world_size << " processes (" << group->backend() << "), " << a.batch_size
        << " examples per process and step\n";
  if (c.overwrite_output_dir && a.rank == 0) clear_previous_run(a.output_dir);
  group->barrier();
  std::unique_ptr<train::TrainTask> task;
  double baseline = std::numeric_limits<double>::quiet_NaN();
  train::TrainResult r;
  try {
    KILN_CHECK(mode == Mode::Pretrain || a.task != "masked-lm", "--task masked-lm is kiln pretrain's");
    if (a.task == "causal-lm") {  // pretrain or finetune a decoder on text
      KILN_CHECK(!demo, "--task causal-lm needs --train-file (text, or a folder from kiln prepare)");
      task = std::make_unique<train::CausalLmTask>(a, out, /*for_training=*/true, group);
    } else if (mode == Mode::Pretrain) {
      auto mlm = std::make_unique<train::MlmTask>(a, out, /*for_training=*/true, group);
      baseline = mlm->unigram_baseline();
      task = std::move(mlm);
    } else {
      task = train::make_finetune_task(a, out);
    }
    r = train::train(a, *task, out, group);
  } catch (const std::exception& e) {
    if (a.world_size == 1) throw;
    // One rank's error ends the whole job now, not at the others' collective timeout.
    std::cerr << "kiln: error (rank " << a.rank << "): " << e.what() << std::endl;
    dist::abort_process_group(1);
  }
  if (c.memory_summary && a.rank == 0) std::cout << memory_summary();
  if (r.stop_signal != 0) return train::kPreemptedExitCode;  // Note [Preemption]: the checkpoint is written
  if (r.finished && a.rank == 0) {
    std::cout << "final evaluation:";
    for (auto& [k, v] : r.eval) std::cout << " " << k << " " << v;
    std::cout << "\n";
    if (demo && r.eval.count("mlm_accuracy"))
      std::cout << "masked-LM accuracy " << r.eval.at("mlm_accuracy") << " against the unigram baseline "
                << baseline << (r.eval.at("mlm_accuracy") > baseline ? ": the model learned the language's structure\n"
                                                                      : ": no better than the baseline\n");
  }
  return 0;
}

int run_evaluate(TrainCommand& c) {
  TrainingArguments& a = c.args;
  check_device(a.device);
  KILN_CHECK(!a.model.empty(), "--model DIR is required");
  nn::check_model_dir(a.model, true, "--model");
  KILN_CHECK(!a.validation_file.empty(), "--validation-file is required");
  const std::string ext = fs::path(a.validation_file).extension().string();
  // A fine-tuned model's own task; else the file decides (labelled table: classification; text: masked LM).
  const std::string own = train::task_name_of(a);  // an adapter's head, with --adapter
  const bool finetuned = own == "sequence-classification" || own == "token-classification";
  const bool decoder = own == "causal-lm" || a.task == "causal-lm";
  const bool labelled = finetuned || ext == ".tsv" || ext == ".csv" || ext == ".jsonl";
  std::map<std::string, double> m;
  KILN_CHECK(a.amp == "none" || a.amp == "bf16" || a.amp == "fp16", "--amp must be none, bf16 or fp16");
  AutocastGuard autocast(a.amp == "fp16" ? DType::Float16 : DType::BFloat16, a.amp != "none");
  if (decoder) {
    m = train::CausalLmTask(a, std::cerr, /*for_training=*/false).evaluate();
  } else if (labelled) {
    m = train::make_finetune_task(a, std::cerr, /*for_training=*/false)->evaluate();
  } else {
    train::MlmTask task(a, std::cerr, /*for_training=*/false);
    m = task.evaluate();
  }
  KILN_CHECK(!m.empty(), "--validation-file ", a.validation_file, " gives no example to evaluate");
  std::cout << nlohmann::json(m).dump() << "\n";
  write_eval_results(a.output_dir, m);
  return 0;
}

const Registrar reg_pretrain("pretrain", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("pretrain", "Pretrain a masked language model, or a decoder with --task causal-lm "
                                             "(no data flags: a BERT demo on a synthetic corpus)");
  auto c = std::make_shared<TrainCommand>();
  c->args.task = "masked-lm";
  add_flags(cmd, *c, Mode::Pretrain);
  return [cmd, c] { return run_training(cmd, *c, Mode::Pretrain); };
});

const Registrar reg_finetune("finetune", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("finetune", "Fine-tune a pretrained BERT: sequence classification, regression, "
                                             "multi-label or token classification (NER)");
  auto c = std::make_shared<TrainCommand>();
  c->args.lr = 2e-5;
  add_flags(cmd, *c, Mode::Finetune);
  return [cmd, c] { return run_training(cmd, *c, Mode::Finetune); };
});

const Registrar reg_evaluate("evaluate", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("evaluate", "Evaluate a model: classification metrics on a labelled file, "
                                             "masked-LM accuracy and perplexity on text");
  auto c = std::make_shared<TrainCommand>();
  add_flags(cmd, *c, Mode::Evaluate);
  return [c] { return run_evaluate(*c); };
});

}  // namespace
}  // namespace kiln::tools
