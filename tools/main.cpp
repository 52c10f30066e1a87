// kiln: the command-line tool. Each subcommand lives in tools/cmd_*.cpp.
#include <algorithm>
#include <iostream>
#include <map>

#include "core/error.h"
#include "kiln/version.h"
#include "tools/args_file.h"
#include "tools/command.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: a C++ deep-learning framework for transformers", "kiln"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::version());
  app.require_subcommand(1);
  // A flag given twice keeps its last value: command-line flags override --args-file ones.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::map<std::string, std::function<int()>> runners;
  for (auto& [name, setup] : kiln::tools::CommandRegistry::all()) runners[name] = setup(app);
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    args = kiln::tools::expand_args_file(app, std::move(args));
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
  try {
    for (auto* sub : app.get_subcommands()) return runners.at(sub->get_name())();
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
