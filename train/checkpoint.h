// Training checkpoints: one directory per save, written atomically and
// verified when read.
//
//   OUTPUT/checkpoint-STEP/
//     config.json            the model config (Hugging Face layout)
//     model.safetensors      weights, Hugging Face names (transformers loads it)
//     optimizer.safetensors  optimizer and scheduler state tensors
//     trainer_state.json     step, epoch, data-loader position, RNG state,
//                            scheduler/scaler scalars, metrics, command-line config
//     vocab.txt, ...         CheckpointData::extra_files
//     manifest.json          size and CRC-32C of every file above (Note [Checkpoint manifest])
//
// Note [Atomic checkpoints]: a save writes everything into a sibling
// temporary directory (".checkpoint-STEP.tmp-PID"), fsyncs every file and the
// directory, then renames it to checkpoint-STEP and fsyncs the parent. When
// checkpoint-STEP already exists (a step saved again, e.g. by a run resumed
// from an earlier checkpoint), the old one is never deleted first: it is
// renamed aside (".checkpoint-STEP.aside"), the new one renamed in, and only
// then the aside copy removed. A process killed at any moment therefore
// leaves a loadable checkpoint-STEP, or its aside copy when the kill came
// between the two renames; recover_checkpoints() (run by every save and by
// --resume) renames such an aside copy back, and removes temporary
// directories and aside copies that a complete checkpoint has replaced.
// tests/test_checkpoint.cpp kills the saving process at each point
// (KILN_TEST_CRASH_AT, below) and at random moments.
//
// Note [Checkpoint manifest]: manifest.json, written last into the temporary
// directory, lists every other file of the checkpoint with its size in bytes
// and its CRC-32C (data/integrity.h):
//   {"format": "kiln-checkpoint-manifest", "version": 1, "step": STEP,
//    "files": {"config.json": {"bytes": 712, "crc32c": "1c2d3e4f"}, ...}}
// load_checkpoint() verifies it first, and a damaged, truncated or missing
// file is a kiln::Error naming it; load_newest_valid_checkpoint() (--resume)
// falls back to the newest checkpoint that verifies and says why it skipped
// the others.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/nn/model_config.h"
#include "kiln/nn/module.h"

