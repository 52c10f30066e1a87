// Subcommands of the `kiln` tool register themselves here: a file
// tools/cmd_NAME.cpp defines a static Registrar that adds a CLI11 subcommand
// and returns the function to run when that subcommand is chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace kiln::train {
struct TrainingArguments;
}

namespace kiln::tools {

// The fine-tuning data flags (--task, column flags, --no-header,
// --multi-label, --label-all-tokens) of finetune, evaluate and predict
// (tools/cmd_train.cpp).
void add_finetune_data_flags(CLI::App* cmd, train::TrainingArguments& args);

// setup(app) adds the subcommand and its flags; returns the callback that runs
// it (returning the process exit code). Called once at start-up.
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct CommandRegistry {
  static std::vector<std::pair<std::string, CommandSetup>>& all() {
    static std::vector<std::pair<std::string, CommandSetup>> commands;
    return commands;
  }
};

struct Registrar {
  Registrar(std::string name, CommandSetup setup) {
    CommandRegistry::all().emplace_back(std::move(name), std::move(setup));
  }
};

}  // namespace kiln::tools
