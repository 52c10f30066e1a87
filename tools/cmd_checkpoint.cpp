// `kiln checkpoint consolidate DIR`: a checkpoint written with a sharded
// optimizer (--shard-optimizer; one optimizer-shard-R-of-N.safetensors per
// rank, Note [Optimizer shards] in train/checkpoint.h) rewritten with the
// shards merged into optimizer.safetensors: the single-file state any tool
// (or a resume on any number of ranks, which also reads the shards) takes.
// The rewrite is atomic (Note [Atomic checkpoints]); nothing is lost.
#include <iostream>
#include <memory>

#include "kiln.h"
#include "tools/command.h"
#include "train/checkpoint.h"

namespace kiln::tools {
namespace {

const Registrar reg("checkpoint", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("checkpoint", "Work on training checkpoints");
  cmd->require_subcommand(1);
  auto* consolidate = cmd->add_subcommand(
      "consolidate", "Merge a checkpoint's per-rank optimizer shards into one optimizer.safetensors (in place, atomic)");
  auto dir = std::make_shared<std::string>();
  consolidate->add_option("DIR", *dir, "a checkpoint-STEP directory")->required();
  return [dir] {
    const int merged = train::consolidate_checkpoint(*dir);
    if (merged == 0) std::cerr << *dir << ": no optimizer shards; the checkpoint is already consolidated\n";
    else std::cerr << *dir << ": merged " << merged << " optimizer shards into optimizer.safetensors\n";
    return 0;
  };
});

}  // namespace
}  // namespace kiln::tools
