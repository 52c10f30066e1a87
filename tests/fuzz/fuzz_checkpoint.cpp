// Fuzz target: a training checkpoint as `--resume` reads it: load_checkpoint
// (train/checkpoint.h: config.json, model.safetensors, optimizer.safetensors,
// trainer_state.json, its resume fields parsed by parse_resume_state), then
// the state loaders train() calls on what it read (LoaderState::from_map too):
// Module::load_state_dict, Optimizer (AdamW), Scheduler and GradScaler
// load_state_dict, each given its "optimizer." / "scheduler." / "scaler."
// entries of optimizer.safetensors.
//
// Input layout: the four files in that order, separated by the line
// "--8<--" ("\n--8<--\n"), written into an emptied checkpoint folder; fewer
// parts leave the later files missing. A fifth part is manifest.json as
// given (the manifest parser fuzzed); without one the target writes the
// manifest that matches the files (Note [Checkpoint manifest]), so inputs
// reach the readers behind the integrity check. The model is nn::Linear(3, 2)
// ("weight" [2, 3], "bias" [2]) with train()'s optimizer set-up: AdamW over
// param_groups_no_decay (group 0 the weight, group 1 the bias), a linear
// warmup schedule, and an enabled GradScaler (--amp fp16).
//
// Then one training step as train() takes it after a resume (loss scaled,
// backward, unscale_, scaler step, scheduler step, scaler update), with
// whatever state loaded (fresh state where a load was rejected).
//
// Properties: every load either succeeds or throws kiln::Error; an accepted
// trainer state is an object with an integer "step" equal to the parsed
// ResumeState's; an optimizer state that
// (likewise a schedule, a scaler state) gives back a state_dict() that loads
// again into a fresh one; the training step after the loads throws nothing.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataloader.h"
#include "data/integrity.h"
#include "nn/layers.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "scratch.h"
#include "train/checkpoint.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_checkpoint", what); }

// As train/trainer.cpp's with_prefix.
std::map<std::string, kiln::Tensor> with_prefix(const std::string& prefix,
                                                const std::map<std::string, kiln::Tensor>& m) {
  std::map<std::string, kiln::Tensor> out;
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

std::unique_ptr<kiln::optim::Optimizer> make_optimizer(const kiln::nn::Module& model) {
  auto groups = kiln::optim::param_groups_no_decay(model, 0.01);
  std::erase_if(groups, [](const kiln::optim::ParamGroup& g) { return g.params.empty(); });
  return std::make_unique<kiln::optim::AdamW>(std::move(groups), kiln::optim::AdamWOptions{});
}

template <typename F>
bool loads(F&& f) {
  try {
    f();
    return true;
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return false;  // rejected cleanly
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  const std::string dir = scratch.fresh_dir("checkpoint-1");
  const auto parts = kiln_fuzz::split(kiln_fuzz::as_text(data, size), "\n--8<--\n");
  static const char* const kFiles[] = {"config.json", "model.safetensors", "optimizer.safetensors",
                                       "trainer_state.json"};
  for (size_t i = 0; i < parts.size() && i < 4; ++i) kiln_fuzz::write_file(dir + "/" + kFiles[i], parts[i]);
  if (parts.size() > 4) {
    kiln_fuzz::write_file(dir + "/manifest.json", parts[4]);
  } else {
    nlohmann::json files = nlohmann::json::object();
    for (size_t i = 0; i < parts.size() && i < 4; ++i) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(parts[i].data());
      files[kFiles[i]] = {{"bytes", parts[i].size()},
                          {"crc32c", kiln::data::crc32c_hex(kiln::data::crc32c({bytes, parts[i].size()}))}};
    }
    const nlohmann::json manifest = {
        {"format", "kiln-checkpoint-manifest"}, {"version", 1}, {"step", 1}, {"files", files}};
    kiln_fuzz::write_file(dir + "/manifest.json", manifest.dump());
  }

  kiln::train::LoadedCheckpoint ck;
  if (!loads([&] { ck = kiln::train::load_checkpoint(dir); })) return 0;
  require(ck.trainer_state.is_object() && ck.trainer_state.contains("step") &&
              ck.trainer_state["step"].is_number_integer(),
          "an accepted trainer state is an object with an integer step");
  require(ck.resume.step == ck.trainer_state["step"].get<int64_t>() && ck.resume.step >= 0,
          "the parsed resume step is the file's, and not negative");
  if (ck.resume.loader) (void)loads([&] { (void)kiln::data::LoaderState::from_map(*ck.resume.loader); });

  kiln::nn::Linear model(3, 2);
  const auto optimizer = make_optimizer(model);
  kiln::optim::Scheduler scheduler(*optimizer, kiln::optim::linear_schedule_with_warmup(2, 10));
  kiln::optim::GradScaler scaler(kiln::optim::GradScalerOptions{.enabled = true});
  (void)loads([&] { model.load_state_dict(ck.model); });
  if (loads([&] { optimizer->load_state_dict(with_prefix("optimizer.", ck.optimizer)); })) {
    const auto fresh = make_optimizer(model);
    require(loads([&] { fresh->load_state_dict(optimizer->state_dict()); }),
            "a loaded optimizer state saves and loads again");
  }
  if (loads([&] { scheduler.load_state_dict(with_prefix("scheduler.", ck.optimizer)); })) {
    const auto fresh_optimizer = make_optimizer(model);
    kiln::optim::Scheduler fresh(*fresh_optimizer, kiln::optim::linear_schedule_with_warmup(2, 10));
    require(loads([&] { fresh.load_state_dict(scheduler.state_dict()); }), "a loaded schedule saves and loads again");
  }
  if (loads([&] { scaler.load_state_dict(with_prefix("scaler.", ck.optimizer)); })) {
    kiln::optim::GradScaler fresh(kiln::optim::GradScalerOptions{.enabled = true});
    require(loads([&] { fresh.load_state_dict(scaler.state_dict()); }), "a loaded scaler state saves and loads again");
  }

  try {
    scaler.scale(kiln::sum(model.forward(kiln::ones({4, 3})))).backward();
    scaler.unscale_(*optimizer);
    if (scaler.step(*optimizer)) scheduler.step();
    scaler.update();
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    require(false, "a training step after loading the checkpoint does not throw");
  }
  return 0;
}
