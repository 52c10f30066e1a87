// Fuzz target: `--args-file FILE` (tools/args_file.h), against the real flags
// of kiln pretrain / finetune / evaluate: this target is built from
// tools/args_file.cpp and tools/cmd_train.cpp (tests/fuzz.cmake), and sets
// up the CLI11 app as tools/main.cpp does.
//
// Input: the JSON file, written to a scratch file, given in turn to
// `kiln SUB --args-file FILE --output-dir out` for SUB = pretrain, finetune
// and evaluate.
//
// Properties: expanding either succeeds or throws kiln::Error; the expanded
// command line is the subcommand, then the file's flags, then the original
// arguments unchanged; parsing it either succeeds or throws CLI::ParseError
// (which tools/main.cpp reports as a usage error), nothing else.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "scratch.h"
#include "tools/args_file.h"
#include "tools/command.h"

namespace {

void require(bool ok, const char* what) { kiln_fuzz::require(ok, "fuzz_args_file", what); }

void run(const char* command, const std::string& file) {
  // As tools/main.cpp.
  CLI::App app{"kiln"};
  app.require_subcommand(1);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::map<std::string, std::function<int()>> runners;
  for (auto& [name, setup] : kiln::tools::CommandRegistry::all()) runners[name] = setup(app);
  require(runners.count(command) == 1, "the command is registered");

  const std::vector<std::string> args = {command, "--args-file", file, "--output-dir", "out"};
  std::vector<std::string> expanded;
  try {
    expanded = kiln::tools::expand_args_file(app, args);
  } catch (const kiln::Error& e) {
    kiln_fuzz::rejected(e);
    return;  // rejected cleanly
  }
  require(expanded.size() >= args.size() && expanded[0] == args[0] &&
              std::equal(args.begin() + 1, args.end(), expanded.end() - static_cast<std::ptrdiff_t>(args.size() - 1)),
          "the file's flags go between the subcommand and the original arguments");
  std::reverse(expanded.begin(), expanded.end());  // CLI11 takes the arguments last first
  try {
    app.parse(expanded);
  } catch (const CLI::ParseError&) {
    return;  // a usage error, as for the command line's own flags
  }
  require(app.get_subcommands().size() == 1, "one subcommand chosen");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln_fuzz::Scratch scratch;
  const std::string file = scratch.fresh_dir() + "/args.json";
  kiln_fuzz::write_file(file, kiln_fuzz::as_text(data, size));
  for (const char* command : {"pretrain", "finetune", "evaluate"}) run(command, file);
  return 0;
}
