// The training loop shared by `kiln pretrain` and `kiln finetune`.
//
//   TrainingArguments args;  args.output_dir = "out"; args.max_steps = 1000; ...
//   MlmTask task(args);                      // or ClassificationTask (train/tasks.h)
//   TrainResult r = train(args, task, std::cout);
//
// A TrainTask owns what differs between tasks: the model, its data loaders,
// the forward pass that yields a loss, evaluation and the files saved beside
// the weights. train() owns everything else: optimizer and schedule, gradient
// accumulation and clipping, logging, evaluation and checkpoint cadence, and
// resuming.
//
// Note [Training step accounting]
// The micro-batches of all epochs form one stream: epoch e's batches in its
// sampler order, then epoch e + 1's. One optimizer step consumes grad_accum
// consecutive micro-batches (a step may straddle two epochs). Without
// max_steps, the run makes ceil(epochs * batches_per_epoch / grad_accum)
// steps. `step` counts completed optimizer steps; save, eval and logging
// happen after step s when s is a multiple of their interval, and at the end.
//
// Note [Exact resume]
// A checkpoint written after step s holds everything the next step reads:
// weights, optimizer buffers and step counts, the schedule's position, the
// default generator's Philox state (dropout), and the loader's (epoch,
// batches consumed); data randomness is a pure function of (seed, epoch,
// example index) (Note [Loader randomness] in data/dataset.h). Evaluation
// draws no random numbers. So a run resumed from checkpoint s computes
// bit-for-bit the same steps s + 1, s + 2, ... as the run that wrote it, for
// any thread or worker count (tests/test_trainer.cpp checks losses and weights).
// With --amp fp16 the GradScaler's scale and growth tracker are saved too;
// a resumed run must use the same --amp.
// stop_after_steps ends a process early without changing the schedule, the
// way a job with a time limit stops and later resumes; so does SIGTERM or
// SIGINT (Note [Preemption] in train/preemption.h).
// Resume takes the newest checkpoint that verifies against its manifest
// (Note [Checkpoint manifest] in train/checkpoint.h), naming any it skipped,
// and refuses one written for another model shape, task, schedule, --amp or
// vocabulary: the CRC-32C of vocab.txt at the start of the run is kept in
// every checkpoint ("vocab_crc32c") and must match the task's vocab.txt.
//
// Note [Agreed step counts]
// Under data parallel every rank must run the same optimizer steps, or the
// ranks that run more wait in a gradient all-reduce for peers that have
// finished (a hang until the collective timeout). The samplers give every
// rank the same number of batches, but a task's data need not (a rank's own
// files, a length-bucketing sampler). So train() agrees on batches per epoch
// first: an all_reduce(max) of (-local, local) gives the fewest and the most;
// every rank then treats an epoch as that fewest number of batches (ending
// its epoch early when it has more, rank 0 says so) and derives the same total
// steps from it. tests/dist/test_ddp.cpp (Trainer.AgreesOnStepsWithUnevenShards)
// runs ranks with 3 and 5 batches per epoch.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/tensor.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/sampler.h"
#include "kiln/dist/process_group.h"
#include "kiln/core/error.h"
#include "kiln/nn/models/bert_config.h"
#include "kiln/nn/model_config.h"
#include "kiln/nn/module.h"

