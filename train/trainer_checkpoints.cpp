// TrainingRun's resume and saves (train/training_run.h): choosing and
// checking the checkpoint to continue (Note [Elastic resume] for another
// number of ranks), and writing one (with the optimizer shards of Note
// [Optimizer shards] under --shard-optimizer).
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "core/random.h"
#include "data/integrity.h"
#include "nn/hf_checkpoint.h"
#include "nn/safetensors.h"
#include "train/training_run.h"

namespace kiln::train::detail {
namespace {

// The fields that fix the model's shapes; a checkpoint must agree on all.
void check_same_architecture(const ModelConfig& saved, const ModelConfig& now, const std::string& where) {
  const char* fix = " (resume with the flags of the run that wrote it, or choose another --output-dir)";
  KILN_CHECK(saved.model_type() == now.model_type(), where, " was written for another model config: model_type is ",
             saved.model_type(), " there and ", now.model_type(), " here", fix);
  const auto& a = saved.facts().shape_fields;
  const auto& b = now.facts().shape_fields;
  KILN_CHECK(a.size() == b.size(), where, ": the shape fields of its config differ from this model's", fix);
  for (size_t i = 0; i < a.size(); ++i)
    KILN_CHECK(a[i] == b[i], where, " was written for another model config: ", a[i].first, " is ", a[i].second,
               " there and ", b[i].second, " here", fix);
}

std::map<std::string, Tensor> prefixed(const std::string& prefix, const std::map<std::string, Tensor>& m) {
  std::map<std::string, Tensor> out;
  for (auto& [k, v] : m) out[prefix + k] = v;
  return out;
}

std::map<std::string, Tensor> with_prefix(const std::string& prefix, const std::map<std::string, Tensor>& m) {
  std::map<std::string, Tensor> out;
  for (auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

// The CRC-32C of the task's vocab.txt, else of its tokenizer.json ("" when
// it writes neither): the run's vocabulary fingerprint, kept in every
// checkpoint.
std::string vocab_fingerprint(const TrainTask& task) {
  const std::map<std::string, std::string> files = task.extra_files();
  auto it = files.find("vocab.txt");
  if (it == files.end()) it = files.find("tokenizer.json");
  if (it == files.end()) return "";
  return data::crc32c_hex(
      data::crc32c({reinterpret_cast<const uint8_t*>(it->second.data()), it->second.size()}));
}

}  // namespace

// rank 0 picks the newest checkpoint that verifies; the others load the same step.
std::optional<FoundCheckpoint> TrainingRun::choose_checkpoint() {
  std::optional<FoundCheckpoint> found;
  double step = -1;
  if (main_) {
    std::vector<std::string> skipped;
    found = load_newest_valid_checkpoint(out_dir_.string(), &skipped);
    for (const std::string& why : skipped) out_ << "--resume: skipping " << why << "\n";
    if (found) {
      step = static_cast<double>(found->checkpoint.resume.step);
      KILN_CHECK(fs::path(found->path).filename() == "checkpoint-" + std::to_string(static_cast<int64_t>(step)),
                 found->path, "/trainer_state.json holds step ", static_cast<int64_t>(step),
                 ", which is not the directory's");
    }
  }
  if (distributed_) step = all_reduced(group_, {main_ ? step : -1.0}, dist::ReduceOp::Max)[0];
  KILN_CHECK(step >= 0, "--resume: no checkpoint in ", out_dir_.string(),
             " verifies (", distributed_ ? "rank 0 says why" : "see the lines above", ")");
  if (!main_) {
    const std::string path = (out_dir_ / ("checkpoint-" + std::to_string(static_cast<int64_t>(step)))).string();
    found = FoundCheckpoint{path, load_checkpoint(path)};
  }
  return found;
}

// Note [Elastic resume]: a checkpoint resumes on another number of ranks
// (or another per-rank batch) when the examples per step (batch size x ranks
// x accumulation) stay the same, so the schedule and the step count mean the
// same. The ranks of a data-parallel epoch take strided entries of one global
// order (data::DistributedSampler), so after k batches of B on N ranks they
// have seen exactly its first k B N entries (plus where the epoch started,
// LoaderState::epoch_start); the new ranks continue the epoch from there
// (Note [Elastic epochs], data/sampler.h), and later epochs are the new
// world's own. No example is seen twice or skipped in the epoch (beyond the
// padding DistributedSampler adds at an epoch's end, as always). The
// optimizer state is whole in every checkpoint (shards merged at load: Note
// [Optimizer shards]), and the RNG stream continues as in any resume. A
// same-world resume stays bitwise; an elastic one sums the gradients in
// another order and draws dropout from the generator in another order (an
// example's masking depends only on (seed, epoch, index): Note [Loader
// randomness]), so it matches the uninterrupted run in the examples it
// trains on, not bit for bit.
bool TrainingRun::is_elastic(const ResumeState& st) const {
  return st.world_size > 0 &&
         (st.world_size != args_.world_size || st.batch_size != args_.batch_size || st.grad_accum != args_.grad_accum);
}

void TrainingRun::check_resumable(const std::string& path, const LoadedCheckpoint& ck) {
  const ResumeState& st = ck.resume;
  check_same_architecture(ck.config, task_.model_config(), path);
  KILN_CHECK(st.amp == args_.amp, path, " was written with --amp ", st.amp, "; resume it with the same --amp (not ",
             args_.amp, ")");
  KILN_CHECK(st.kind == task_.kind(), path, " is a '", st.kind.empty() ? "?" : st.kind,
             "' checkpoint; this command trains '", task_.kind(), "'");
  const int64_t budget = std::max<int64_t>(0, st.max_tokens_per_batch);
  KILN_CHECK(budget == args_.max_tokens_per_batch, path, " was written with --max-tokens-per-batch ", budget,
             "; resume it with the same (not ", args_.max_tokens_per_batch, ")");
  KILN_CHECK(!(is_elastic(st) && budget > 0), path, " was written by ", st.world_size, " ranks with --batch-size ",
             st.batch_size, " and --grad-accum ", st.grad_accum,
             "; with --max-tokens-per-batch a resume needs the same ranks, --batch-size and --grad-accum "
             "(token-budgeted batches are cut by length: Note [Token-budgeted batches])");
  if (is_elastic(st)) {  // Note [Elastic resume]
    const int64_t was = st.batch_size * st.world_size * st.grad_accum;
    const int64_t now = args_.batch_size * args_.world_size * args_.grad_accum;
    KILN_CHECK(was == now, path, " was written by ", st.world_size, " ranks with --batch-size ", st.batch_size,
               " and --grad-accum ", st.grad_accum, " (", was, " examples per step); these ", args_.world_size,
               " ranks take ", now, ": choose --batch-size and --grad-accum so that batch size x ranks x "
               "accumulation is ", was);
    KILN_CHECK(st.total_steps == total_, path, ": its run spans ", st.total_steps, " steps; these flags give ", total_,
               " (resume with the same data and step flags)");
  } else {
    KILN_CHECK(st.total_steps == total_ && st.batches_per_epoch == static_cast<int64_t>(per_epoch_), path,
               ": its run spans ", st.total_steps, " steps of ", st.batches_per_epoch,
               " batches per epoch; these flags give ", total_, " steps of ", per_epoch_,
               " (resume with the same data, batch size and step flags)");
  }
  KILN_CHECK(st.has_rng && st.loader, path, "/trainer_state.json lacks the ", st.has_rng ? "\"loader\"" : "\"rng\"",
             " state a resume needs");
  const std::string& started_with = st.vocab_crc32c;
  KILN_CHECK(started_with.empty() || started_with == vocab_fingerprint_, path,
             ": the run started with another vocabulary (vocab.txt CRC-32C, else tokenizer.json's: ", started_with, "; this command's is ",
             vocab_fingerprint_.empty() ? "none" : vocab_fingerprint_,
             "): resume with the --model / --vocab of the run that wrote it");
  if (!started_with.empty()) vocab_fingerprint_ = started_with;
}

// Resume (rank 0 first repairs an interrupted save), or refuse to mix a new
// run into an old one's files.
void TrainingRun::resume_or_start() {
  vocab_fingerprint_ = vocab_fingerprint(task_);
  if (main_) {
    for (const std::string& line : recover_checkpoints(out_dir_.string())) out_ << line << "\n";
    std::error_code ec;  // optimizer shards of a save that never completed (Note [Optimizer shards])
    for (const auto& e : fs::directory_iterator(out_dir_, ec))
      if (e.path().filename().string().rfind(".optimizer-shards-", 0) == 0) fs::remove_all(e.path(), ec);
  }
  if (distributed_) group_->barrier();
  if (!args_.resume) {
    KILN_CHECK(list_checkpoints(out_dir_.string()).empty() && !fs::exists(out_dir_ / "metrics.jsonl"),
               out_dir_.string(),
               " already holds a training run; pass --resume to continue it or choose another --output-dir");
    return;
  }
  KILN_CHECK(!list_checkpoints(out_dir_.string()).empty(), "--resume: no checkpoint-* directory in ",
             out_dir_.string());
  const std::optional<FoundCheckpoint> found = choose_checkpoint();
  const LoadedCheckpoint& ck = found->checkpoint;
  const ResumeState& st = ck.resume;
  check_resumable(found->path, ck);
  model_.load_state_dict(ck.model);
  optimizer_->load_state_dict(with_prefix("optimizer.", ck.optimizer));
  scheduler_->load_state_dict(with_prefix("scheduler.", ck.optimizer));
  if (scaler_.is_enabled()) scaler_.load_state_dict(with_prefix("scaler.", ck.optimizer));
  default_generator().set_state({st.rng_seed, st.rng_offset});
  data::LoaderState loader = data::LoaderState::from_map(*st.loader);
  if (is_elastic(st)) {
    // Note [Elastic resume]: the old ranks together saw the first `seen` entries of the epoch's order.
    const int64_t seen = loader.epoch_start + loader.batches_consumed * st.batch_size * st.world_size;
    out_ << "elastic resume: " << found->path << " was written by " << st.world_size << " ranks of --batch-size "
         << st.batch_size << "; " << args_.world_size << " ranks of " << args_.batch_size
         << " continue epoch " << loader.epoch << " after its first " << seen << " examples\n";
    loader = data::LoaderState{loader.epoch, 0, seen};
  }
  task_.load_loader_state(loader);
  step_ = st.step;
  out_ << "resuming from " << found->path << " at step " << step_ << "/" << total_ << "\n";
}

// The optimizer's entries for a checkpoint (a collective when sharded: every
// rank writes its state into the staging directory, Note [Optimizer shards],
// and rank 0 gets their names in `moved`).
std::map<std::string, Tensor> TrainingRun::optimizer_entries_to_save(int64_t s,
                                                                     std::map<std::string, std::string>& moved) {
  std::map<std::string, Tensor> opt = prefixed("optimizer.", optimizer_->state_dict());
  if (!ddp_ || ddp_->shard_stage() == 0 || group_->size() == 1) return opt;
  const fs::path staging = optimizer_shard_staging_dir(out_dir_.string(), s);
  if (main_) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    fs::create_directories(staging);
  }
  group_->barrier();
  nn::NamedTensors mine;
  for (auto it = opt.begin(); it != opt.end();) {
    if (it->first.rfind("optimizer.state.", 0) == 0) {
      mine.emplace_back(it->first, it->second);
      it = opt.erase(it);
    } else {
      ++it;
    }
  }
  const std::string name = optimizer_shard_name(group_->rank(), group_->size());
  nn::save_safetensors((staging / name).string(), mine, {{"format", "kiln"}});
  group_->barrier();  // every shard is written before rank 0 moves them in
  for (int r = 0; r < group_->size(); ++r) {
    const std::string n = optimizer_shard_name(r, group_->size());
    moved[n] = (staging / n).string();
  }
  return opt;
}

void TrainingRun::save(int64_t s) {
  std::map<std::string, std::string> moved;
  std::map<std::string, Tensor> opt = optimizer_entries_to_save(s, moved);
  if (!main_) return;
  CheckpointData data;
  data.model = model_.state_dict();
  data.optimizer = std::move(opt);
  data.moved_files = std::move(moved);
  for (auto& [k, v] : prefixed("scheduler.", scheduler_->state_dict())) data.optimizer[k] = v;
  for (auto& [k, v] : prefixed("scaler.", scaler_.state_dict())) data.optimizer[k] = v;
  const data::LoaderState ls = task_.loader_state();
  const PhiloxState rng = default_generator().state();
  data.trainer_state = {{"step", s},
                        {"total_steps", total_},
                        {"batches_per_epoch", per_epoch_},
                        {"kind", task_.kind()},
                        {"amp", args_.amp},
                        {"epoch", static_cast<double>(ls.epoch) + static_cast<double>(ls.batches_consumed) / per_epoch_},
                        {"loader", ls.to_map()},
                        {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                        {"vocab_crc32c", vocab_fingerprint_},
                        {"world_size", args_.world_size},
                        {"batch_size", args_.batch_size},
                        {"grad_accum", args_.grad_accum},
                        {"max_tokens_per_batch", args_.max_tokens_per_batch},
                        {"optimizer_shards", data.moved_files.size()},
                        {"eval", result_.eval},
                        {"args", args_.to_json()}};
  data.config = task_.model_config();
  data.extra_files = task_.extra_files();
  result_.last_checkpoint = save_checkpoint(out_dir_.string(), s, data, static_cast<int>(args_.save_total_limit));
  if (!data.moved_files.empty()) fs::remove_all(optimizer_shard_staging_dir(out_dir_.string(), s));
}

}  // namespace kiln::train::detail