namespace kiln::train {

struct CheckpointData {
  nn::NamedTensors model;                       // state_dict() of the model
  std::map<std::string, Tensor> optimizer;      // optimizer + scheduler tensors
  nlohmann::json trainer_state;                 // must hold "step"
  ModelConfig config;  // Note [Model-agnostic config]
  // Further files by name (e.g. "vocab.txt", "tokenizer_config.json"), so a
  // checkpoint is a complete Hugging Face model directory. Plain names only.
  std::map<std::string, std::string> extra_files;
  // Finished files moved (renamed) into the checkpoint by name, e.g. the
  // other ranks' optimizer shards (Note [Optimizer shards]). Plain names only.
  std::map<std::string, std::string> moved_files;
};

// Note [Optimizer shards]: with a sharded optimizer (--shard-optimizer) each
// rank holds the state of the parameters it owns, so a checkpoint keeps
// optimizer.safetensors for what all ranks share (param_groups, scheduler,
// scaler) and one optimizer-shard-R-of-N.safetensors per rank with its
// "optimizer.state.<i>.*" entries. Each rank writes its shard into
// OUTPUT/.optimizer-shards-STEP/ (a shared filesystem, as --resume needs
// anyway); rank 0 moves them into the checkpoint before its manifest, so the
// manifest covers them and the save stays atomic. load_checkpoint() merges
// the shards into one optimizer map (the unsharded state: a checkpoint
// resumes on any number of ranks, sharded or not); `kiln checkpoint
// consolidate DIR` rewrites a checkpoint with its shards merged into
// optimizer.safetensors.
std::string optimizer_shard_name(int rank, int world);  // "optimizer-shard-R-of-N.safetensors"
// OUTPUT/.optimizer-shards-STEP: where the ranks write their shards of a save.
std::string optimizer_shard_staging_dir(const std::string& output_dir, int64_t step);
// Adds the "optimizer.state.*" entries of dir's optimizer shards (if any) to
// `optimizer`: kiln::Error when a shard is missing from the set (R of N for
// every R < N), when two files hold the same entry, or an entry is not state.
void merge_optimizer_shards(const std::string& dir, std::map<std::string, Tensor>& optimizer);
// Rewrites checkpoint `dir` (atomically, Note [Atomic checkpoints]) with its
// optimizer shards merged into optimizer.safetensors; every other file kept.
// Returns the number of shards merged (0: nothing to do, the checkpoint is left as it is).
int consolidate_checkpoint(const std::string& dir);

// Writes OUTPUT/checkpoint-STEP atomically (replacing one of the same step);
// returns its path. Runs recover_checkpoints() first. With keep_last > 0,
// deletes older complete checkpoints beyond the newest keep_last.
std::string save_checkpoint(const std::string& output_dir, int64_t step, const CheckpointData& data,
                            int keep_last = 0);

// Repairs what an interrupted save left in output_dir (Note [Atomic
// checkpoints]): renames an aside copy back to checkpoint-STEP when that is
// missing, removes aside copies that checkpoint-STEP replaced and stale
// temporary directories. Returns a line per aside copy put back. Call it from
// one process only (rank 0).
std::vector<std::string> recover_checkpoints(const std::string& output_dir);

// Complete checkpoints under output_dir, oldest first (by step).
std::vector<std::string> list_checkpoints(const std::string& output_dir);
// The newest complete checkpoint, or nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& output_dir);

// What --resume reads from trainer_state.json, checked once here so that a
// key of the wrong type is a kiln::Error naming the file (not a JSON library
// exception in the trainer). Keys train() writes; a missing one takes the
// default below (an older or hand-written state), and a missing "rng" or
// "loader" leaves has_rng / loader empty (resume then refuses it).
struct ResumeState {
  int64_t step = 0;                   // required, >= 0
  std::string amp = "none";
  std::string kind;
  int64_t total_steps = -1;
  int64_t batches_per_epoch = -1;
  std::string vocab_crc32c;           // "" = not recorded
  bool has_rng = false;
  uint64_t rng_seed = 0, rng_offset = 0;
  std::optional<std::map<std::string, int64_t>> loader;
  // The writing run's ranks, per-rank batch and accumulation (-1: not
  // recorded, an older checkpoint: taken as this run's). Note [Elastic resume].
  int64_t world_size = -1, batch_size = -1, grad_accum = -1;
  // The writing run's --max-tokens-per-batch (-1: not recorded, i.e. 0).
  int64_t max_tokens_per_batch = -1;
};
// kiln::Error "<path>: ..." for anything not of the types above.
ResumeState parse_resume_state(const nlohmann::json& trainer_state, const std::string& path);

struct LoadedCheckpoint {
  std::map<std::string, Tensor> model;
  std::map<std::string, Tensor> optimizer;
  nlohmann::json trainer_state;
  ResumeState resume;                 // parse_resume_state(trainer_state)
  ModelConfig config;
};

// Checks dir against its manifest.json (Note [Checkpoint manifest]):
// kiln::Error naming the file that is missing, truncated or damaged.
void verify_checkpoint(const std::string& dir);

// Verifies, then reads a checkpoint directory; kiln::Error naming the file
// for anything missing, damaged or malformed.
LoadedCheckpoint load_checkpoint(const std::string& dir);

// The newest checkpoint under output_dir that loads, with its path; each one
// skipped on the way appends "checkpoint-N: why" to `skipped`. nullopt when
// none loads.
struct FoundCheckpoint {
  std::string path;
  LoadedCheckpoint checkpoint;
};
std::optional<FoundCheckpoint> load_newest_valid_checkpoint(const std::string& output_dir,
                                                            std::vector<std::string>* skipped = nullptr);

// Test hook: when the environment variable KILN_TEST_CRASH_AT equals `point`,
// the process kills itself with SIGKILL here. save_checkpoint's points are
// "checkpoint-before-rename" (the new copy complete in its temporary
// directory), "checkpoint-after-aside" (an old copy of the step renamed
// aside, the new one not yet in) and "checkpoint-after-swap" (the new copy
// in, the aside copy not yet removed).
void crash_point_for_tests(const char* point);

}  // namespace kiln::train