namespace kiln::train {

// Flags of kiln pretrain / finetune / evaluate (names as the Hugging Face
// example scripts where they overlap; tools/cmd_train.cpp binds them).
struct TrainingArguments {
  // model and vocabulary
  std::string model;   // Hugging Face model directory to start from ("": a new model)
  std::string config;  // new model: a config.json path or a preset (bert-tiny, ...)
  std::string vocab;   // vocab.txt ("": the model directory's)
  // A tokenizer.json or model directory (HF's --tokenizer_name; "": --vocab,
  // else the model directory's). At most one of vocab and tokenizer.
  std::string tokenizer;
  bool cased = false;  // keep case and accents (default: lower-case, as bert-base-uncased)
  // data
  std::string train_file;       // pretrain: raw text or a `kiln prepare` folder ("": synthetic corpus)
  std::string validation_file;  // "": pretrain holds out validation_split_percentage of the examples
  int64_t validation_split_percentage = 5;
  int64_t synthetic_documents = 20000;  // documents of the synthetic corpus (validation: a tenth as many)
  int64_t max_seq_length = 128;
  std::string text_column, pair_column, label_column = "label";  // finetune ("": detect)
  // finetune: sequence-classification (labels from the file; a float label
  // column is regression, as transformers' run_glue), regression, or
  // token-classification (CoNLL files; train/token_classification_task.h);
  // causal-lm (text; train/causal_lm_task.h). pretrain: masked-lm or causal-lm.
  std::string task = "sequence-classification";
  bool multi_label = false;       // sequence-classification: several labels per example (sigmoid + BCE)
  bool label_all_tokens = false;  // token-classification: label every subword, not only a word's first
  bool no_header = false;         // TSV/CSV without a header line: the column flags are 1-based indexes
  double mlm_probability = 0.15;
  bool whole_word_mask = false;
  int64_t workers = 2;
  // optimisation
  int64_t batch_size = 32;
  int64_t eval_batch_size = 0;  // 0: batch_size
  int64_t grad_accum = 1;
  // > 0: training batches of similar-length examples, at most batch_size of
  // them and at most this many padded tokens each (Note [Token-budgeted
  // batches], data/token_budget_sampler.h); tasks with variable-length
  // examples only (sequence and token classification).
  int64_t max_tokens_per_batch = 0;
  double lr = 5e-5;
  double warmup_ratio = 0.0;
  int64_t warmup_steps = 0;  // > 0 overrides warmup_ratio
  double epochs = 3.0;
  int64_t max_steps = -1;  // > 0 overrides epochs
  double weight_decay = 0.0;
  std::string optimizer = "adamw";         // adamw | lamb | sgd
  std::string lr_scheduler = "linear";     // linear | cosine | constant | constant_with_warmup | polynomial
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double momentum = 0.9;                   // sgd
  double max_grad_norm = 1.0;              // <= 0: no clipping
  uint64_t seed = 42;
  // output and cadence
  std::string output_dir;
  int64_t save_steps = 500;   // <= 0: save only at the end
  int64_t save_total_limit = 0;  // > 0: keep only the newest N checkpoints
  int64_t eval_steps = 0;     // <= 0: evaluate only at the end
  int64_t logging_steps = 50;
  bool resume = false;
  int64_t stop_after_steps = 0;  // > 0: stop this process after that many steps (Note [Exact resume])
  // cpu | cuda[:N]: the tasks build the model there (train/task_util.h), move
  // each batch there, and the optimizer keeps its state there; checkpoints
  // and the saved model are written from CPU copies, so they do not depend on it.
  std::string device = "cpu";
  std::string amp = "none";  // none | bf16 | fp16 (autocast; fp16 adds dynamic loss scaling)
  // Parameter-efficient fine-tuning (Note [Frozen parameters] in nn/freeze.h,
  // Note [LoRA] in nn/lora.h). freeze: regular expressions searched in the
  // parameters' names; those parameters get no gradient and no optimizer state.
  std::vector<std::string> freeze;
  // lora_r > 0: LoRA adapters of rank lora_r on the lora_target layers (PEFT's
  // target_modules: names, or all-linear; lora_target_regex: PEFT's string
  // form), everything else frozen but lora_modules_to_save (and the task's
  // head), the biases lora_bias says; the run saves the adapter in PEFT's
  // format (adapter_config.json, adapter_model.safetensors) instead of
  // model.safetensors. lora_rslora: scale by alpha / sqrt(r).
  int64_t lora_r = 0;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  std::vector<std::string> lora_target;
  std::string lora_target_regex;
  std::vector<std::string> lora_modules_to_save;
  std::string lora_bias = "none";
  bool lora_rslora = false;
  // evaluate / predict / embed: a LoRA adapter directory (PEFT's, or kiln
  // finetune --lora-r's output) applied to --model; its config.json, when it
  // has one, names the fine-tuned head's labels.
  std::string adapter;
  // Recompute every encoder/decoder layer's activations in backward instead
  // of keeping them (Note [Gradient checkpointing in the models], nn/module.h):
  // less memory, about one more forward per step, the same results.
  bool gradient_checkpointing = false;
  // Data parallel: this process's rank and the number of processes (set by
  // the tool from dist::init_process_group(), not flags). Each rank trains on
  // its shard (data::DistributedSampler) with batch_size examples per step.
  int64_t rank = 0, world_size = 1;
  // Data parallel: 1 or 2 shards the optimizer state (ZeRO stage 1; 2 also
  // reduce-scatters the gradients): Note [Sharded optimizer state] in
  // dist/ddp.h. 0: every rank keeps all of it.
  int64_t shard_optimizer = 0;
  // Profiling (Note [Profiler], core/profiler.h): "A:B" records steps A..B
  // (1-based, A <= B) and writes their Chrome trace and key_averages table
  // into profile_dir ("": <output_dir>/profile), never over an existing file.
  std::string profile_steps;
  std::string profile_dir;

  // Checks ranges and choices; kiln::Error naming the flag (e.g. "--batch-size must be >= 1, got 0").
  void validate() const;
  nlohmann::json to_json() const;
};

// One forward pass of a micro-batch.
struct MicroBatch {
  Tensor loss;             // scalar mean loss of the micro-batch, attached to the graph
  int64_t tokens = 0;      // non-padding input tokens (for tokens/s)
  int64_t correct = 0;     // training accuracy counts (MLM: masked tokens; classification: examples)
  int64_t predicted = 0;
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;
  virtual nn::Module& model() = 0;
  // The model's config as its family wrote it (Note [Model-agnostic
  // config]): saved as config.json with every checkpoint and the final
  // model, and checked on --resume. Override this (any family) or, as a
  // BERT-schema task written for kiln 0.1, config().
  virtual ModelConfig model_config() const { return ModelConfig(config()); }
  // kiln 0.1's BERT-only form, kept for tasks that override it.
  virtual const BertConfig& config() const {
    fail("TrainTask: override model_config() (or, for a BERT-schema model, config())");
  }
  // "mlm" or "classification" (recorded in checkpoints; resume checks it).
  virtual std::string kind() const = 0;
  virtual size_t batches_per_epoch() const = 0;
  virtual data::LoaderState loader_state() const = 0;
  virtual void load_loader_state(const data::LoaderState& state) = 0;
  // Starts `epoch` from its first batch.
  virtual void start_epoch(int64_t epoch) = 0;
  // Forward of the next micro-batch of the current epoch (model in train
  // mode); nullopt at the end of the epoch.
  virtual std::optional<MicroBatch> forward_next() = 0;
  // Metrics on the validation data, computed in eval mode without gradients
  // and without drawing random numbers; empty when there is no validation data.
  virtual std::map<std::string, double> evaluate() = 0;
  // Seconds the training loader spent inside next() so far.
  virtual double loader_wait_seconds() const = 0;
  // Files saved beside the weights (vocab.txt, tokenizer_config.json, ...).
  virtual std::map<std::string, std::string> extra_files() const { return {}; }
};

struct TrainResult {
  int64_t step = 0;          // optimizer steps completed (total, across resumes)
  int64_t total_steps = 0;   // steps the schedule spans
  bool finished = false;     // false when stopped by stop_after_steps or a signal
  int stop_signal = 0;       // SIGTERM / SIGINT that stopped the run (Note [Preemption]), else 0
  double last_loss = 0;      // mean loss of the last logging window
  std::map<std::string, double> eval;  // the last evaluation
  std::string last_checkpoint;
};

// Note [Training step accounting] and [Exact resume]. Writes checkpoints,
// metrics.jsonl, TensorBoard events, the final model (config.json,
// model.safetensors and extra files in output_dir) and training.svg.
//
// Note [Data-parallel training]: with a process group of size > 1 (mpirun),
// the model is wrapped in dist::DistributedDataParallel (rank 0's weights,
// gradients averaged in buckets during backward, no all-reduce on
// accumulation micro-steps); every rank runs the same steps on its shard.
// Rank 0 alone prints, logs and writes checkpoints and the final model; the
// logged loss, accuracy and tokens/s are over all ranks. Every rank
// evaluates the whole validation set (same result everywhere) and resumes
// from the same checkpoint (rank 0 picks it and broadcasts its step). The
// ranks agree on the steps (Note [Agreed step counts]) and on stopping (Note
// [Preemption]).
TrainResult train(const TrainingArguments& args, TrainTask& task, std::ostream& out,
                  dist::ProcessGroupPtr group = nullptr);

// kiln::Error unless args.output_dir and the input model directory args.model
// are apart: the output directory must not be, contain or lie inside it
// (compared as canonical paths, and as the same file for bind mounts), since
// the final save would overwrite the pretrained weights and
// --overwrite-output-dir would delete them. Nothing to check without --model.
// The directory of --tokenizer / --vocab must not be, or lie inside, the
// output directory either (the saved tokenizer files would replace them).
void check_output_dir_apart_from_model(const TrainingArguments& args);

// The training sampler of a task: each rank's shard under data parallel,
// else a seeded random permutation.
std::shared_ptr<const data::Sampler> training_sampler(const TrainingArguments& args, size_t dataset_size);

// The steps (first, last) of a --profile-steps value "A:B"; kiln::Error
// naming the flag unless 1 <= A <= B.
std::pair<int64_t, int64_t> parse_profile_steps(const std::string& value);

// ceil(epochs * batches_per_epoch / grad_accum), or max_steps when > 0.
int64_t total_training_steps(const TrainingArguments& args, size_t batches_per_epoch);

}  // namespace kiln::train
